"""Reading series through the services on a rolled-back session, on both backends: NaN,
restarts, and downsampling that keeps a spike.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sqlalchemy.orm import Session

from normwatch.server.batch import parse_batch
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, query, runs
from normwatch.server.storage.points import point_count
from tests.helpers.principals import principal


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
