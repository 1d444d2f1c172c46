"""Storage and services on a rolled-back session, on both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest
from normwatch.server.auth import Principal, authenticate, create_token
from normwatch.server.batch import BatchError, parse_batch
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, query, runs
from normwatch.server.storage.points import point_count
from normwatch.server.storage.runs import lineage_of
from sqlalchemy.orm import Session


def principal(session: Session, scope: str = "admin") -> Principal:
    secret, _ = create_token(session, "storage-tests", scope)  # type: ignore[arg-type]
    who = authenticate(session, secret)
    assert who is not None
    return who


def test_lineage_of_restarts() -> None:
    assert lineage_of([(1, None)]).ranges == ((1, None, None),)
    assert lineage_of([(1, 0), (2, 500), (3, 300)]).ranges == ((3, 300, None), (1, 0, 300))
    assert lineage_of([(1, 0), (2, 500), (3, 700)]).ranges == (
        (3, 700, None),
        (2, 500, 700),
        (1, 0, 500),
    )


def test_ingest_and_read_with_nan_and_restart(db_session: Session) -> None:
    who = principal(db_session)
    run_out = runs.create_or_resume(db_session, who, RunCreate(name="r", start_step=0))
    run, _ = runs.get_run(db_session, run_out.id)  # type: ignore[misc]
    batch = parse_batch(
        {"steps": [0, 1, 2, 3], "metrics": {"g": [1.0, "NaN", None, "Infinity"]}}, max_points=100
    )
    assert ingest.ingest_batch(db_session, run.id, batch) == ingest.Ingested(3, 1, 0)
    [s] = query.read_series(db_session, run, ["g"])
    assert s.steps.tolist() == [0, 1, 3]
    assert math.isnan(s.values[1]) and s.values[2] == math.inf

    runs.create_or_resume(db_session, who, RunCreate(name="r", start_step=1))
    db_session.refresh(run)
    assert run.segment == 2
    again = parse_batch({"steps": [1, 2], "metrics": {"g": [5.0, 6.0]}}, max_points=100)
    ingest.ingest_batch(db_session, run.id, again)
    [s] = query.read_series(db_session, run, ["g"])
    assert s.steps.tolist() == [0, 1, 2]
    assert s.values.tolist() == [1.0, 5.0, 6.0]
    assert point_count(db_session, run.key) == 5


def test_ingest_rejects_future_segment(db_session: Session) -> None:
    who = principal(db_session)
    run_out = runs.create_or_resume(db_session, who, RunCreate(name="r2"))
    run, _ = runs.get_run(db_session, run_out.id)  # type: ignore[misc]
    with pytest.raises(BatchError, match="segment"):
        ingest.ingest_batch(
            db_session,
            run.id,
            parse_batch({"steps": [1], "metrics": {"g": [1]}, "segment": 2}, max_points=10),
        )


def test_series_downsamples_and_keeps_spike(db_session: Session) -> None:
    who = principal(db_session)
    run_out = runs.create_or_resume(db_session, who, RunCreate(name="r3"))
    run, _ = runs.get_run(db_session, run_out.id)  # type: ignore[misc]
    values = np.full(20_000, 0.25)
    values[12_345] = 7.0
    doc = {"steps": list(range(20_000)), "metrics": {"g": values.tolist()}}
    ingest.ingest_batch(db_session, run.id, parse_batch(doc, max_points=100_000))
    [s] = query.read_series(db_session, run, ["g"], points=100)
    assert s.downsampled and s.total_points == 20_000
    assert len(s.steps) <= 400 and 12_345 in s.steps.tolist()
    with pytest.raises(ValueError, match="points"):
        query.read_series(db_session, run, ["g"], points=0)


def test_read_token_scope(db_session: Session) -> None:
    who = principal(db_session, "read")
    assert who.can("read") and not who.can("ingest") and not who.can("admin")
    admin = principal(db_session, "admin")
    assert admin.can("read") and admin.can("ingest")
