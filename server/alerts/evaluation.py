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
while fewer). A logged step that does not satisfy it ends the streak and resolves a firing
alert. After a resolve at step ``r`` the rule fires again no earlier than step
``r + cooldown_steps`` (the streak keeps counting meanwhile). Some steps cannot be judged:
they end a pending streak but neither fire nor resolve (a firing alert stays firing).

Windows hold finite values only; a non-finite value is the ``non_finite`` kind's business.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .conditions import (
    MAX_WINDOW,
    AlertStatus,
    Comparison,
    Finite,
    NonFiniteCondition,
    SlopeCondition,
    SpikeCondition,
    StaleCondition,
    StepCondition,
    ThresholdCondition,
)

__all__ = [
    "RuleState",
    "Transition",
    "check_stale",
    "compare",
    "evaluate",
    "linear_fit",
    "preview",
    "stale_due",
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
    """Least-squares line through the points: ``(slope per step, fitted value at the last step)``.

    ``slope = Σ(s - s̄)(v - v̄) / Σ(s - s̄)²`` and ``level = v̄ + slope · (s_last - s̄)``,
    with steps centred first so that large step numbers lose no precision. Needs at
    least two distinct steps.

    >>> linear_fit([10, 11, 12], [1.0, 3.0, 5.0])
    (2.0, 5.0)
    """
    n = len(steps)
    if n < 2 or n != len(values):
        raise ValueError(f"need at least 2 points of equal length, got {n} and {len(values)}")
    step_mean = sum(steps) / n
    value_mean = sum(values) / n
    ds = [s - step_mean for s in steps]
    spread = sum(d * d for d in ds)
    if spread == 0:
        raise ValueError("the steps must not all be equal")
    slope = sum(d * (v - value_mean) for d, v in zip(ds, values, strict=True)) / spread
    return slope, value_mean + slope * ds[-1]


def stale_due(last_seen_unix: float, now_unix: float, seconds: float) -> bool:
    """``now - last_seen >= seconds``: the metric has had no new step for ``seconds``."""
    return now_unix - last_seen_unix >= seconds


@dataclass
class RuleState:
    """Evaluation state of one rule on one metric of one run segment; JSON via ``to_dict``.

    ``window`` holds the recent finite ``(step, value)`` points the kind needs (empty for
    threshold and non_finite). ``cooldown_until_step``: no firing before that step.
    """

    status: AlertStatus = "ok"
    streak: int = 0
    window: list[tuple[int, float]] = field(default_factory=list)
    last_step: int | None = None
    last_value: float | None = None
    last_seen_unix: float | None = None
    fired_at_step: int | None = None
    cooldown_until_step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A strict-JSON document (non-finite numbers as ``"NaN"``, ``"Infinity"``...)."""
        return {
            "version": 1,
            "status": self.status,
            "streak": self.streak,
            "window": [[s, v] for s, v in self.window],
            "last_step": self.last_step,
            "last_value": None if self.last_value is None else _encode(self.last_value),
            "last_seen_unix": self.last_seen_unix,
            "fired_at_step": self.fired_at_step,
            "cooldown_until_step": self.cooldown_until_step,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> RuleState:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed document."""
        return _STATE_DOC.validate_python(doc).to_state()


class _StateDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    status: AlertStatus
    streak: int = Field(ge=0)
    window: list[tuple[int, Finite]] = Field(max_length=MAX_WINDOW)
    last_step: int | None
    last_value: float | None
    last_seen_unix: float | None
    fired_at_step: int | None
    cooldown_until_step: int | None

    def to_state(self) -> RuleState:
        return RuleState(
            status=self.status,
            streak=self.streak,
            window=list(self.window),
            last_step=self.last_step,
            last_value=self.last_value,
            last_seen_unix=self.last_seen_unix,
            fired_at_step=self.fired_at_step,
            cooldown_until_step=self.cooldown_until_step,
        )


_STATE_DOC = TypeAdapter(_StateDoc)


@dataclass(frozen=True)
class Transition:
    """A state change to notify: ``firing`` or ``resolved`` at ``step``.

    ``threshold`` is the number the payload reports (the rule's value, ``factor · median``
    for a spike, ``per_1k_steps`` for a slope, ``seconds`` for stale, None for non_finite);
    ``measured`` is what was compared with it (the value, the slope per 1k steps, the
    projected steps to crossing, the seconds without a step). ``reason`` leaves out the
    metric's name, which the caller puts in front.
    """

    state: Literal["firing", "resolved"]
    step: int
    value: float
    threshold: float | None
    measured: float
    reason: str
    fired_at_step: int

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON fields, non-finite numbers as strings."""
        return {
            "state": self.state,
            "step": self.step,
            "value": _encode(self.value),
            "threshold": None if self.threshold is None else _encode(self.threshold),
            "measured": _encode(self.measured),
            "reason": self.reason,
            "fired_at_step": self.fired_at_step,
        }


def _encode(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


@dataclass(frozen=True)
class _Verdict:
    satisfied: bool | None  # None: the step cannot be judged
    threshold: float | None
    measured: float
    context: str  # what the reason adds after the comparison, e.g. "(2 × median 1.3)"


def evaluate(
    condition: StepCondition | StaleCondition,
    state: RuleState,
    steps: Sequence[int],
    values: Sequence[float],
    *,
    now_unix: float | None = None,
) -> tuple[RuleState, list[Transition]]:
    """Feed one batch of a metric's logged points; return the new state and its transitions.

    ``steps`` strictly ascending, one finite or non-finite value each (leave out steps the
    metric was not logged at). Steps at or below ``state.last_step`` are skipped. ``state``
    is not modified. ``now_unix`` (the ingest time) is recorded as ``last_seen_unix`` when
    the batch brings a new step; stale rules require it, and a new step resolves them.
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
        verdict = _judge(condition, new.window, step, value)
        transition = _advance(condition, new, step, value, verdict)
        if transition is not None:
            transitions.append(transition)
    new.last_step, new.last_value = int(steps[-1]), float(values[-1])
    if now_unix is not None:
        new.last_seen_unix = now_unix
    return new, transitions


def preview(
    condition: StepCondition | StaleCondition, steps: Sequence[int], values: Sequence[float]
) -> list[Transition]:
    """Where the rule would have fired and resolved on a stored series (from a fresh state)."""
    if isinstance(condition, StaleCondition):
        raise ValueError("a stale rule depends on arrival times, which a stored series lacks")
    return evaluate(condition, RuleState(), steps, values)[1]


def check_stale(
    condition: StaleCondition, state: RuleState, now_unix: float
) -> tuple[RuleState, list[Transition]]:
    """The clock tick of a stale rule: fire once no step has arrived for ``seconds``.

    Fires at the last step seen, at most once per stall (a new step, seen by
    :func:`evaluate`, resolves it). A metric with no step yet is never stale.
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
    value = math.nan if state.last_value is None else state.last_value
    reason = f"no new step for {waited:.0f} s (limit {_num(condition.seconds)} s)"
    return new, [
        Transition(
            "firing", state.last_step, value, condition.seconds, waited, reason, state.last_step
        )
    ]


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
    state.last_step, state.last_value, state.last_seen_unix = (
        int(steps[-1]),
        float(values[-1]),
        now_unix,
    )
    return state, transitions


def _advance(
    condition: StepCondition, state: RuleState, step: int, value: float, verdict: _Verdict
) -> Transition | None:
    """One step of ``ok → pending → firing → ok``; mutates ``state``."""
    if verdict.satisfied:
        state.streak += 1
        if state.status == "firing":
            return None
        cooling = state.cooldown_until_step is not None and step < state.cooldown_until_step
        if state.streak < condition.for_steps or cooling:
            state.status = "pending"
            return None
        state.status, state.fired_at_step = "firing", step
        plural = "" if state.streak == 1 else "s"
        reason = f"{_claim(condition, verdict)} for {state.streak} step{plural}"
        return Transition("firing", step, value, verdict.threshold, verdict.measured, reason, step)
    state.streak = 0
    if state.status == "pending":
        state.status = "ok"
    if state.status != "firing" or verdict.satisfied is None:
        return None
    fired_at = state.fired_at_step if state.fired_at_step is not None else step
    state.status, state.fired_at_step = "ok", None
    if condition.cooldown_steps:
        state.cooldown_until_step = step + condition.cooldown_steps
    reason = _claim(condition, verdict, negated=True)
    return Transition(
        "resolved", step, value, verdict.threshold, verdict.measured, reason, fired_at
    )


def _judge(
    condition: StepCondition, window: list[tuple[int, float]], step: int, value: float
) -> _Verdict:
    """Whether ``value`` at ``step`` satisfies the condition; appends it to ``window``."""
    finite = math.isfinite(value)
    if isinstance(condition, ThresholdCondition):
        known = not math.isnan(value)
        hit = compare(value, condition.op, condition.value) if known else None
        return _Verdict(hit, condition.value, value, "")
    if isinstance(condition, NonFiniteCondition):
        return _Verdict(not finite, None, value, "")
    if isinstance(condition, SpikeCondition):
        history = [v for _, v in window]
        if finite:
            _push(window, step, value, condition.window)
        if math.isnan(value) or len(history) < condition.history_needed:
            return _Verdict(None, None, value, "")
        median = statistics.median(history)
        if not median > 0:
            return _Verdict(None, None, value, "")
        limit = condition.factor * median
        context = f" ({_num(condition.factor)} × median {_num(median)})"
        return _Verdict(value > limit, limit, value, context)
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
        return _Verdict(None, condition.value, math.nan, "")  # crossed: no longer a forecast
    toward = slope > 0 if condition.op in (">", ">=") else slope < 0
    steps_left = (condition.value - level) / slope if toward else math.inf
    context = f" (slope {per_1k:+.3g} per 1k steps {points})"
    return _Verdict(steps_left < condition.within_steps, condition.value, steps_left, context)


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


def _num(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return f"{x:.4g}"
