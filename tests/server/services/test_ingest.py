"""Ingest through the services on a rolled-back session, on both backends: re-sent and
overlapping batches stored once, non-finite values exact, latest values that only move
forward, the metric id cache, a connection lost mid-COPY, and the bounds on a run.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from sqlalchemy import insert, make_url, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory
from normwatch.server.errors import BatchError, Conflict
from normwatch.server.models import Event, Run
from normwatch.server.schemas import EventCreate, RunCreate
from normwatch.server.schemas.alerts import AlertRuleCreate
from normwatch.server.services import alert_rules, ingest, runs
from normwatch.server.services.alerting import PAUSE_EVERY
from normwatch.server.services.ingest import add_event
from normwatch.server.services.runs import create_or_resume
from normwatch.server.storage import blocks
from normwatch.server.storage.metric_ids import (
    MetricIdCache,
    metric_ids_by_name,
    resolve_metric_ids,
)
from normwatch.server.storage.points import latest_values, read_points, write_points
from normwatch.server.storage.runs import MAX_RUN_EVENTS, lineage_of, segments_of
from tests.helpers.floats import same_float
from tests.helpers.principals import principal


def new_run(session: Session, name: str) -> Run:
    out = runs.create_or_resume(session, principal(session, "ingest"), RunCreate(name=name))
    found = runs.get_run(session, out.id)
    assert found is not None
    return found[0]


def stored_points(session: Session, run: Run) -> dict[tuple[str, int], float | None]:
    """Every hot point of the run (NaN as None), asserting none is stored twice."""
    rows = session.execute(
        text(
            "SELECT m.name, b.first_step, b.last_step, b.count, b.steps, b.data FROM blocks b "
            "JOIN metrics m ON m.id = b.metric_id WHERE b.run_key = :rk"
        ),
        {"rk": run.key},
    )
    out: dict[tuple[str, int], float | None] = {}
    for name, first, last, count, steps, data in rows:
        pts = blocks.decode(first, last, count, steps, data)
        for step, value in zip(pts.steps.tolist(), pts.values.tolist(), strict=True):
            assert (name, step) not in out, f"{name} at {step} stored twice"
            out[(name, step)] = None if value != value else value
    return out


def latest(session: Session, run: Run) -> dict[str, tuple[int | None, float | None]]:
    """Each metric's latest (step, value) as listings show it (NaN as None)."""
    return {
        name: (step, None if value is None or value != value else value)
        for name, step, value in latest_values(session, run.key)
    }


def batch_of(steps: list[int], metrics: dict[str, list[Any]]) -> Any:
    return parse_batch({"steps": steps, "metrics": metrics}, max_points=1_000_000)


def test_resent_batch_after_commit_stores_nothing_twice(db_session: Session) -> None:
    run = new_run(db_session, "resend")
    batch = batch_of([10, 11, 12], {"a": [1.0, 2.0, 3.0], "b": [4.0, None, 6.0]})
    assert ingest.ingest_batch(db_session, run.id, batch).points == 5
    db_session.commit()
    again = ingest.ingest_batch(db_session, run.id, batch)  # every key stored: COPY falls back
    assert (again.points, again.ignored) == (0, {"a": 3, "b": 2})
    db_session.commit()
    assert stored_points(db_session, run) == {
        ("a", 10): 1.0,
        ("a", 11): 2.0,
        ("a", 12): 3.0,
        ("b", 10): 4.0,
        ("b", 12): 6.0,
    }
    assert latest(db_session, run) == {"a": (12, 3.0), "b": (12, 6.0)}


