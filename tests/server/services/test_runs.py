"""Runs through the services: what a run may hold across resumes and restarts."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from normwatch.server.errors import Conflict, Invalid
from normwatch.server.models import Run, Segment
from normwatch.server.schemas import SEGMENT_MAX, RunCreate
from normwatch.server.services.runs import create_or_resume
from tests.helpers.principals import principal


def test_resumes_cannot_grow_a_runs_config_or_tags_past_their_bounds(db_session: Session) -> None:
    who = principal(db_session)
    half = {f"k{i}": "v" * 1000 for i in range(40)}  # ~41 KB: fine alone
    create_or_resume(db_session, who, RunCreate(name="r", config=half, tags=["a"] * 1))
    other = {f"j{i}": "v" * 1000 for i in range(40)}
    with pytest.raises(Invalid, match=r"config: merged with the run's, it is \d+ bytes"):
        create_or_resume(db_session, who, RunCreate(name="r", config=other))
    create_or_resume(db_session, who, RunCreate(name="r", tags=[f"t{i}" for i in range(63)]))
    with pytest.raises(Invalid, match="the run would have 65 tags; a run may have at most 64"):
        create_or_resume(db_session, who, RunCreate(name="r", tags=["one-more"]))


def test_a_run_restarted_as_often_as_its_segments_allow_is_refused(db_session: Session) -> None:
    who = principal(db_session)
    made = create_or_resume(db_session, who, RunCreate(name="r", start_step=0))
    db_session.execute(update(Run).where(Run.id == made.id).values(segment=SEGMENT_MAX))
    run = db_session.scalar(select(Run).where(Run.id == made.id))
    assert run is not None
    db_session.add(Segment(run_key=run.key, segment=SEGMENT_MAX, start_step=0))
    db_session.flush()
    db_session.expire_all()
    with pytest.raises(Conflict, match="has restarted 32766 times"):
        create_or_resume(db_session, who, RunCreate(name="r", start_step=0))
