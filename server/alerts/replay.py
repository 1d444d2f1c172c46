"""A rule replayed over a whole stored series, fast: the transitions `evaluation.preview`
finds (every point fed through `evaluation.evaluate` from a fresh state), to the last digit,
in a fraction of its time. This is what a rule's preview runs.

Slope and forecast rules fit a line to the last ``window`` finite points at every step; one
`evaluation.linear_fit` a step costs about 125 µs at a window of 500, 12 s over the demo's
95,000 steps. Here the fits of every step are taken at once with NumPy (blocks of rows of a
sliding-window view), and a step's verdict comes from them where rounding cannot change it.
A step's fit is taken again exactly as `evaluate` takes it (`evaluation._judge` over the
same points) where it could: within a millionth of a boundary (the slope's limit, the
forecast's ``within_steps`` or twice it, a slope near zero), and wherever the fitted numbers
count beyond a yes or a no (a step that satisfies the condition, whose numbers go into the
reason, and every step of a firing alert, whose numbers make the worst value).

The NumPy fit rounds differently from the exact one by about ``n · ε`` of the window's
scale (``sqrt(Σdy² / Σdx²)`` for the slope): ~1e-13 relative for a window of 500, far inside
the millionth kept as a margin.

Threshold and non-finite rules judge each value alone: the steps that do not satisfy them
while they are ok change nothing but a zero streak, and are passed over.

Spike rules keep their window's values sorted as well (insert and remove by bisection), so
that each step reads the median instead of sorting the window again.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from .conditions import (
    ForecastCondition,
    NonFiniteCondition,
    SlopeCondition,
    SpikeCondition,
    StaleCondition,
    StepCondition,
    ThresholdCondition,
)
from .evaluation import _advance, _judge, _recovery_bar, _Verdict, preview
from .state import RuleState, Transition
from .state import short as _num

__all__ = ["replay"]

MARGIN = 1e-6
"""Relative distance to a boundary within which a step's verdict is taken exactly."""
BLOCK_ROWS = 512
"""Windows fitted at once: 512 × a window of 500 is 2 MB an intermediate array."""

FloatArray = npt.NDArray[np.float64]


def replay(
    condition: StepCondition | StaleCondition,
    steps: Sequence[int],
    values: Sequence[float],
    *,
    repeat_every_steps: int | None = None,
) -> list[Transition]:
    """Where the rule would have fired, repeated and resolved on a stored series (from a
    fresh state): `evaluation.preview`'s answer, exactly.

    >>> from normwatch.server.alerts.conditions import parse_condition
    >>> rule = parse_condition({"kind": "slope", "op": ">", "per_1k_steps": 500, "window": 3})
    >>> [(t.state, t.step) for t in replay(rule, [1, 2, 3, 4, 5], [0.0, 0.0, 0.0, 3.0, 6.0])]
    [('firing', 4)]
    """
    if isinstance(condition, (SlopeCondition, ForecastCondition)):
        return _replay_fitted(condition, steps, values, repeat_every_steps)
    if isinstance(condition, SpikeCondition):
        return _replay_spike(condition, steps, values, repeat_every_steps)
    if isinstance(condition, (ThresholdCondition, NonFiniteCondition)):
        return _replay_pointwise(condition, steps, values, repeat_every_steps)
    return preview(condition, steps, values, repeat_every_steps=repeat_every_steps)


def _replay_pointwise(
    condition: ThresholdCondition | NonFiniteCondition,
    steps: Sequence[int],
    values: Sequence[float],
    repeat_every_steps: int | None,
) -> list[Transition]:
    """A rule that judges each value alone: every step `_judge` and `_advance` as
    `evaluate` takes them, except the run of steps between satisfying ones while the rule
    is ok, which only keep its streak at zero and are passed over."""
    step_list, value_list = _checked(steps, values)
    y = np.asarray(value_list, dtype=np.float64)
    if isinstance(condition, ThresholdCondition):
        with np.errstate(invalid="ignore"):
            satisfied = _COMPARE[condition.op](y, condition.value)
    else:
        satisfied = ~np.isfinite(y)
    waking = np.flatnonzero(satisfied).tolist()
    state, transitions, i, next_waking = RuleState(), [], 0, 0
    while i < len(step_list):
        if state.status == "ok":
            next_waking = bisect.bisect_left(waking, i, lo=next_waking)
            if next_waking == len(waking):
                break
            if waking[next_waking] > i:
                state.streak = 0
                i = waking[next_waking]
        step, value = step_list[i], value_list[i]
        verdict = _judge(condition, state, step, value)
        transition = _advance(condition, state, step, value, verdict, repeat_every_steps, None)
        if transition is not None:
            transitions.append(transition)
        i += 1
    return transitions