def test_overlapping_batch_stores_only_new_points(db_session: Session) -> None:
    run = new_run(db_session, "overlap")
    ingest.ingest_batch(db_session, run.id, batch_of(list(range(10)), {"a": [0.0] * 10}))
    db_session.commit()
    # Steps 5..9 are stored already (with 0.0): the stored values win, 10..14 are new.
    b_values: list[Any] = [2.0] * 7 + ["NaN", "Infinity", "-Infinity"]  # steps 14..5
    overlap = batch_of(list(range(14, 4, -1)), {"a": [1.0] * 10, "b": b_values})
    result = ingest.ingest_batch(db_session, run.id, overlap)
    assert (result.points, result.ignored) == (15, {"a": 5})
    points = stored_points(db_session, run)
    assert {k: v for k, v in points.items() if k[0] == "a"} == {
        ("a", s): (0.0 if s < 10 else 1.0) for s in range(15)
    }
    assert {k: v for k, v in points.items() if k[0] == "b"} == {
        **{("b", s): 2.0 for s in range(8, 15)},
        ("b", 7): None,
        ("b", 6): math.inf,
        ("b", 5): -math.inf,
    }
    assert latest(db_session, run) == {"a": (14, 1.0), "b": (14, 2.0)}


def test_non_finite_values_round_trip_exactly(db_session: Session) -> None:
    run = new_run(db_session, "non-finite")
    values: list[Any] = [1.5, "NaN", None, "Infinity", "-Infinity", 1.7976931348623157e308]
    values += [5e-324, -2.5, math.nan, math.inf]  # (SQLite keeps no sign on -0.0)
    steps = [3, 1, 4, 15, 9, 2, 6, 5, 35, 8]
    ingest.ingest_batch(db_session, run.id, batch_of(steps, {"g": values}))
    got = stored_points(db_session, run)
    expected = {
        ("g", 3): 1.5,
        ("g", 1): None,
        ("g", 15): math.inf,
        ("g", 9): -math.inf,
        ("g", 2): 1.7976931348623157e308,
        ("g", 6): 5e-324,
        ("g", 5): -2.5,
        ("g", 35): None,
        ("g", 8): math.inf,
    }
    assert got.keys() == expected.keys()
    assert all(same_float(got[k], v) for k, v in expected.items())
    # Step 35 is the last logged one; its NaN is stored as NULL.
    assert latest(db_session, run) == {"g": (35, None)}
    metric_id = metric_ids_by_name(db_session, run.key, ["g"])["g"]
    lineage = lineage_of(segments_of(db_session, run.key))
    read_steps, read_values = read_points(db_session, run.key, metric_id, lineage, None, None)
    assert read_steps.tolist() == [1, 2, 3, 5, 6, 8, 9, 15, 35]
    assert all(
        same_float(float(v), e)
        for v, e in zip(
            read_values,
            [math.nan, 1.7976931348623157e308, 1.5, -2.5, 5e-324, math.inf]
            + [-math.inf, math.inf, math.nan],
            strict=True,
        )
    )


def test_latest_values_only_move_forward(db_session: Session) -> None:
    run = new_run(db_session, "latest")
    ingest.ingest_batch(
        db_session,
        run.id,
        batch_of([7, 9, 8], {"a": [7.0, 9.0, 8.0], "b": [1.0, None, 2.0], "c": [None] * 3}),
    )
    assert latest(db_session, run) == {"a": (9, 9.0), "b": (8, 2.0)}
    ingest.ingest_batch(db_session, run.id, batch_of([1, 2], {"a": [1.0, 2.0], "b": [3.0, 4.0]}))
    assert latest(db_session, run) == {"a": (9, 9.0), "b": (8, 2.0)}


def test_cache_serves_known_names_and_creates_new_ones(db_session: Session) -> None:
    run = new_run(db_session, "cache")
    cache = MetricIdCache()
    first = ingest.ingest_batch(
        db_session, run.id, batch_of([0], {"a": [1.0], "b": [2.0]}), known=cache
    )
    db_session.commit()
    cache.remember(run.key, first.metric_ids)
    # "c" appears for the first time: a miss, created and resolved in the database.
    second = ingest.ingest_batch(
        db_session, run.id, batch_of([1], {"c": [3.0], "a": [4.0], "b": [5.0]}), known=cache
    )
    assert second.metric_ids == metric_ids_by_name(db_session, run.key, ["a", "b", "c"])
    assert {k: second.metric_ids[k] for k in "ab"} == first.metric_ids
    assert cache.lookup(run.key, ["c"]) == ({}, ["c"]), "not remembered before a commit"
    assert stored_points(db_session, run) == {
        ("a", 0): 1.0,
        ("b", 0): 2.0,
        ("c", 1): 3.0,
        ("a", 1): 4.0,
        ("b", 1): 5.0,
    }


