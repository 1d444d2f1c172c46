"""The run clock behind the x axis by wall time, on both backends: a mark a batch that
moves the run on, at the batch's own time or its arrival, thinned as written, read along
the latest history of a restarted run, and a bad ``time`` refused with the field named."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy.orm import Session

from normwatch.server.batch import parse_batch
from normwatch.server.errors import BatchError
from normwatch.server.models import Run
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, runs
from normwatch.server.storage.clock import MIN_GAP_S, ClockThinning, clock_of
from tests.helpers.principals import principal


def a_run(session: Session, name: str, start_step: int | None = None) -> Run:
    who = principal(session, "ingest", project="clock")
    out = runs.create_or_resume(session, who, RunCreate(name=name, start_step=start_step))
    found = runs.get_run(session, out.id)
    assert found is not None
    return found[0]


def send(session: Session, run: Run, steps: list[int], at: float | None, **kw: Any) -> None:
    doc: dict[str, Any] = {"steps": steps, "metrics": {"loss": [1.0] * len(steps)}}
    if at is not None:
        doc["time"] = at
    ingest.ingest_batch(session, run.id, parse_batch(doc, max_points=10_000), **kw)
    session.commit()


def marks(session: Session, run: Run) -> list[tuple[int, float]]:
    steps, at = clock_of(session, run.key)
    return list(zip(steps.tolist(), at.tolist(), strict=True))


def test_each_batch_that_moves_the_run_on_marks_its_last_step(db_session: Session) -> None:
    run = a_run(db_session, "clock")
    send(db_session, run, [0, 1, 2], 1_700_000_000.0)
    send(db_session, run, [3, 4], 1_700_000_010.5)
    send(db_session, run, [1, 2], 1_700_000_020.0)  # a resend: the run did not move on
    before = time.time()
    send(db_session, run, [5], None)  # no time: when it arrived
    got = marks(db_session, run)
    assert got[:2] == [(2, 1_700_000_000.0), (4, 1_700_000_010.5)]
    assert got[2][0] == 5 and before - 1 <= got[2][1] <= time.time() + 1
    assert len(got) == 3


def test_marks_follow_the_latest_history_of_a_restarted_run(db_session: Session) -> None:
    run = a_run(db_session, "restarted")
    for step in range(0, 100, 10):
        send(db_session, run, [step], 1000.0 + step)
    db_session.expire_all()  # the run's last step was moved by SQL of its own
    assert a_run(db_session, "restarted", start_step=50).segment == 2  # back to step 50
    db_session.commit()
    send(db_session, run, [60], 5000.0)
    send(db_session, run, [70], 5010.0)
    assert marks(db_session, run) == [
        (0, 1000.0),
        (10, 1010.0),
        (20, 1020.0),
        (30, 1030.0),
        (40, 1040.0),
        (60, 5000.0),
        (70, 5010.0),
    ]


def test_thinning_keeps_a_mark_a_second_then_a_share_of_the_span() -> None:
    thin = ClockThinning()
    kept = [t for t in range(0, 100) if thin.due(1, 1, t / 4)]  # four batches a second
    assert kept == list(range(0, 100, 4))
    assert all(b - a >= MIN_GAP_S * 4 for a, b in zip(kept, kept[1:], strict=False))
    late = ClockThinning()
    kept_late = [t for t in range(0, 100_000, 5) if late.due(1, 1, float(t))]
    # After a day the gap is 1/2000 of the time so far: tens of marks an hour, not 720.
    assert 1_000 < len(kept_late) < 20_000
    assert late.due(1, 2, 10.0)  # another segment has a clock of its own


@pytest.mark.parametrize("bad", ["soon", -1, float("inf"), 2.0**36, True])
def test_a_bad_time_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(BatchError, match="^time: "):
        parse_batch({"steps": [1], "metrics": {"a": [1.0]}, "time": bad}, max_points=10)
