"""What the dispatcher's clock decides between batches: a ``stale`` rule firing for a run
that went quiet, and a firing alert sent again after ``repeat_every_seconds``.

A trainer that hangs or stops logging sends no steps, so nothing that counts steps can say
so: these checks run on wall-clock time, on each tick of the dispatcher, over the states
that ingest left (`alerts.state.RuleState`). Pure functions; no I/O.

A repeat by the clock is the same ``firing`` transition as a repeat by steps: the next
repeat number, at the last step the rule judged with its value, and the worst value so
far. Its clock counts from the last notification (the firing, or a repeat by steps or by
the clock), so one is sent at most once per ``repeat_every_seconds``, and a trainer that
logs on with the alert repeating by steps keeps putting it off.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .conditions import StaleCondition, StepCondition
from .evaluation import rule_threshold
from .state import RuleState, Transition, short

__all__ = [
    "check_repeat",
    "check_stale",
    "repeat_clock",
    "repeat_due",
    "repeat_now",
    "stale_due",
]


def stale_due(last_seen_unix: float, now_unix: float, seconds: float) -> bool:
    """``now - last_seen >= seconds``: the metric has had no new step for ``seconds``."""
    return now_unix - last_seen_unix >= seconds


def check_stale(
    condition: StaleCondition, state: RuleState, now_unix: float
) -> tuple[RuleState, list[Transition]]:
    """The clock tick of a stale rule: fire once no step has arrived for ``seconds``.

    Fires at the last step seen, at most once per stall (a new step, seen by
    `evaluation.evaluate`, resolves it). A metric with no step yet is never stale.
    """
    new = replace(state, window=list(state.window))
    if (
        state.status == "firing"
        or state.last_step is None
        or state.last_seen_unix is None
        or not stale_due(state.last_seen_unix, now_unix, condition.seconds)
    ):
        return new, []
    waited = now_unix - state.last_seen_unix
    new.status, new.fired_at_step = "firing", state.last_step
    new.repeats, new.notified_unix = 0, now_unix
    value = math.nan if state.last_value is None else state.last_value
    reason = f"no new step for {waited:.0f} s (limit {short(condition.seconds)} s)"
    return new, [
        Transition(
            "firing", state.last_step, value, condition.seconds, waited, reason, state.last_step
        )
    ]


def repeat_clock(state: RuleState) -> float | None:
    """When the wall clock of a firing alert's next repeat started: its last notification,
    or, in a state stored before that was kept, the last batch it saw (the notification
    came with that batch or an earlier one, so the repeat is never early)."""
    return state.notified_unix if state.notified_unix is not None else state.last_seen_unix


def repeat_due(since_unix: float | None, now_unix: float, seconds: float) -> bool:
    """``now - since >= seconds``: a firing alert has gone ``seconds`` without a
    notification (never when it is not known since when)."""
    return since_unix is not None and now_unix - since_unix >= seconds


def check_repeat(
    condition: StepCondition | StaleCondition,
    state: RuleState,
    now_unix: float,
    seconds: float,
) -> tuple[RuleState, list[Transition]]:
    """The clock tick of a rule's ``repeat_every_seconds`` on one series: the repeat of
    :func:`repeat_now` once a firing alert has gone ``seconds`` without a notification,
    else nothing. ``state`` is not modified."""
    if state.status != "firing" or not repeat_due(repeat_clock(state), now_unix, seconds):
        return replace(state, window=list(state.window)), []
    return repeat_now(condition, state, now_unix)


def repeat_now(
    condition: StepCondition | StaleCondition, state: RuleState, now_unix: float
) -> tuple[RuleState, list[Transition]]:
    """Send a firing alert again now, whatever its own clock says (a glob rule's group
    decides for its metrics): the next repeat at its last step and value, with the worst
    value so far; its wall clock and its step count (``repeat_every_steps``) start over
    from here. Nothing for a state that is not firing. ``state`` is not modified."""
    new = replace(state, window=list(state.window))
    if state.status != "firing" or state.last_step is None:
        return new, []
    step = state.last_step
    value = math.nan if state.last_value is None else state.last_value
    fired_at = state.fired_at_step if state.fired_at_step is not None else step
    since = repeat_clock(state)
    quiet = 0.0 if since is None else max(0.0, now_unix - since)
    new.repeats += 1
    new.notified_step, new.notified_unix = step, now_unix
    if isinstance(condition, StaleCondition):
        measured = 0.0 if state.last_seen_unix is None else now_unix - state.last_seen_unix
        reason = f"still no new step for {measured:.0f} s (limit {short(condition.seconds)} s)"
    else:
        measured = value
        so_far = "" if state.worst is None else f", worst {short(state.worst)}"
        reason = (
            f"still firing since step {fired_at:,}, {quiet:.0f} s after the last "
            f"notification: last {short(value)} at step {step:,}{so_far}"
        )
    return new, [
        Transition(
            "firing",
            step,
            value,
            rule_threshold(condition, state),
            measured,
            reason,
            fired_at,
            repeat=new.repeats,
            worst=state.worst,
        )
    ]
