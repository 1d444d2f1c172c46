"""One point, one value, on both backends: the first value stored for (segment, metric,
step) stands whatever the timing (the same batch, a later batch, after compaction, after
retention kept only summaries), later ones are counted as ignored and never stored, and a
restart's new segment holds new points."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import text

from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.models import AlertRule, utcnow
from normwatch.server.services import ingest
from normwatch.server.storage import retention
from normwatch.server.storage.policy import Policy
from tests.helpers.committed import (
    Sessions,
    compact,
    count_rows,
    new_run,
    post,
    resume,
    stored,
    the_run,
)


@pytest.fixture
def sessions(db_url: str) -> Iterator[Sessions]:
    engine = build_engine(db_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def post_doc(sessions: Sessions, run_id: str, doc: dict[str, object]) -> tuple[int, dict[str, int]]:
    with session_scope(sessions) as session:
        got = ingest.ingest_batch(session, run_id, parse_batch(doc, max_points=10**6))
    return got.points, got.ignored


def as_dict(sessions: Sessions, run_id: str, metric: str) -> dict[int, float]:
    steps, values = stored(sessions, run_id, metric)
    return dict(zip(steps.tolist(), values.tolist(), strict=True))


def test_a_step_given_twice_in_one_batch_keeps_each_metrics_first_value(
    sessions: Sessions,
) -> None:
    run = new_run(sessions)
    doc = {
        "steps": [5, 6, 5, 6, 5],
        "metrics": {
            "loss": [1.0, 2.0, 9.0, None, 8.0],  # 5 twice more: both ignored
            "lr": [None, None, 0.1, 0.2, None],  # logged once a step: nothing ignored
            "gnorm": ["NaN", None, 3.0, None, None],  # the first value is a NaN: it stands
        },
    }
    assert post_doc(sessions, run, doc) == (5, {"loss": 2, "gnorm": 1})
    assert as_dict(sessions, run, "loss") == {5: 1.0, 6: 2.0}
    assert as_dict(sessions, run, "lr") == {5: 0.1, 6: 0.2}
    steps, values = stored(sessions, run, "gnorm")
    assert steps.tolist() == [5] and np.isnan(values[0])


def test_later_batches_are_counted_not_stored_whatever_their_values(sessions: Sessions) -> None:
    run = new_run(sessions)
    assert post(sessions, run, np.arange(10), a=np.arange(10.0)).ignored == {}
    again = post(sessions, run, np.arange(5, 15), a=-np.arange(5.0, 15.0), b=np.ones(10))
    assert (again.points, again.ignored) == (15, {"a": 5})
    assert as_dict(sessions, run, "a") == {s: float(s) if s < 10 else -float(s) for s in range(15)}
    same = post(sessions, run, np.arange(5, 15), a=-np.arange(5.0, 15.0), b=np.ones(10))
    assert (same.points, same.ignored) == (0, {"a": 10, "b": 10}), "a re-sent batch: all ignored"


def test_points_re_sent_after_compaction_are_ignored_at_ingest(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps = np.arange(0, 20_000, 2)  # even steps: the odd ones are free
    post(sessions, run, steps, g=steps * 0.5)
    compact(sessions, run, Policy(chunk_points=1024))  # ten chunks
    assert count_rows(sessions, run, "blocks") == 0
    resent = post(sessions, run, steps[3000:6000], g=np.full(3000, 7.0))
    assert (resent.points, resent.ignored) == (0, {"g": 3000})
    assert count_rows(sessions, run, "blocks") == 0, "nothing left for compaction to drop"
    # Odd steps inside the compacted range are new points; the even ones beside them are not.
    mixed = np.arange(9_990, 10_010)
    result = post(sessions, run, mixed, g=np.full(20, -1.0))
    assert (result.points, result.ignored) == (10, {"g": 10})
    # Past the last compacted step: new (the run's last step is 19,998: not a fresh batch).
    tail = post(sessions, run, np.array([19_998, 19_999, 20_000]), g=np.array([1.0, 2.0, 3.0]))
    assert (tail.points, tail.ignored) == (2, {"g": 1})
    compact(sessions, run, Policy(chunk_points=1024))
    got = as_dict(sessions, run, "g")
    want = {int(s): s * 0.5 for s in steps} | {s: -1.0 for s in range(9_991, 10_010, 2)}
    want |= {19_999: 2.0, 20_000: 3.0}
    assert got == want
    with session_scope(sessions) as session:
        points = session.execute(
            text("SELECT sum(points) FROM series WHERE run_key = :k"),
            {"k": the_run(session, run).key},
        ).scalar_one()
    assert points == len(want)


def test_a_step_below_every_chunk_is_new_and_one_in_a_chunk_is_not(sessions: Sessions) -> None:
    run = new_run(sessions)
    post(sessions, run, np.arange(100, 3000), g=np.ones(2900))
    compact(sessions, run, Policy(chunk_points=1000))
    early = post(sessions, run, np.array([7, 100, 1500, 2999]), g=np.full(4, 2.0))
    assert (early.points, early.ignored) == (1, {"g": 3})
    compact(sessions, run, Policy(chunk_points=1000))
    assert as_dict(sessions, run, "g") == {7: 2.0} | {s: 1.0 for s in range(100, 3000)}


def test_steps_whose_chunks_retention_thinned_are_ignored(sessions: Sessions) -> None:
    """Retention kept only summaries of the old steps: a point there cannot be compared with
    the one logged, and compaction would not store it; ingest says so."""
    run = new_run(sessions)
    post(sessions, run, np.arange(0, 10_000, 2), g=np.ones(5000))
    with session_scope(sessions) as session:
        session.execute(
            text("UPDATE runs SET last_seen = :t WHERE id = :id"),
            {"t": utcnow() - timedelta(days=40), "id": run},
        )
    assert retention.sweep(sessions, 30, "summaries").runs == 1
    late = post(sessions, run, np.array([5, 6, 9998, 9999, 10_001]), g=np.full(5, 3.0))
    assert (late.points, late.ignored) == (2, {"g": 3})  # 9,999 and 10,001 are past them
    compact(sessions, run)
    assert count_rows(sessions, run, "blocks") == 0
    with session_scope(sessions) as session:
        points = session.execute(
            text("SELECT sum(points) FROM series WHERE run_key = :k"),
            {"k": the_run(session, run).key},
        ).scalar_one()
    assert points == 5002


def test_a_restart_opens_a_segment_whose_points_are_new(sessions: Sessions) -> None:
    run = new_run(sessions)
    post(sessions, run, np.arange(100), loss=np.full(100, 1.0))
    compact(sessions, run)
    resume(sessions, run, 50)  # from the checkpoint at step 50: segment 2
    again = post(sessions, run, np.arange(50, 120), loss=np.full(70, 2.0))
    assert (again.segment, again.points, again.ignored) == (2, 70, {})
    assert as_dict(sessions, run, "loss") == {s: 1.0 if s < 50 else 2.0 for s in range(120)}
    replay = post(sessions, run, np.arange(50, 60), loss=np.full(10, 3.0))
    assert (replay.points, replay.ignored) == (0, {"loss": 10})


def test_rules_see_only_the_values_stored(sessions: Sessions) -> None:
    run = new_run(sessions)
    post(sessions, run, np.arange(10), loss=np.ones(10))
    with session_scope(sessions) as session:  # made after the steps were stored
        session.add(
            AlertRule(
                project_id=the_run(session, run).project_id,
                name="loss not finite",
                metric="loss",
                condition={"kind": "non_finite"},
            )
        )
    late = post(sessions, run, np.array([3, 4]), loss=np.array([np.nan, np.nan]))
    assert (late.points, late.ignored) == (0, {"loss": 2})
    new = post(sessions, run, np.array([4, 10]), loss=np.array([np.nan, np.nan]))
    assert (new.points, new.ignored) == (1, {"loss": 1})
    with session_scope(sessions) as session:
        history = session.execute(
            text("SELECT state, step FROM alerts WHERE run_key = :k ORDER BY id"),
            {"k": the_run(session, run).key},
        ).all()
    assert [tuple(row) for row in history] == [("firing", 10)]