def test_rolled_back_batch_leaves_the_cache_correct(db_session: Session) -> None:
    run = new_run(db_session, "rollback")
    db_session.commit()
    cache = MetricIdCache()
    nested = db_session.begin_nested()
    ingest.ingest_batch(db_session, run.id, batch_of([0], {"gone": [1.0]}), known=cache)
    nested.rollback()  # the metric row is gone; nothing was remembered, so no id dangles
    assert cache.lookup(run.key, ["gone"]) == ({}, ["gone"])
    again = ingest.ingest_batch(db_session, run.id, batch_of([0], {"gone": [2.0]}), known=cache)
    assert again.metric_ids == metric_ids_by_name(db_session, run.key, ["gone"])
    assert stored_points(db_session, run) == {("gone", 0): 2.0}


def test_lost_connection_during_copy_is_an_operational_error(pg_url: str) -> None:
    engine = build_engine(pg_url, pool_size=1)
    try:
        with session_factory(engine)() as session:
            run = new_run(session, "lost")
            session.commit()
            batch = batch_of([0, 1], {"a": [1.0, 2.0]})
            ids = resolve_metric_ids(session, run.key, ["a"])
            pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
            admin_dsn = make_url(pg_url).set(drivername="postgresql")
            with psycopg.connect(admin_dsn.render_as_string(hide_password=False)) as admin:
                admin.execute("SELECT pg_terminate_backend(%s::integer, 10000)", (pid,))
            with pytest.raises(OperationalError) as err:
                write_points(session, run.key, 1, batch, ids)
            assert err.value.connection_invalidated
    finally:
        engine.dispose()


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


def test_a_run_holds_a_bounded_number_of_events(db_session: Session) -> None:
    who = principal(db_session)
    made = create_or_resume(db_session, who, RunCreate(name="r"))
    run = db_session.scalar(select(Run).where(Run.id == made.id))
    assert run is not None
    db_session.execute(
        insert(Event),
        [
            {"run_key": run.key, "segment": 1, "step": i, "kind": "note", "text": "t"}
            for i in range(MAX_RUN_EVENTS - 1)
        ],
    )
    add_event(db_session, run, EventCreate(step=1, text="the last one that fits"))
    with pytest.raises(Conflict, match="has 10000 events already"):
        add_event(db_session, run, EventCreate(step=2, text="one too many"))


def test_a_batch_pauses_now_and_then_while_its_rules_are_evaluated(db_session: Session) -> None:
    """``pause`` (a large batch standing aside for small ones) is called before the rule
    states are read and after every `PAUSE_EVERY` series evaluated."""
    run = new_run(db_session, "paused")
    found = runs.get_run(db_session, run.id)
    assert found is not None
    admin = principal(db_session, "admin", project=found[1])
    condition = {"kind": "threshold", "op": ">", "value": 5.0}
    body = AlertRuleCreate(name="layers", metric="grad/norm/layers.*", condition=condition)
    alert_rules.create_rule(db_session, admin, body, ())
    names = [f"grad/norm/layers.{i}" for i in range(300)] + ["loss"]  # loss matches no rule
    batch = parse_batch(
        {"steps": [0, 1], "metrics": {n: [1.0, 1.0] for n in names}}, max_points=10_000
    )
    calls: list[int] = []
    ingest.ingest_batch(db_session, run.id, batch, pause=lambda: calls.append(1))
    assert len(calls) == 1 + 300 // PAUSE_EVERY
    calls.clear()
    quiet = parse_batch({"steps": [2], "metrics": {"loss": [1.0]}}, max_points=10)
    ingest.ingest_batch(db_session, run.id, quiet, pause=lambda: calls.append(1))
    assert calls == []  # no rule to evaluate: no pause