def _checked(steps: Sequence[int], values: Sequence[float]) -> tuple[list[int], list[float]]:
    """The points as Python numbers, as `evaluate` takes them; its errors for bad input."""
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length: {len(steps)} != {len(values)}")
    step_list = [int(s) for s in steps]
    value_list = [float(v) for v in values]
    for i in range(1, len(step_list)):
        if step_list[i] <= step_list[i - 1]:
            raise ValueError(f"steps[{i}]: {step_list[i]} does not follow {step_list[i - 1]}")
    return step_list, value_list


def window_fits(
    steps: npt.NDArray[np.int64], values: FloatArray, window: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Least-squares lines through every ``window`` consecutive points, each about its last
    step (as `linear_fit`): ``(slope, level, scale)`` of each, ``scale`` being
    ``sqrt(Σdy² / Σdx²)``, the largest slope the points allow (|correlation| = 1)."""
    rows = len(steps) - window + 1
    slope, level, scale = np.empty((3, max(rows, 0)))
    if rows <= 0:
        return slope, level, scale
    s_windows = np.lib.stride_tricks.sliding_window_view(steps, window)
    y_windows = np.lib.stride_tricks.sliding_window_view(values, window)
    # Steps logged at a constant interval (the usual case) put every window's points at the
    # same distances from its last step: one row of x serves them all.
    gaps = np.diff(steps[-window:]) if len(steps) else steps
    uniform = bool(len(steps) > 1 and np.all(np.diff(steps) == gaps[0]))
    for lo in range(0, rows, BLOCK_ROWS):
        hi = min(lo + BLOCK_ROWS, rows)
        s = s_windows[lo:hi] if not uniform else s_windows[lo : lo + 1]
        x = (s - s[:, -1:]).astype(np.float64)
        y = y_windows[lo:hi]
        x_mean, y_mean = x.mean(axis=1), y.mean(axis=1)
        dx, dy = x - x_mean[:, None], y - y_mean[:, None]
        spread = np.einsum("ij,ij->i", dx, dx)
        if uniform:
            cov = np.einsum("ij,j->i", dy, dx[0])
        else:
            cov = np.einsum("ij,ij->i", dx, dy)
        slope[lo:hi] = cov / spread
        level[lo:hi] = y_mean - slope[lo:hi] * x_mean
        scale[lo:hi] = np.sqrt(np.einsum("ij,ij->i", dy, dy) / spread)
    return slope, level, scale


_COMPARE = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal}


@dataclass(frozen=True)
class _Fitted:
    """What the NumPy fits say of each judged step (a step with ``window`` finite points so
    far and a finite value), by row: ``code`` 0 where the step is certainly not satisfied,
    1 where it is, 2 where rounding could decide (judged exactly); ``measured`` and
    ``crossed`` as `_judge` gives them."""

    code: npt.NDArray[np.int8]
    measured: FloatArray
    crossed: npt.NDArray[np.bool_]


def _near(a: FloatArray, b: float | FloatArray) -> npt.NDArray[np.bool_]:
    with np.errstate(invalid="ignore"):
        return np.abs(a - b) <= MARGIN * np.maximum(np.abs(a), np.abs(b))


def fitted_verdicts(
    condition: SlopeCondition | ForecastCondition,
    values: FloatArray,
    slope: FloatArray,
    level: FloatArray,
    scale: FloatArray,
) -> _Fitted:
    """`_judge`'s verdicts from the NumPy fits of the judged steps (``values`` their values),
    each marked where rounding could change it (see the module docstring)."""
    unsure = np.abs(slope) <= MARGIN * scale
    crossed = np.zeros(len(values), dtype=np.bool_)
    if isinstance(condition, SlopeCondition):
        measured = 1000.0 * slope
        unsure |= _near(measured, condition.per_1k_steps)
        hit = _COMPARE[condition.op](measured, condition.per_1k_steps)
    else:
        crossed = _COMPARE[condition.op](values, condition.value)
        toward = slope > 0 if condition.op in (">", ">=") else slope < 0
        with np.errstate(divide="ignore", invalid="ignore"):
            measured = np.where(toward, (condition.value - level) / slope, np.inf)
        within = condition.within_steps
        unsure |= toward & (_near(measured, within) | _near(measured, 2 * within))
        unsure &= ~crossed
        measured[crossed] = np.nan
        hit = ~crossed & (measured < within)
    code = np.where(unsure, 2, hit.astype(np.int8)).astype(np.int8)
    return _Fitted(code, measured, crossed)


def _replay_fitted(
    condition: SlopeCondition | ForecastCondition,
    steps: Sequence[int],
    values: Sequence[float],
    repeat_every_steps: int | None,
) -> list[Transition]:
    step_list, value_list = _checked(steps, values)
    finite = np.isfinite(np.asarray(value_list, dtype=np.float64))
    where = np.flatnonzero(finite)
    f_steps = [step_list[i] for i in where.tolist()]
    f_values = [value_list[i] for i in where.tolist()]
    w = condition.window
    f_y = np.asarray(f_values, dtype=np.float64)
    fits = window_fits(np.asarray(f_steps, dtype=np.int64), f_y, w)
    verdicts = fitted_verdicts(condition, f_y[w - 1 :], *fits)
    # The row of each step's fit: -1 for a step that is not judged (a value that is not
    # finite, or too few points so far), which `_judge` answers with no verdict.
    row = np.full(len(step_list), -1, dtype=np.int64)
    row[where[w - 1 :]] = np.arange(len(where) - w + 1) if len(where) >= w else []
    code = np.zeros(len(step_list), dtype=np.int8)
    code[row >= 0] = verdicts.code
    # Steps that can change an ok state: any other leaves it ok (its streak at zero).
    waking = np.flatnonzero(code != 0).tolist()
    rows, codes = row.tolist(), code.tolist()
    measured, crossed = verdicts.measured.tolist(), verdicts.crossed.tolist()
    threshold = condition.per_1k_steps if isinstance(condition, SlopeCondition) else condition.value
    repeat_every = repeat_every_steps
    state, transitions, i, next_waking = RuleState(), [], 0, 0
    while i < len(step_list):
        if state.status == "ok" and not state.handed_over:
            next_waking = bisect.bisect_left(waking, i, lo=next_waking)
            if next_waking == len(waking):
                break
            if waking[next_waking] > i:
                state.streak = 0
                i = waking[next_waking]
        step, value, r = step_list[i], value_list[i], rows[i]
        transition = None
        if r < 0:
            verdict = _Verdict(None, None, value, "")
        elif crossed[r]:
            verdict = _Verdict(None, threshold, math.nan, "", crossed=True)
        elif codes[i] != 2:
            # Tried on a copy: kept unless the step makes a transition or may touch the
            # worst value, whose numbers must be `_judge`'s own.
            verdict = _Verdict(codes[i] == 1, threshold, measured[r], "")
            tried = replace(state)
            transition = _advance(condition, tried, step, value, verdict, repeat_every, None)
            worst = state.worst
            touched = tried.worst != worst or (
                worst is not None and abs(measured[r] - worst) <= MARGIN * abs(worst)
            )
            if transition is None and not touched:
                state, i = tried, i + 1
                continue
        if r >= 0 and not crossed[r]:
            # The window as `evaluate` holds it before this step; `_judge` adds the step.
            held = zip(f_steps[r : r + w - 1], f_values[r : r + w - 1], strict=True)
            verdict = _judge(condition, RuleState(window=list(held)), step, value)
        transition = _advance(condition, state, step, value, verdict, repeat_every, None)
        if transition is not None:
            transitions.append(transition)
        i += 1
    return transitions


def _replay_spike(
    condition: SpikeCondition,
    steps: Sequence[int],
    values: Sequence[float],
    repeat_every_steps: int | None,
) -> list[Transition]:
    step_list, value_list = _checked(steps, values)
    recent: deque[float] = deque()
    ordered: list[float] = []
    needed, factor = condition.history_needed, condition.factor
    state, transitions = RuleState(), []
    bar: tuple[float, str] | None = None
    bar_known = False  # whether `bar` is this firing's
    for step, value in zip(step_list, value_list, strict=True):
        finite = math.isfinite(value)
        if state.status == "firing":
            # The window stays as it was while the spike fires: its bar is computed once.
            if not bar_known:
                bar, bar_known = _recovery_bar(condition, ordered), True
            if bar is None or math.isnan(value):
                verdict = _Verdict(None, None, value, "")
            else:
                verdict = _Verdict(value > bar[0], bar[0], value, bar[1])
        elif math.isnan(value) or len(ordered) < needed:
            verdict = _Verdict(None, None, value, "")
        else:
            median = _median(ordered)
            if not median > 0:
                verdict = _Verdict(None, None, value, "")
            else:
                limit = factor * median
                context = f" ({_num(factor)} × median {_num(median)})"
                verdict = _Verdict(value > limit, limit, value, context)
        if finite and state.status != "firing" and not verdict.satisfied:
            recent.append(value)
            bisect.insort(ordered, value)
            if len(recent) > condition.window:
                del ordered[bisect.bisect_left(ordered, recent.popleft())]
        transition = _advance(condition, state, step, value, verdict, repeat_every_steps, None)
        if transition is not None:
            transitions.append(transition)
        if state.status != "firing":
            bar_known = False
    return transitions


def _median(ordered: list[float]) -> float:
    """`statistics.median` of values already in order."""
    n = len(ordered)
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2
