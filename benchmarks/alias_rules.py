"""Metric aliases inside the ingest transaction: what resolving rule metrics through a
project's aliases adds to storing a batch.

What is measured: `services.ingest.store_batch` called in this process (the transaction a
``POST /metrics`` runs on a worker thread, without HTTP) on a scratch Postgres database
that the script creates, migrates and drops. Two projects with the same 50 enabled rules
(as in ``alert_latency.py``: thresholds on ``grad/norm/total`` and ``train/loss`` that
never fire, a spike on ``grad/norm/layers.*``, ``non_finite`` on ``params/norm/*``, a
threshold on ``updates/norm/*``, and 42 on names nobody logs):

* baseline: a project without aliases whose run logs the canonical names;
* aliased: a project with all four presets (20 aliases) whose run logs OLMo-core's
  ``optim/total grad norm`` and ``train/CE loss`` in their place, so that two of the rules
  watch their metric through an alias.

Each run gets batches of ``--steps`` steps x (``--metrics`` per-layer metrics + the two
named ones), taking turns batch by batch after a warm-up, with steps moving on so that
every batch is new. Reported: median and p95 milliseconds a batch, and the ratio aliased /
baseline.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``)::

    .venv/bin/python benchmarks/alias_rules.py              # 200 batches each, 25 x 1000
    .venv/bin/python benchmarks/alias_rules.py --quick      # 40 batches each
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _harness import percentile, say, scratch_postgres, table

from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory
from normwatch.server.models import AlertRule, Project, Run
from normwatch.server.services import ingest
from normwatch.server.storage.aliases import save_aliases

RULES: list[tuple[str, dict[str, Any]]] = [
    ("grad/norm/total", {"kind": "threshold", "op": ">=", "value": 1e9}),
    ("train/loss", {"kind": "threshold", "op": ">=", "value": 1e9}),
    ("grad/norm/layers.*", {"kind": "spike", "factor": 50.0, "window": 20}),
    ("params/norm/*", {"kind": "non_finite"}),
    ("updates/norm/*", {"kind": "threshold", "op": ">=", "value": 1e9}),
    ("grad/norm/layers.0.*", {"kind": "slope", "op": ">", "per_1k_steps": 1e9, "window": 50}),
    *(
        (f"{family}/unlogged{i}", {"kind": "threshold", "op": ">=", "value": 1e9})
        for family in ("eval", "val", "system")
        for i in range(14)
    ),
    ("eval/**", {"kind": "non_finite"}),
    ("val/**", {"kind": "non_finite"}),
]


def setup(url: str, project: str, aliased: bool) -> tuple[int, str]:
    engine = build_engine(url, pool_size=1)
    try:
        with session_factory(engine)() as session, session.begin():
            row = Project(name=project)
            session.add(row)
            session.flush()
            for i, (metric, condition) in enumerate(RULES):
                session.add(
                    AlertRule(project_id=row.id, name=f"r{i}", metric=metric, condition=condition)
                )
            if aliased:
                presets = ["olmo-core", "llm.c", "megatron", "hf-trainer"]
                save_aliases(session, row.id, presets, {}, updated_by="bench")
            run = Run(id=f"{project}run".ljust(32, "0")[:32], project_id=row.id, name="r")
            session.add(run)
            session.flush()
            return row.id, run.id
    finally:
        engine.dispose()


def batch_doc(start: int, steps: int, metrics: int, names: tuple[str, str]) -> dict[str, Any]:
    at = list(range(start, start + steps))
    columns = {f"grad/norm/layers.{i % 48}.w{i // 48}": [1.0] * steps for i in range(metrics)}
    columns[names[0]] = [0.5] * steps
    columns[names[1]] = [3.0] * steps
    return {"steps": at, "metrics": columns}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, default=None, help="timed batches a run (200)")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--metrics", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="40 timed batches a run")
    args = parser.parse_args(argv)
    batches = args.batches or (40 if args.quick else 200)
    with scratch_postgres("aliases") as url:
        plain = setup(url, "plain", aliased=False)
        aliased = setup(url, "aliased", aliased=True)
        engine = build_engine(url, pool_size=2)
        sessions = session_factory(engine)
        kinds = {
            "baseline": (plain, ("grad/norm/total", "train/loss")),
            "aliased": (aliased, ("optim/total grad norm", "train/CE loss")),
        }
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        say(f"{batches} batches a run of {args.steps} steps x {args.metrics + 2} metrics")
        for n in range(batches + 5):
            for kind, ((project_id, run_id), names) in kinds.items():
                doc = batch_doc(n * args.steps, args.steps, args.metrics, names)
                batch = parse_batch(doc, max_points=10_000_000)
                t0 = time.perf_counter()
                ingest.store_batch(sessions, engine, run_id, batch, project_id=project_id)
                if n >= 5:
                    times[kind].append((time.perf_counter() - t0) * 1000)
        engine.dispose()
    rows = []
    for kind, samples in times.items():
        samples.sort()
        rows.append([kind, f"{percentile(samples, 50):.2f}", f"{percentile(samples, 95):.2f}"])
    base, alias = (sorted(times[k]) for k in ("baseline", "aliased"))
    print(table(["project", "median ms a batch", "p95 ms"], rows))
    print(f"ratio aliased / baseline: p50 {percentile(alias, 50) / percentile(base, 50):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
