"""Repeats by the wall clock (``repeat_every_seconds``) on one series and on a glob rule's
group: due once per interval since the last notification, at the last judged step, reset
by repeats by steps, nothing once resolved; older state documents keep working."""

from __future__ import annotations

import math

from normwatch.server.alerts.clock import (
    check_repeat,
    check_stale,
    repeat_clock,
    repeat_due,
    repeat_now,
)
from normwatch.server.alerts.conditions import SpikeCondition, StaleCondition, ThresholdCondition
from normwatch.server.alerts.evaluation import RuleState, Transition, evaluate
from normwatch.server.alerts.grouping import GroupState, advance

HIGH = ThresholdCondition(op=">=", value=5.0, resolve_steps=2)
T0 = 1_000.0
EVERY = 600.0


def firing_at_t0() -> RuleState:
    """Fired at step 2 (6.0), still over at step 3 (7.0), both seen at ``T0``."""
    state, transitions = evaluate(HIGH, RuleState(), [1, 2, 3], [1.0, 6.0, 7.0], now_unix=T0)
    assert [(t.state, t.step, t.repeat) for t in transitions] == [("firing", 2, 0)]
    return state


def test_repeat_due_boundary() -> None:
    assert repeat_due(T0, T0 + EVERY - 0.1, EVERY) is False
    assert repeat_due(T0, T0 + EVERY, EVERY) is True
    assert repeat_due(None, 1e12, EVERY) is False


def test_firing_starts_the_clock_and_it_repeats_once_per_interval() -> None:
    state = firing_at_t0()
    assert (state.notified_unix, state.notified_step) == (T0, 2)
    assert check_repeat(HIGH, state, T0 + EVERY - 1, EVERY)[1] == []
    state, [first] = check_repeat(HIGH, state, T0 + EVERY, EVERY)
    assert first == Transition(
        "firing",
        3,
        7.0,
        5.0,
        7.0,
        "still firing since step 2, 600 s after the last notification: last 7 at step 3, worst 7",
        2,
        repeat=1,
        worst=7.0,
    )
    assert (state.repeats, state.notified_step, state.notified_unix) == (1, 3, T0 + EVERY)
    assert check_repeat(HIGH, state, T0 + EVERY + 1, EVERY)[1] == []
    assert check_repeat(HIGH, state, T0 + 2 * EVERY - 1, EVERY)[1] == []
    state, [second] = check_repeat(HIGH, state, T0 + 2 * EVERY + 30, EVERY)
    assert (second.repeat, second.step, second.fired_at_step) == (2, 3, 2)
    assert "630 s after the last notification" in second.reason


def test_check_repeat_leaves_the_given_state_alone() -> None:
    state = firing_at_t0()
    before = state.to_dict()
    check_repeat(HIGH, state, T0 + EVERY, EVERY)
    assert state.to_dict() == before


def test_a_repeat_by_steps_restarts_the_wall_clock_and_one_by_the_clock_the_step_count() -> None:
    state = firing_at_t0()
    # Steps keep coming at T0 + 500: a repeat by steps (every 5) at step 7.
    state, transitions = evaluate(
        HIGH, state, [4, 5, 6, 7], [6.0, 6.0, 6.0, 8.0], now_unix=T0 + 500, repeat_every_steps=5
    )
    assert [(t.step, t.repeat) for t in transitions] == [(7, 1)]
    assert state.notified_unix == T0 + 500
    assert check_repeat(HIGH, state, T0 + EVERY, EVERY)[1] == []
    state, [clocked] = check_repeat(HIGH, state, T0 + 500 + EVERY, EVERY)
    assert (clocked.step, clocked.value, clocked.repeat, clocked.worst) == (7, 8.0, 2, 8.0)
    # The trainer comes back: the next repeat by steps counts from the clock's step 7.
    state, transitions = evaluate(
        HIGH, state, list(range(8, 14)), [6.0] * 6, now_unix=T0 + 2000, repeat_every_steps=5
    )
    assert [(t.step, t.repeat) for t in transitions] == [(12, 3)]
    assert state.notified_unix == T0 + 2000


def test_nothing_once_resolved_or_before_firing() -> None:
    state = firing_at_t0()
    state, transitions = evaluate(HIGH, state, [4, 5], [1.0, 1.0], now_unix=T0 + 10)
    assert [t.state for t in transitions] == ["resolved"]
    assert (state.status, state.notified_unix, state.repeats) == ("ok", None, 0)
    assert check_repeat(HIGH, state, T0 + 10 * EVERY, EVERY) == (state, [])
    assert repeat_now(HIGH, state, T0 + 10 * EVERY)[1] == []
    pending, _ = evaluate(
        ThresholdCondition(op=">=", value=5.0, for_steps=3), RuleState(), [1], [9.0], now_unix=T0
    )
    assert pending.status == "pending"
    assert check_repeat(HIGH, pending, T0 + 10 * EVERY, EVERY)[1] == []


