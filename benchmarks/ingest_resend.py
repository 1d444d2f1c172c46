"""What a batch costs when some of its points may be stored already: the check against the
hot blocks and the compacted chunks that keeps a point's first value.

What is measured: `services.ingest.store_batch` called in this process (the transaction a
``POST /metrics`` runs on a worker thread, without HTTP) on a scratch Postgres database
that the script creates, migrates and drops. One run logs ``--metrics`` metrics at every
step for ``--steps`` steps, compacted into 4,096-point chunks, then ``--steps-hot`` more
steps that stay hot. Batches of 25 steps x ``--metrics`` metrics, each timed ``--repeat``
times:

* live: steps past the run's last one, as a trainer sends them (no check: the hot path);
* re-sent, hot: 25 steps the hot blocks hold (every point ignored);
* re-sent, compacted: 25 steps in the middle of the compacted range (every point ignored);
* gap, compacted: 25 steps between the compacted ones (the run logged even steps there;
  half the points are new).

Reported: median and p95 milliseconds a batch.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``)::

    .venv/bin/python benchmarks/ingest_resend.py             # 1,000 metrics x 40,000 steps
    .venv/bin/python benchmarks/ingest_resend.py --quick     # 200 metrics x 20,000 steps
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _harness import percentile, say, scratch_postgres, table
from sqlalchemy import text

from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.models import Project, Run
from normwatch.server.services import ingest
from normwatch.server.storage import compaction
from normwatch.server.storage.policy import Policy

BATCH_STEPS = 25


def batch_doc(steps: list[int], metrics: int, value: float) -> dict[str, Any]:
    return {
        "steps": steps,
        "metrics": {f"grad/norm/m{i}": [value] * len(steps) for i in range(metrics)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--metrics", type=int, default=None, help="metrics a step (1000)")
    parser.add_argument("--steps", type=int, default=None, help="compacted steps (40000)")
    parser.add_argument("--steps-hot", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="200 metrics x 20,000 steps")
    args = parser.parse_args(argv)
    metrics = args.metrics or (200 if args.quick else 1000)
    compacted = args.steps or (20_000 if args.quick else 40_000)
    with scratch_postgres("resend") as url:
        engine = build_engine(url, pool_size=2)
        sessions = session_factory(engine)
        with session_scope(sessions) as session:
            project = Project(name="bench")
            session.add(project)
            session.flush()
            run = Run(id="resend".ljust(32, "0"), project_id=project.id, name="r")
            session.add(run)
            session.flush()
            project_id, run_id, run_key = project.id, run.id, run.key

        def store(steps: list[int], value: float) -> ingest.Ingested:
            batch = parse_batch(batch_doc(steps, metrics, value), max_points=10**8)
            return ingest.store_batch(sessions, engine, run_id, batch, project_id=project_id)

        say(f"loading {metrics} metrics x {compacted:,} steps (even steps in the gap range)")
        gap = range(compacted // 4, compacted // 4 + 2 * BATCH_STEPS * args.repeat)
        per_load = max(1, 2_000_000 // metrics)
        for lo in range(0, compacted, per_load):
            store(
                [s for s in range(lo, min(lo + per_load, compacted)) if s not in gap or s % 2 == 0],
                1.0,
            )
        say("compacting")
        t0 = time.perf_counter()
        compaction.compact_run(sessions, Policy(), run_key, 1, 2**62)
        took = time.perf_counter() - t0
        with session_scope(sessions) as session:
            chunks, points = session.execute(
                text("SELECT count(*), sum(count) FROM chunks WHERE run_key = :k"), {"k": run_key}
            ).one()
        say(f"compacted {points:,} points into {chunks:,} chunks in {took:.1f} s")
        store(list(range(compacted, compacted + args.steps_hot)), 1.0)

        def span(first: int) -> list[int]:
            return list(range(first, first + BATCH_STEPS))

        live, middle = compacted + args.steps_hot, compacted // 2
        cases = {
            "live (steps past the last)": lambda i: span(live + i * BATCH_STEPS),
            "re-sent, hot": lambda i: span(compacted + i * BATCH_STEPS % args.steps_hot),
            "re-sent, compacted": lambda i: span(middle + i * BATCH_STEPS),
            "gap, compacted (half new)": lambda i: span(gap.start + i * BATCH_STEPS),
        }
        rows = []
        for name, steps_of in cases.items():
            samples = []
            ignored = stored = 0
            for i in range(args.repeat):
                t0 = time.perf_counter()
                got = store(steps_of(i), 2.0)
                samples.append((time.perf_counter() - t0) * 1000)
                stored += got.points
                ignored += sum(got.ignored.values())
            samples.sort()
            rows.append(
                [
                    name,
                    f"{percentile(samples, 50):.1f}",
                    f"{percentile(samples, 95):.1f}",
                    f"{stored:,} / {ignored:,}",
                ]
            )
        engine.dispose()
    print(f"batches of {BATCH_STEPS} steps x {metrics} metrics, {args.repeat} each")
    print(table(["batch", "median ms", "p95 ms", "points stored / ignored"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
