"""Alert rules evaluated step by step: a rule's state on one series, its transitions, and the
maths behind them.

Pure functions over (step, value) points; no I/O. The storing layer keeps one
:class:`RuleState` per (rule, run segment, metric) as JSON (:meth:`RuleState.to_dict`),
calls :func:`evaluate` with each ingested batch, and records the :class:`Transition` s it
returns. A new segment (a restart from a checkpoint) starts from a fresh ``RuleState()``:
its steps go backwards, and every step at or below the state's ``last_step`` is ignored,
which is also what makes a re-sent batch count once.

States: ``ok → pending → firing → (resolved) → ok``. A step that satisfies the condition
adds to ``streak``; at ``for_steps`` consecutive logged steps the rule fires (``pending``
while fewer). A firing alert resolves after ``resolve_steps`` consecutive logged steps that
do not satisfy it (past ``resolve_value`` too, for a threshold that has one); a step that
satisfies it again, or lies between the two values, starts that count over. After a
resolve at step ``r`` the rule fires again no earlier than step ``r + cooldown_steps`` (the
streak keeps counting meanwhile, so a condition still true then fires at once). Some steps
cannot be judged: they end a pending streak but neither fire nor resolve (a firing alert
stays firing). A forecast resolves once no crossing is projected sooner than twice
``within_steps`` for ``resolve_steps`` steps, or at once when its value crosses (handed
over to the threshold rule); one that handed over warns again only after that many calm
steps and a whole window of them.

While firing, an alert is sent again every ``repeat_every_steps`` steps, at a step where
the condition holds (a ``firing`` transition with ``repeat`` 1, 2, ... and the worst value
so far); one that went ``repeat_every_seconds`` without a notification is sent again by
the clock (`alerts.clock`), which is what repeats it while no steps come. A firing spike
rule keeps its window as it was before the spike, so the spike is judged against what was
normal; it resolves once back within one noise SD of that window's median
(`_spike_recovery`), however long that takes: the spike's extent as the analytics measure
it (a lasting step up is a spike that has not recovered, as it is there).

Windows hold finite values only; a non-finite value is the ``non_finite`` kind's business.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..analytics.fit import fit_line
from .conditions import (
    Comparison,
    ForecastCondition,
    NonFiniteCondition,
    SlopeCondition,
    SpikeCondition,
    StaleCondition,
    StepCondition,
    ThresholdCondition,
)
from .state import RuleState, Transition
from .state import short as _num

__all__ = [
    "RuleState",
    "Transition",
    "compare",
    "evaluate",
    "linear_fit",
    "preview",
    "rule_threshold",
]


def compare(value: float, op: Comparison, threshold: float) -> bool:
    """``value op threshold``; False whenever either side is NaN (IEEE 754 ordering)."""
    if op == ">":
        return value > threshold
    if op == ">=":
        return value >= threshold
    if op == "<":
        return value < threshold
    return value <= threshold


def linear_fit(steps: Sequence[int], values: Sequence[float]) -> tuple[float, float]:
    """Least-squares line through the points (`..analytics.fit.fit_line`): ``(slope per
    step, fitted value at the last step)``. Needs at least two distinct steps.

    >>> linear_fit([10, 11, 12], [1.0, 3.0, 5.0])
    (2.0, 5.0)
    """
    if len(steps) < 2 or len(steps) != len(values):
        raise ValueError(
            f"need at least 2 points of equal length, got {len(steps)} and {len(values)}"
        )
    fit = fit_line(steps, values, origin=steps[-1])
    if fit is None:
        raise ValueError("the steps must not all be equal")
    return fit.slope, fit.level


@dataclass(frozen=True)
class _Verdict:
    satisfied: bool | None  # None: the step cannot be judged
    threshold: float | None
    measured: float
    context: str  # what the reason adds after the comparison, e.g. "(2 × median 1.3)"
    crossed: bool = False  # a forecast's value is past its threshold already


def evaluate(
    condition: StepCondition | StaleCondition,
    state: RuleState,
    steps: Sequence[int],
    values: Sequence[float],
    *,
    now_unix: float | None = None,
    repeat_every_steps: int | None = None,
) -> tuple[RuleState, list[Transition]]:
    """Feed one batch of a metric's logged points; return the new state and its transitions.

    ``steps`` strictly ascending, one finite or non-finite value each (leave out steps the
    metric was not logged at). Steps at or below ``state.last_step`` are skipped. ``state``
    is not modified. ``now_unix`` (the ingest time) is recorded as ``last_seen_unix`` when
    the batch brings a new step, and as ``notified_unix`` when it fires or repeats (the wall
    clock of the rule's ``repeat_every_seconds`` starts over); stale rules require it, and
    a new step resolves them. ``repeat_every_steps`` (the rule's) sends a still-firing
    alert again that often.
    """
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length: {len(steps)} != {len(values)}")
    for i in range(1, len(steps)):
        if steps[i] <= steps[i - 1]:
            raise ValueError(f"steps[{i}]: {steps[i]} does not follow {steps[i - 1]}")
    start = 0
    if state.last_step is not None:
        start = next((i for i, s in enumerate(steps) if s > state.last_step), len(steps))
    new = replace(state, window=list(state.window))
    if start == len(steps):
        return new, []
    if isinstance(condition, StaleCondition):
        return _observe_stale(condition, new, steps[start:], values[start:], now_unix)
    transitions: list[Transition] = []
    for step, value in zip(steps[start:], values[start:], strict=True):
        step, value = int(step), float(value)
        verdict = _judge(condition, new, step, value)
        transition = _advance(condition, new, step, value, verdict, repeat_every_steps, now_unix)
        if transition is not None:
            transitions.append(transition)
    new.last_step, new.last_value = int(steps[-1]), float(values[-1])
    if now_unix is not None:
        new.last_seen_unix = now_unix
    return new, transitions


def preview(
    condition: StepCondition | StaleCondition,
    steps: Sequence[int],
    values: Sequence[float],
    *,
    repeat_every_steps: int | None = None,
) -> list[Transition]:
    """Where the rule would have fired, repeated and resolved on a stored series (from a
    fresh state)."""
    if isinstance(condition, StaleCondition):
        raise ValueError("a stale rule depends on arrival times, which a stored series lacks")
    return evaluate(condition, RuleState(), steps, values, repeat_every_steps=repeat_every_steps)[1]


def _observe_stale(
    condition: StaleCondition,
    state: RuleState,
    steps: Sequence[int],
    values: Sequence[float],
    now_unix: float | None,
) -> tuple[RuleState, list[Transition]]:
    if now_unix is None:
        raise ValueError("a stale rule needs now_unix, the time the batch arrived")
    transitions: list[Transition] = []
    if state.status == "firing":
        waited = now_unix - (state.last_seen_unix if state.last_seen_unix is not None else now_unix)
        fired_at = state.fired_at_step if state.fired_at_step is not None else int(steps[0])
        reason = f"new step after {waited:.0f} s (limit {_num(condition.seconds)} s)"
        transitions.append(
            Transition(
                "resolved",
                int(steps[0]),
                float(values[0]),
                condition.seconds,
                waited,
                reason,
                fired_at,
            )
        )
        state.status, state.fired_at_step = "ok", None
        state.repeats, state.notified_unix = 0, None
    state.last_step, state.last_value, state.last_seen_unix = (
        int(steps[-1]),
        float(values[-1]),
        now_unix,
    )
    return state, transitions


def _advance(
    condition: StepCondition,
    state: RuleState,
    step: int,
    value: float,
    verdict: _Verdict,
    repeat_every_steps: int | None,
    now_unix: float | None,
) -> Transition | None:
    """One step of ``ok → pending → firing → ok``; mutates ``state``."""
    if state.status == "firing":
        return _while_firing(condition, state, step, value, verdict, repeat_every_steps, now_unix)
    if state.handed_over:
        # Around its crossing a noisy value crosses back and forth, and a value that levels
        # off just short of the line leaves a flat fit: the forecast stays quiet until its
        # steps have counted as clear for resolve_steps in a row and for a whole window, so
        # that no point of the approach it warned of is left in the fit.
        calm = verdict.satisfied is False and _cleared(condition, verdict, value)
        state.clear = state.clear + 1 if calm else 0
        if state.clear >= max(condition.resolve_steps, getattr(condition, "window", 0)):
            state.handed_over, state.clear = False, 0
        return None
    if verdict.satisfied:
        state.streak += 1
        cooling = state.cooldown_until_step is not None and step < state.cooldown_until_step
        if state.streak < condition.for_steps or cooling:
            state.status = "pending"
            return None
        state.status, state.fired_at_step, state.notified_step = "firing", step, step
        state.clear, state.held, state.repeats = 0, 0, 0
        state.notified_unix = now_unix
        state.worst = verdict.measured if _direction(condition) else None
        plural = "" if state.streak == 1 else "s"
        reason = f"{_claim(condition, verdict)} for {state.streak} step{plural}"
        return Transition(
            "firing",
            step,
            value,
            verdict.threshold,
            verdict.measured,
            reason,
            step,
            worst=state.worst,
        )
    state.streak = 0
    if state.status == "pending":
        state.status = "ok"
    return None


def _while_firing(
    condition: StepCondition,
    state: RuleState,
    step: int,
    value: float,
    verdict: _Verdict,
    repeat_every_steps: int | None,
    now_unix: float | None,
) -> Transition | None:
    """A logged step of a firing alert: hold, resolve, or send it again."""
    state.held += 1
    fired_at = state.fired_at_step if state.fired_at_step is not None else step
    if verdict.satisfied:
        state.streak += 1
        state.clear = 0
        state.worst = _worse(condition, state.worst, verdict.measured)
    elif verdict.satisfied is False:
        state.streak = 0
        state.clear = state.clear + 1 if _cleared(condition, verdict, value) else 0
    else:
        state.streak = 0  # a step that cannot be judged neither counts nor clears
    if verdict.crossed or (verdict.satisfied is False and state.clear >= condition.resolve_steps):
        worst = state.worst
        state.status, state.fired_at_step, state.notified_step = "ok", None, None
        state.clear, state.held, state.repeats, state.worst = 0, 0, 0, None
        state.streak, state.notified_unix = 0, None
        if condition.cooldown_steps:
            state.cooldown_until_step = step + condition.cooldown_steps
        if isinstance(condition, ForecastCondition) and verdict.crossed:
            state.handed_over = True
            crossed = f"{_num(value)} {_SYMBOL[condition.op]} {_num(condition.value)}"
            reason = f"crossed: {crossed} (handed over to the threshold)"
        else:
            reason = _claim(condition, verdict, negated=True)
            if condition.resolve_steps > 1:
                reason += f" for {condition.resolve_steps} steps"
        return Transition(
            "resolved",
            step,
            value,
            verdict.threshold,
            verdict.measured,
            reason,
            fired_at,
            worst=worst,
        )
    last = state.notified_step if state.notified_step is not None else fired_at
    # A repeat goes out at a step where the condition holds (one due while it is counting
    # down to resolve waits, and is not sent if it resolves).
    if verdict.satisfied and repeat_every_steps and step - last >= repeat_every_steps:
        state.repeats += 1
        state.notified_step, state.notified_unix = step, now_unix
        so_far = "" if state.worst is None else f", worst {_num(state.worst)}"
        reason = f"still firing since step {fired_at:,}: now {_num(value)}{so_far}"
        threshold = verdict.threshold if verdict.threshold is not None else _threshold(condition)
        return Transition(
            "firing",
            step,
            value,
            threshold,
            verdict.measured,
            reason,
            fired_at,
            repeat=state.repeats,
            worst=state.worst,
        )
    return None


def _cleared(condition: StepCondition, verdict: _Verdict, value: float) -> bool:
    """Whether a step with the condition false counts toward resolving: past
    ``resolve_value`` for a threshold that has one; for a forecast, a crossing projected no
    sooner than twice ``within_steps`` (a trend estimate wobbles around its horizon)."""
    if isinstance(condition, ThresholdCondition):
        return condition.cleared(value)
    if isinstance(condition, ForecastCondition):
        return verdict.measured >= 2 * condition.within_steps
    return True


def _direction(condition: StepCondition) -> int:
    """+1 when larger measured values are worse, -1 when smaller are, 0 when neither means
    anything (non_finite, and forecast's projected steps, where fewer are worse: -1)."""
    if isinstance(condition, NonFiniteCondition):
        return 0
    if isinstance(condition, SpikeCondition):
        return 1
    if isinstance(condition, (ThresholdCondition, SlopeCondition)):
        return 1 if condition.op in (">", ">=") else -1
    return -1  # forecast: steps left to the crossing


def _worse(condition: StepCondition, worst: float | None, measured: float) -> float | None:
    direction = _direction(condition)
    if not direction or math.isnan(measured):
        return worst
    if worst is None:
        return measured
    return max(worst, measured) if direction > 0 else min(worst, measured)


def _threshold(condition: StepCondition) -> float | None:
    """The rule's own number, for a repeat at a step that could not be judged."""
    if isinstance(condition, (ThresholdCondition, ForecastCondition)):
        return condition.value
    if isinstance(condition, SlopeCondition):
        return condition.per_1k_steps
    return None


def rule_threshold(condition: StepCondition | StaleCondition, state: RuleState) -> float | None:
    """The number a notification between judged steps reports: the rule's own (``seconds``
    for stale), or for a spike ``factor · median`` of the window it is judged against."""
    if isinstance(condition, StaleCondition):
        return condition.seconds
    if isinstance(condition, SpikeCondition):
        return _spike_verdict(condition, [v for _, v in state.window], 0.0).threshold
    return _threshold(condition)


def _judge(condition: StepCondition, state: RuleState, step: int, value: float) -> _Verdict:
    """Whether ``value`` at ``step`` satisfies the condition; adds it to ``state.window``."""
    window = state.window
    finite = math.isfinite(value)
    if isinstance(condition, ThresholdCondition):
        known = not math.isnan(value)
        hit = compare(value, condition.op, condition.value) if known else None
        return _Verdict(hit, condition.value, value, "")
    if isinstance(condition, NonFiniteCondition):
        return _Verdict(not finite, None, value, "")
    if isinstance(condition, SpikeCondition):
        history = [v for _, v in window]
        if state.status == "firing":
            # Firing until back within one noise SD of what was normal before the spike
            # (its values stay out of the window), not merely under the firing limit.
            verdict = _spike_recovery(condition, history, value)
        else:
            verdict = _spike_verdict(condition, history, value)
        # A spike's values stay out of the window, so that it is judged against what was
        # normal before it however long it lasts (a slow recovery is still the spike).
        absorb = state.status != "firing" and not verdict.satisfied
        if finite and absorb:
            _push(window, step, value, condition.window)
        return verdict
    if not finite:
        return _Verdict(None, None, value, "")
    _push(window, step, value, condition.window)
    if len(window) < condition.window:
        return _Verdict(None, None, value, "")
    slope, level = linear_fit([s for s, _ in window], [v for _, v in window])
    per_1k = 1000.0 * slope
    points = f"over the last {condition.window} points"
    if isinstance(condition, SlopeCondition):
        hit = compare(per_1k, condition.op, condition.per_1k_steps)
        return _Verdict(hit, condition.per_1k_steps, per_1k, f" {points}")
    if compare(value, condition.op, condition.value):
        # Crossed: no longer a forecast; a firing one hands over to the threshold rule.
        return _Verdict(None, condition.value, math.nan, "", crossed=True)
    toward = slope > 0 if condition.op in (">", ">=") else slope < 0
    steps_left = (condition.value - level) / slope if toward else math.inf
    context = f" (slope {per_1k:+.3g} per 1k steps {points})"
    return _Verdict(steps_left < condition.within_steps, condition.value, steps_left, context)


def _spike_verdict(condition: SpikeCondition, history: list[float], value: float) -> _Verdict:
    if math.isnan(value) or len(history) < condition.history_needed:
        return _Verdict(None, None, value, "")
    median = statistics.median(history)
    if not median > 0:
        return _Verdict(None, None, value, "")
    limit = condition.factor * median
    context = f" ({_num(condition.factor)} × median {_num(median)})"
    return _Verdict(value > limit, limit, value, context)


def _spike_recovery(condition: SpikeCondition, history: list[float], value: float) -> _Verdict:
    """A firing spike is over once the value is back within one noise SD of the window's
    median: ``value ≤ median + max(1.4826 · MAD, median / 100)`` (the floor lets a series
    too smooth to have a spread come back), for ``resolve_steps`` steps in a row."""
    bar = None if math.isnan(value) else _recovery_bar(condition, history)
    if bar is None:
        return _Verdict(None, None, value, "")
    level, context = bar
    return _Verdict(value > level, level, value, context)


def _recovery_bar(condition: SpikeCondition, history: list[float]) -> tuple[float, str] | None:
    """The level a firing spike must come back under, and the reason's words for it; None
    where the window cannot judge (too few values, a median not above zero). A firing
    spike's window stays as it was, so a replay computes this once a firing."""
    if len(history) < condition.history_needed:
        return None
    median = statistics.median(history)
    if not median > 0:
        return None
    noise = max(1.4826 * statistics.median(abs(v - median) for v in history), median / 100)
    return median + noise, f" (median {_num(median)} + one noise SD {_num(noise)})"


def _push(window: list[tuple[int, float]], step: int, value: float, size: int) -> None:
    window.append((step, value))
    del window[:-size]


def _claim(condition: StepCondition, verdict: _Verdict, *, negated: bool = False) -> str:
    """The comparison a transition reports, e.g. ``5.31 ≥ 5`` or ``4.2 no longer ≥ 5``."""
    value, threshold = _num(verdict.measured), _num(verdict.threshold or 0.0)
    no = " no longer" if negated else ""
    if isinstance(condition, NonFiniteCondition):
        return f"{value}, finite again" if negated else f"{value}, not finite,"
    if isinstance(condition, ThresholdCondition):
        return f"{value}{no} {_SYMBOL[condition.op]} {threshold}"
    if isinstance(condition, SpikeCondition):
        return f"{value}{no} > {threshold}{verdict.context}"
    if isinstance(condition, SlopeCondition):
        slope = f"{verdict.measured:+.3g}"
        return (
            f"slope {slope} per 1k steps{no} {_SYMBOL[condition.op]} {threshold}{verdict.context}"
        )
    target = f"{_SYMBOL[condition.op]} {threshold}"
    if negated:
        return f"no longer projected to reach {target} within {condition.within_steps} steps"
    return (
        f"projected to reach {target} in ~{_num(max(verdict.measured, 0.0))} steps{verdict.context}"
    )


_SYMBOL: dict[Comparison, str] = {">": ">", ">=": "≥", "<": "<", "<=": "≤"}