def test_a_state_stored_before_the_wall_clock_was_kept_counts_from_its_last_batch() -> None:
    doc = firing_at_t0().to_dict()
    doc["version"] = 2
    del doc["notified_unix"]
    doc["last_seen_unix"] = T0 + 100
    old = RuleState.from_dict(doc)
    assert (old.notified_unix, repeat_clock(old)) == (None, T0 + 100)
    assert check_repeat(HIGH, old, T0 + EVERY, EVERY)[1] == []
    new, [repeat] = check_repeat(HIGH, old, T0 + 100 + EVERY, EVERY)
    assert repeat.repeat == 1 and new.notified_unix == T0 + 100 + EVERY
    assert RuleState.from_dict(new.to_dict()) == new
    nothing_known = RuleState.from_dict({**doc, "last_seen_unix": None})
    assert check_repeat(HIGH, nothing_known, 1e12, EVERY)[1] == []


def test_a_spike_repeat_reports_the_limit_of_its_window() -> None:
    rule = SpikeCondition(factor=3.0, window=5, min_history=5)
    steps = list(range(10))
    values = [1.0, 1.0, 2.0, 1.0, 1.0, 9.0, 8.0, 1.0, 1.0, math.nan]
    state, transitions = evaluate(rule, RuleState(), steps, values, now_unix=T0)
    assert [(t.state, t.step) for t in transitions] == [("firing", 5)]
    _, [repeat] = check_repeat(rule, state, T0 + EVERY, EVERY)
    assert (repeat.step, math.isnan(repeat.value), repeat.threshold) == (9, True, 3.0)
    assert (repeat.worst, repeat.fired_at_step) == (9.0, 5)


def test_a_stale_alert_repeats_while_the_run_stays_quiet() -> None:
    rule = StaleCondition(seconds=300.0)
    state, _ = evaluate(rule, RuleState(), [5, 6], [0.3, 0.4], now_unix=T0)
    state, [fired] = check_stale(rule, state, T0 + 312)
    assert state.notified_unix == T0 + 312
    assert check_repeat(rule, state, T0 + 312 + EVERY - 1, EVERY)[1] == []
    state, [repeat] = check_repeat(rule, state, T0 + 312 + EVERY, EVERY)
    assert repeat == Transition(
        "firing", 6, 0.4, 300.0, 912.0, "still no new step for 912 s (limit 300 s)", 6, repeat=1
    )
    state, [resolved] = evaluate(rule, state, [7], [0.5], now_unix=T0 + 1000)
    assert resolved.state == "resolved"
    assert (state.status, state.repeats, state.notified_unix) == ("ok", 0, None)


def fired(metric_step: int, value: float = 9.0) -> Transition:
    return Transition("firing", metric_step, value, 5.0, value, "x", metric_step)


def test_a_group_keeps_the_time_of_its_last_firing_message_and_repeats_once() -> None:
    group = GroupState()
    out = advance(group, [("a", fired(10)), ("b", fired(10))], 10, 0, now_unix=T0)
    assert [m.state for m in out] == ["firing"] and group.notified_unix == T0
    assert advance(group, [], 11, 0, now_unix=T0 + 50) == [] and group.notified_unix == T0
    # The clock's repeats of both metrics are one message for the group.
    a, b = (
        firing_at_t0(),
        evaluate(HIGH, RuleState(), [1, 2, 3], [1.0, 6.0, 6.5], now_unix=T0)[0],
    )
    events = [("a", repeat_now(HIGH, a, T0 + EVERY)[1][0])]
    events.append(("b", repeat_now(HIGH, b, T0 + EVERY)[1][0]))
    [repeat] = advance(group, events, 3, 0, now_unix=T0 + EVERY)
    assert (repeat.state, repeat.repeat, repeat.firing) == ("firing", 1, 2)
    assert group.notified_unix == T0 + EVERY
    assert GroupState.from_dict(group.to_dict()) == group
    calm = [("a", Transition("resolved", 20, 1.0, 5.0, 1.0, "y", 10))]
    calm.append(("b", Transition("resolved", 20, 1.0, 5.0, 1.0, "y", 10)))
    [resolved] = advance(group, calm, 20, 0, now_unix=T0 + EVERY + 5)
    assert resolved.state == "resolved" and group.notified_unix is None


def test_a_group_stored_before_the_wall_clock_was_kept_reads_as_not_knowing_it() -> None:
    group = GroupState()
    advance(group, [("a", fired(10))], 10, 0, now_unix=T0)
    doc = group.to_dict()
    assert (doc["version"], doc["notified_unix"]) == (2, T0)
    old = {k: v for k, v in doc.items() if k != "notified_unix"}
    read = GroupState.from_dict({**old, "version": 1})
    assert read.notified_unix is None and read.firing() == ["a"] and read.status == "firing"
