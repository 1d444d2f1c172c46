"""What the analyses' full-resolution read (`services.full_resolution.Reader.series`) costs
on hot points, float64 chunks and float32 chunks, for one series of ``--points`` points.

Every reader gives a point the same float64 (the export, `Api.history`, a series read at
full resolution and the analyses): a float32-compacted value in storage's one readable
form (`storage.pyramid.Gathered.finish`). On float32 chunks the analyses pay for that
form too; hot points and float64 chunks pay nothing.

    .venv/bin/python benchmarks/full_resolution_reads.py --points 1000000

Setup: a scratch SQLite database, one run, one metric of log-normal values at every step,
ingested in batches of 250,000 (`parse_batch` + `ingest_batch`), then compacted with
``Policy(precision=...)``. Printed: the median (and range) of ``--repeat`` reads in ms.
"""

from __future__ import annotations

import argparse

import numpy as np
from _harness import scratch_sqlite, table, timed

from normwatch.server.auth import authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, runs
from normwatch.server.services.full_resolution import Reader
from normwatch.server.storage import compaction
from normwatch.server.storage.policy import Policy

BATCH = 250_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    values = np.random.default_rng(0).lognormal(size=args.points)
    rows = []
    for stored in ("hot", "float64", "float32"):
        with scratch_sqlite() as url:
            engine = build_engine(url, pool_size=2)
            sessions = session_factory(engine)
            with sessions() as session, session.begin():
                secret, _ = create_token(session, "bench", "admin")
                who = authenticate(session, secret)
                assert who is not None
                made = runs.create_or_resume(session, who, RunCreate(name="r"))
                run_id = made.id
            for lo in range(0, args.points, BATCH):
                part = values[lo : lo + BATCH]
                body = {"steps": list(range(lo, lo + len(part))), "metrics": {"g": part.tolist()}}
                with sessions() as session, session.begin():
                    ingest.ingest_batch(session, run_id, parse_batch(body, max_points=BATCH))
            with sessions() as session:
                found = runs.get_run(session, run_id)
                assert found is not None
                key = found[0].key
            if stored != "hot":
                compaction.compact_run(sessions, Policy(precision=stored), key, 1, 2**62)
            with sessions() as session:
                run = runs.get_run(session, run_id)
                assert run is not None
                timing, got = timed(
                    lambda run=run, session=session: Reader(session, run[0], None, None).series(
                        ["g"]
                    ),
                    repeat=args.repeat,
                )
            assert len(got["g"][0]) == args.points
            engine.dispose()
        rows.append(
            [stored, f"{timing.median_ms:,.0f}", f"{timing.min_ms:,.0f}-{timing.max_ms:,.0f}"]
        )
    print(f"Reader.series of one series of {args.points:,} points (ms)")
    print(table(["stored as", "median", "range"], rows))


if __name__ == "__main__":
    main()
