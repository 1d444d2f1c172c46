"""Series read and bulk load of one long metric, against the raw driver in the same run.

What is measured, per backend (Postgres and/or SQLite, each in a scratch database that the
script creates, migrates and removes):

* **load**: ``--steps`` steps of one metric (a noisy decaying curve with one spike at a
  random step) go in through the service path, ``parse_batch`` then ``ingest_batch``, in
  chunks of 100k steps, one transaction each. Baseline: the same rows, in the same chunks,
  into a bare table with the same columns and primary key, by ``COPY ... FROM STDIN`` with
  ``write_row`` on Postgres and by ``executemany`` on SQLite. Ratio: load rate / baseline.
* **at rest**: bytes per point of ``points`` (heap + primary-key index), from
  ``pg_total_relation_size`` after ``VACUUM ANALYZE`` on Postgres, from the file size on
  SQLite.
* **read**: ``query.read_series(..., points=1000)`` over the full range and over 10k steps
  centred on the spike (median of 7 after a warm-up), with the returned point counts and
  whether the spike survived. Baseline: the raw driver running
  ``SELECT step, value FROM points WHERE run_key=.. AND metric_id=.. ORDER BY step`` with
  ``fetchall`` over the same range. Ratio: read_series / raw fetch (above 1 = slower). The
  full-range read is also split into fetching rows into arrays and M4 in NumPy. The raw
  query also says ``AND segment = 1``, as the service's lineage filter does for a run that
  never restarted: without it neither database can walk the primary key in step order, and
  the baseline would pay a sort (or, on Postgres with one run, a sequential scan) that the
  service does not.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``, by default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, which must allow CREATE DATABASE)::

    .venv/bin/python benchmarks/series_read.py                  # 1M steps, both backends
    .venv/bin/python benchmarks/series_read.py --quick          # 100k steps, 3 repeats
    .venv/bin/python benchmarks/series_read.py --backend postgresql --steps 300000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _harness import Timing, say, scratch_postgres, scratch_sqlite, table, timed
from normwatch.server import storage
from normwatch.server.auth import authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.m4 import m4_select
from normwatch.server.models import Run
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, query, runs
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

METRIC = "grad/norm/total"
CHUNK = 100_000
POINTS = 1000
ZOOM = 10_000
SPIKE = 50.0
BARE_COLUMNS = "run_key, metric_id, segment, step, value"
BARE_TABLE = (
    "CREATE TABLE bare (run_key BIGINT NOT NULL, metric_id BIGINT NOT NULL, "
    "segment SMALLINT NOT NULL, step BIGINT NOT NULL, value DOUBLE PRECISION, "
    "PRIMARY KEY (run_key, metric_id, segment, step))"
)


@dataclass
class Result:
    backend: str
    steps: int
    load_pps: float = 0.0
    baseline_name: str = ""
    baseline_pps: float = 0.0
    bytes_per_point: float = 0.0
    at_rest_detail: str = ""
    reads: dict[str, tuple[Timing, int, bool | None]] = field(default_factory=dict)


def series_data(steps: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Steps 0..n-1; a decaying, noisy grad-norm-like curve with one spike at a random step."""
    rng = np.random.default_rng(seed)
    x = np.arange(steps, dtype=np.int64)
    values = 0.3 + 2.0 * np.exp(-x / max(1, steps // 8)) + 0.02 * rng.standard_normal(steps)
    spike = int(rng.integers(0, steps))
    values[spike] = SPIKE
    return x, values, spike


def chunks(steps: np.ndarray, values: np.ndarray) -> Iterator[tuple[list[int], list[float]]]:
    for lo in range(0, len(steps), CHUNK):
        yield steps[lo : lo + CHUNK].tolist(), values[lo : lo + CHUNK].tolist()


def create_run(factory: sessionmaker[Session]) -> str:
    with session_scope(factory) as session:
        secret, _ = create_token(session, "bench", "ingest")
        who = authenticate(session, secret)
        assert who is not None
        return runs.create_or_resume(session, who, RunCreate(name="series-read")).id


def load_rows(
    factory: sessionmaker[Session], run_id: str, data: list[tuple[list[int], list[float]]]
) -> float:
    """Seconds to store every chunk through ``parse_batch`` + ``ingest_batch``."""
    total = 0.0
    done = 0
    for steps, values in data:
        doc = {"steps": steps, "metrics": {METRIC: values}}
        t0 = time.perf_counter()
        batch = parse_batch(doc, max_points=len(steps))
        with session_scope(factory) as session:
            found = runs.get_run(session, run_id)
            assert found is not None
            ingest.ingest_batch(session, found[0], batch)
        total += time.perf_counter() - t0
        done += len(steps)
        say(f"  load (service): {done:>10,} points, {done / total:>10,.0f} points/s")
    return total


def load_baseline(
    engine: Engine, run_key: int, metric_id: int, data: list[tuple[list[int], list[float]]]
) -> float:
    """Seconds to put the same rows into ``bare`` with the raw driver, one commit a chunk."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(BARE_TABLE)
        raw.commit()
        total = 0.0
        done = 0
        for steps, values in data:
            t0 = time.perf_counter()
            if engine.dialect.name == "postgresql":
                with cur.copy(f"COPY bare ({BARE_COLUMNS}) FROM STDIN") as copy:
                    for step, value in zip(steps, values, strict=True):
                        copy.write_row((run_key, metric_id, 1, step, value))
            else:
                cur.executemany(
                    f"INSERT INTO bare ({BARE_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                    [(run_key, metric_id, 1, s, v) for s, v in zip(steps, values, strict=True)],
                )
            raw.commit()
            total += time.perf_counter() - t0
            done += len(steps)
            say(f"  load (baseline): {done:>9,} points, {done / total:>10,.0f} points/s")
        cur.close()
    finally:
        raw.close()
    return total


def at_rest(engine: Engine, rows: int) -> tuple[float, str]:
    """Bytes per stored point of ``points``, and how they split."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("VACUUM ANALYZE points")
            total, heap, index = conn.exec_driver_sql(
                "SELECT pg_total_relation_size('points'), pg_relation_size('points'), "
                "pg_indexes_size('points')"
            ).one()
        return total / rows, f"heap {heap / rows:.1f} + index {index / rows:.1f} B/point"
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
        size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
    return (pages - free) * size / rows, "whole file (rowid table + primary-key index)"


def measure_reads(
    engine: Engine,
    factory: sessionmaker[Session],
    run_id: str,
    run_key: int,
    metric_id: int,
    steps: int,
    spike: int,
    repeat: int,
) -> dict[str, tuple[Timing, int, bool | None]]:
    zoom_lo = max(0, min(spike - ZOOM // 2, steps - ZOOM))
    zoom_hi = zoom_lo + ZOOM - 1

    def series(start: int | None, end: int | None) -> Callable[[], query.Series]:
        def call() -> query.Series:
            with factory() as session:
                found = runs.get_run(session, run_id)
                assert found is not None
                return query.read_series(
                    session, found[0], [METRIC], start=start, end=end, points=POINTS
                )[0]

        return call

    def survived(s: query.Series) -> bool:
        hit = np.flatnonzero(s.steps == spike)
        return len(hit) == 1 and float(s.values[hit[0]]) == SPIKE

    out: dict[str, tuple[Timing, int, bool | None]] = {}
    for label, lo, hi in (("full", None, None), ("zoom", zoom_lo, zoom_hi)):
        name = f"read_series {label}"
        say(f"  timing {name} ({repeat} runs + warm-up)")
        timing, result = timed(series(lo, hi), repeat=repeat)
        out[name] = (timing, len(result.steps), survived(result))

    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        mark = "%s" if engine.dialect.name == "postgresql" else "?"
        sql = (
            f"SELECT step, value FROM points WHERE run_key = {mark} AND metric_id = {mark} "
            f"AND segment = {mark}"
        )
        for label, bounds in (("full", ()), ("zoom", (zoom_lo, zoom_hi))):
            text = sql + (f" AND step BETWEEN {mark} AND {mark}" if bounds else "")
            params = (run_key, metric_id, 1, *bounds)

            def fetch(text: str = text + " ORDER BY step", params: Any = params) -> Sequence[Any]:
                cur.execute(text, params)
                rows = cur.fetchall()
                raw.rollback()  # end the read transaction, as returning a pooled connection does
                return rows

            name = f"raw fetch {label}"
            say(f"  timing {name} ({repeat} runs + warm-up)")
            timing, rows = timed(fetch, repeat=repeat)
            out[name] = (timing, len(rows), None)
        cur.close()
    finally:
        raw.close()

    # Where the full-range read goes: rows into arrays, then M4.
    with factory() as session:
        lineage = storage.lineage_of(storage.segments_of(session, run_key))

        def read_points() -> tuple[np.ndarray, np.ndarray]:
            arrays = storage.read_points(session, run_key, metric_id, lineage, None, None)
            session.rollback()
            return arrays

        say(f"  timing read_points full ({repeat} runs + warm-up)")
        timing, (s, v) = timed(read_points, repeat=repeat)
        out["  of which read_points"] = (timing, len(s), None)
        say(f"  timing m4_select full ({repeat} runs + warm-up)")
        timing, keep = timed(lambda: m4_select(s, v, POINTS, int(s[0]), int(s[-1])), repeat=repeat)
        out["  of which m4_select"] = (timing, len(keep), None)
    return out


def run_backend(backend: str, url: str, steps: int, repeat: int, seed: int) -> Result:
    result = Result(backend, steps)
    engine = build_engine(url, pool_size=2)
    factory = session_factory(engine)
    try:
        run_id = create_run(factory)
        x, values, spike = series_data(steps, seed)
        data = list(chunks(x, values))
        say(f"[{backend}] {steps:,} steps of {METRIC!r}, spike at step {spike:,}")
        load_s = load_rows(factory, run_id, data)
        result.load_pps = steps / load_s
        with factory() as session:
            run = session.query(Run).filter(Run.id == run_id).one()
            run_key = run.key
            metric_id = storage.metric_ids_by_name(session, run_key, [METRIC])[METRIC]
            stored = storage.point_count(session, run_key)
        if stored != steps:
            raise RuntimeError(f"stored {stored} points, expected {steps}")
        result.bytes_per_point, result.at_rest_detail = at_rest(engine, stored)
        say(f"  at rest: {result.bytes_per_point:.1f} bytes/point ({result.at_rest_detail})")
        result.baseline_name = "COPY write_row" if backend == "postgresql" else "executemany"
        base_s = load_baseline(engine, run_key, metric_id, data)
        result.baseline_pps = steps / base_s
        if backend == "postgresql":
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    "VACUUM ANALYZE bare"
                )
        result.reads = measure_reads(
            engine, factory, run_id, run_key, metric_id, steps, spike, repeat
        )
    finally:
        engine.dispose()
    return result


def report(results: list[Result]) -> None:
    for r in results:
        say(f"\n## {r.backend}, {r.steps:,} steps, points={POINTS}\n")
        rows = []
        for name, (timing, count, spike) in r.reads.items():
            rows.append(
                [
                    name,
                    f"{timing.median_ms:,.1f}",
                    f"{timing.min_ms:,.1f}–{timing.max_ms:,.1f}",
                    f"{count:,}",
                    "" if spike is None else ("yes" if spike else "NO"),
                ]
            )
        say(table(["read", "median ms", "range ms", "points", "spike kept"], rows))
        full = r.reads["read_series full"][0].median_ms / r.reads["raw fetch full"][0].median_ms
        zoom = r.reads["read_series zoom"][0].median_ms / r.reads["raw fetch zoom"][0].median_ms
        say("")
        say(
            table(
                ["measure", "value"],
                [
                    ["load, service (points/s)", f"{r.load_pps:,.0f}"],
                    [f"load, {r.baseline_name} (points/s)", f"{r.baseline_pps:,.0f}"],
                    ["load ratio service / baseline", f"{r.load_pps / r.baseline_pps:.2f}"],
                    ["bytes per point at rest", f"{r.bytes_per_point:.1f} ({r.at_rest_detail})"],
                    ["read ratio read_series / raw fetch, full", f"{full:.2f}"],
                    ["read ratio read_series / raw fetch, zoom", f"{zoom:.2f}"],
                ],
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--steps", type=int, default=None, help="default 1,000,000")
    parser.add_argument("--quick", action="store_true", help="100k steps, 3 timed repeats")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per read (7)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    steps = args.steps or (100_000 if args.quick else 1_000_000)
    repeat = args.repeat or (3 if args.quick else 7)
    if steps < ZOOM:
        parser.error(f"--steps must be at least {ZOOM}")
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = []
    for backend in backends:
        scratch: AbstractContextManager[str] = (
            scratch_postgres("normwatch_bench") if backend == "postgresql" else scratch_sqlite()
        )
        with scratch as url:
            results.append(run_backend(backend, url, steps, repeat, args.seed))
    report(results)
    say(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
