"""Runs written and read through the services, each call in a transaction of its own that
commits: what compaction, retention and a sharded cluster see.

>>> run = new_run(sessions)  # doctest: +SKIP
>>> post(sessions, run, np.arange(3), g=np.array([1.0, np.nan, 2.0]))
>>> compact(sessions, run)
>>> stored(sessions, run, "g")
"""

from __future__ import annotations

import uuid

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import session_scope
from normwatch.server.models import Run
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, query, runs
from normwatch.server.storage import compaction, pyramid
from normwatch.server.storage.metric_ids import metric_ids_by_name
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of

Sessions = sessionmaker[Session]


def new_run(sessions: Sessions, start_step: int | None = None, name: str = "r") -> str:
    with session_scope(sessions) as session:
        secret, _ = create_token(session, f"c-{uuid.uuid4().hex[:10]}", "admin")
        who = authenticate(session, secret)
        assert who is not None
        return runs.create_or_resume(session, who, RunCreate(name=name, start_step=start_step)).id


def resume(sessions: Sessions, run_id: str, start_step: int) -> None:
    with session_scope(sessions) as session:
        found = runs.get_run(session, run_id)
        assert found is not None
        run, project = found
        secret, _ = create_token(session, project, "admin")
        who = authenticate(session, secret)
        assert who is not None
        runs.create_or_resume(session, who, RunCreate(name=run.name, start_step=start_step))


def the_run(session: Session, run_id: str) -> Run:
    found = runs.get_run(session, run_id)
    assert found is not None
    return found[0]


def post(
    sessions: Sessions, run_id: str, steps: np.ndarray, **metrics: np.ndarray
) -> ingest.Ingested:
    def enc(v: float) -> object:
        if np.isnan(v):
            return "NaN"
        return {np.inf: "Infinity", -np.inf: "-Infinity"}.get(v, v)

    body = {
        "steps": [int(s) for s in steps],
        "metrics": {k: [enc(float(x)) for x in v] for k, v in metrics.items()},
    }
    with session_scope(sessions) as session:
        return ingest.ingest_batch(session, run_id, parse_batch(body, max_points=10_000_000))


def stored(sessions: Sessions, run_id: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        lineage = lineage_of(segments_of(session, run.key))
        mid = metric_ids_by_name(session, run.key, [metric])[metric]
        pts = pyramid.read_all(session, run.key, mid, lineage, None, None)
        return pts.steps, pts.values


def series(sessions: Sessions, run_id: str, metric: str, **kw: int) -> query.Series:
    with session_scope(sessions) as session:
        [s] = query.read_series(session, the_run(session, run_id), [metric], **kw)
        return s


def compact(sessions: Sessions, run_id: str, policy: Policy | None = None) -> None:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        key, segment = run.key, run.segment
    for seg in range(1, segment + 1):
        compaction.compact_run(sessions, policy or Policy(), key, seg, 2**62)


def count_rows(sessions: Sessions, run_id: str, table: str) -> int:
    with session_scope(sessions) as session:
        key = the_run(session, run_id).key
        return int(
            session.execute(
                text(f"SELECT count(*) FROM {table} WHERE run_key = :k"), {"k": key}
            ).scalar_one()
        )
