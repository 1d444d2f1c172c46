"""Transitions: how a metric's trend changes at an event, or at a change point found in it.

Phenomenon 1 of the domain notes: the final_norm gain grew for 80k steps, and a config change
at step 81k made it grow ≈4x faster. A transition puts numbers on that: a least-squares line
on each side of the step, their slopes per 1,000 steps, their ratio, and the metric's local
level on each side of the step (`.levels`), whose difference is the jump there
(:func:`fit_transition`). :func:`detect_change_points` finds such
steps with no event given: abrupt changes of level or slope, not the gentle curvature every
norm curve has. :func:`transitions` does both for one metric and ranks the result by how
much the slope changed (:attr:`Fit.slope_change`).

Steps are integers, strictly ascending (one run segment). Only finite values take part;
NaN and ±Infinity are skipped wherever they are. Arguments that cannot be right raise
``ValueError`` saying what to pass instead; empty, all-NaN or constant series do not raise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .changepoints import (
    DEFAULT_MIN_RELATIVE_CHANGE,
    DEFAULT_PENALTY,
    ChangePoint,
    _check_detection,
    _check_step,
    _check_window,
    _default_window,
    _detect,
    _finite,
    _series,
    default_window,
    detect_change_points,
)
from .fit import fit_line
from .levels import level_at

__all__ = [
    "DEFAULT_MIN_RELATIVE_CHANGE",
    "DEFAULT_PENALTY",
    "ChangePoint",
    "Fit",
    "Transition",
    "default_window",
    "detect_change_points",
    "fit_transition",
    "transitions",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Segment = tuple[tuple[int, float], tuple[int, float]]

PER_STEPS = 1000
"""Slopes are reported per this many steps."""
_INT64 = np.iinfo(np.int64)


# -- the fit at one step ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fit:
    """Least-squares lines before and after ``at``; slopes per 1,000 steps.

    ``before`` fits the finite points with steps in ``[at - window, at)``, ``after`` those in
    ``[at, at + window]``. ``level_before``/``level_after`` are the metric's local levels on
    either side of ``at`` (`.levels.level_at`: a robust line through the points nearest the
    step, at the step), so ``level_after - level_before`` is the jump there: ≈ 0 on a smooth
    curve, however it bends, and a real jump's size. They are not the long lines' values at
    ``at``, which disagree wherever the curve bends. ``before_segment`` and
    ``after_segment`` are the fitted lines' endpoints ``((step, value), (step, value))``,
    each from the first point its side used to the last, for a chart: a line is drawn where
    its data is, never carried over a gap to the step.
    ``*_stderr`` is the slope's standard error from the residuals (0 with only two points).

    ``ratio`` is ``slope_after / slope_before``, or None when ``slope_before`` cannot be told
    from flat: ``|slope_before| <= 2 · slope_before_stderr`` (which includes exactly 0). A
    ratio to a slope that is noise would be noise itself. Every field is finite or None.
    """

    at: int
    window: int
    slope_before: float
    slope_after: float
    slope_before_stderr: float
    slope_after_stderr: float
    ratio: float | None
    level_before: float
    level_after: float
    n_before: int
    n_after: int
    before_segment: Segment
    after_segment: Segment

    @property
    def slope_change(self) -> float:
        """How much the slope changed: ``|asinh(a / u) - asinh(b / u)|`` for the slopes ``b``
        before and ``a`` after, ``u`` their combined standard error ``sqrt(se_b² + se_a²)``.

        Where both slopes stand well clear of their noise this is ``|ln(a / b)|`` (a 2.5x
        steepening and a 2.5x flattening both score 0.92); unlike the log it stays finite
        through zero and a change of sign, and a slope within its noise of zero counts as
        flat. Dimensionless, so transitions of metrics in different units rank together.
        A pure jump with equal slopes scores 0.
        """
        a, b = self.slope_after, self.slope_before
        # Without noise (u = 0), a change from exactly flat would be infinite: the floor
        # caps it near ln(2e12) ≈ 28.
        unit = max(
            math.hypot(self.slope_before_stderr, self.slope_after_stderr),
            1e-12 * max(abs(a), abs(b)),
        )
        if unit == 0.0:
            return 0.0
        return abs(math.asinh(a / unit) - math.asinh(b / unit))

    def to_dict(self) -> dict[str, Any]:
        """The contract's per-metric fields, then counts, errors and the drawn segments."""
        return {
            "slope_before": self.slope_before,
            "slope_after": self.slope_after,
            "ratio": self.ratio,
            "level_before": self.level_before,
            "level_after": self.level_after,
            "slope_change": self.slope_change,
            "slope_before_stderr": self.slope_before_stderr,
            "slope_after_stderr": self.slope_after_stderr,
            "n_before": self.n_before,
            "n_after": self.n_after,
            "before_segment": [list(point) for point in self.before_segment],
            "after_segment": [list(point) for point in self.after_segment],
        }


@dataclass(frozen=True, slots=True)
class _Line:
    """``value = level + slope · (step - at)`` on ``n`` points, ``first`` to ``last``."""

    n: int
    slope: float
    level: float
    stderr: float
    first: int
    last: int

    def value(self, step: int, at: int) -> float:
        return self.level + self.slope * (step - at)


def fit_transition(steps: npt.ArrayLike, values: npt.ArrayLike, at: int, window: int) -> Fit | None:
    """Lines fitted by ordinary least squares on ``[at - window, at)`` and ``[at, at + window]``.

    On each side, with ``x = step - at`` (exact, in integers) over the finite points::

        slope  = Σ (x - x̄)(y - ȳ) / Σ (x - x̄)²       level = ȳ - slope · x̄   (the line at ``at``)
        stderr = sqrt(Σ r² / (n - 2) / Σ (x - x̄)²)    r = y - level - slope · x

    Centring first keeps steps near 1e9 and beyond from costing precision. Slopes are then
    reported per 1,000 steps. Each side's level is `.levels.level_at` on its points. None
    when either side has fewer than two finite points; see :class:`Fit` for the fields.

    >>> fit = fit_transition([0, 1000, 2000, 3000], [0.0, 1.0, 2.0, 5.0], at=2000, window=2000)
    >>> fit.slope_before, fit.slope_after, fit.ratio, fit.level_before, fit.level_after
    (1.0, 3.0, 3.0, 2.0, 2.0)
    """
    window = _check_window(window)
    _check_step(at)
    return _fit(*_series(steps, values), int(at), window)


def _fit(steps: IntArray, values: FloatArray, at: int, window: int) -> Fit | None:
    """:func:`fit_transition` on checked arrays."""
    bounds = [max(at - window, _INT64.min), at, min(at + window, _INT64.max)]
    lo, mid, hi = (int(i) for i in np.searchsorted(steps, bounds, side="left"))
    if hi < len(steps) and steps[hi] == bounds[2]:
        hi += 1  # the after side is closed: [at, at + window]
    with np.errstate(over="ignore", invalid="ignore"):
        before = _line(steps[lo:mid], values[lo:mid], at)
        after = _line(steps[mid:hi], values[mid:hi], at)
        if before is None or after is None:
            return None
        level_before = level_at(steps[lo:mid], values[lo:mid], at, window)
        level_after = level_at(steps[mid:hi], values[mid:hi], at, window)
    numbers = (before.slope, before.level, before.stderr, after.slope, after.level, after.stderr)
    if not all(math.isfinite(x) for x in (*numbers, level_before, level_after)):
        return None  # values near the float range's end overflow the sums: no line to draw
    ratio = None
    if abs(before.slope) > 2.0 * before.stderr:  # also excludes slope_before == 0
        ratio = after.slope / before.slope
    return Fit(
        at=at,
        window=window,
        slope_before=before.slope * PER_STEPS,
        slope_after=after.slope * PER_STEPS,
        slope_before_stderr=before.stderr * PER_STEPS,
        slope_after_stderr=after.stderr * PER_STEPS,
        ratio=ratio if ratio is not None and math.isfinite(ratio) else None,
        level_before=level_before,
        level_after=level_after,
        n_before=before.n,
        n_after=after.n,
        before_segment=(
            (before.first, before.value(before.first, at)),
            (before.last, before.value(before.last, at)),
        ),
        after_segment=(
            (after.first, after.value(after.first, at)),
            (after.last, after.value(after.last, at)),
        ),
    )


def _line(steps: IntArray, values: FloatArray, at: int) -> _Line | None:
    """The least-squares line through the finite points (`.fit.fit_line` about ``at``);
    None with fewer than two."""
    fit = fit_line(steps, values, origin=at)
    if fit is None:
        return None
    return _Line(fit.n, fit.slope, fit.level, fit.stderr, fit.first, fit.last)


# -- transitions of one metric ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """One row of a metric's transitions: an event, or a change point found in the data.

    ``fit`` is None where a side of the step has fewer than two finite points. ``score`` is
    the detector's (:class:`ChangePoint`): for a detected row, and for an event that a
    detected change was merged into (its step is ``detected_step``).
    """

    step: int
    source: Literal["event", "detected"]
    label: str
    fit: Fit | None
    score: float | None = None
    detected_step: int | None = None

    @property
    def slope_change(self) -> float | None:
        """The ranking key, :attr:`Fit.slope_change`; None without a fit."""
        return None if self.fit is None else self.fit.slope_change

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: step, source, label, score, detected_step and the fit's fields."""
        return {
            "step": self.step,
            "source": self.source,
            "label": self.label,
            "score": self.score,
            "detected_step": self.detected_step,
            "fit": None if self.fit is None else self.fit.to_dict(),
        }


DETECTED_LABEL = "detected change"


def transitions(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    events: Sequence[tuple[int, str]],
    window: int | None = None,
    *,
    detect: bool = True,
    max_points: int = 5,
    penalty: float = DEFAULT_PENALTY,
    merge_distance: int | None = None,
) -> list[Transition]:
    """The fits at each ``(step, label)`` event and at each change point found, ranked.

    ``window`` (default :func:`default_window`, 5 % of the span) is the fits' window; the
    detector looks twice as far (its ``window`` is ``2 · window``): telling a kink from
    curvature takes more context than measuring a slope. A change found within
    ``merge_distance`` steps of an event (default a quarter window: the two fits would share
    most of their points) is that event's: it sets the event's ``score`` and
    ``detected_step`` and is not listed again. Every event is listed, with ``fit`` None
    where the data cannot give one.

    Ranked by :attr:`Fit.slope_change`, largest first; rows without a fit come last; ties
    by step.
    """
    step_array, value_array = _series(steps, values)
    if window is None:
        window = _default_window(*_finite(step_array, value_array))
    window = _check_window(window)
    if merge_distance is None:
        merge_distance = window // 4
    if merge_distance < 0:
        raise ValueError(f"merge_distance must be >= 0 steps, got {merge_distance}")
    _check_detection(max_points, penalty, DEFAULT_MIN_RELATIVE_CHANGE)
    for at, _ in events:
        _check_step(at)
    found = (
        _detect(
            step_array, value_array, max_points, penalty, 2 * window, DEFAULT_MIN_RELATIVE_CHANGE
        )
        if detect
        else []
    )
    merged: dict[int, ChangePoint] = {}
    rows: list[Transition] = []
    for point in found:
        near = [i for i, (at, _) in enumerate(events) if abs(at - point.step) <= merge_distance]
        if near:
            nearest = min(near, key=lambda i: abs(events[i][0] - point.step))
            if nearest not in merged or merged[nearest].score < point.score:
                merged[nearest] = point
            continue
        fit = _fit(step_array, value_array, point.step, window)
        rows.append(Transition(point.step, "detected", DETECTED_LABEL, fit, point.score))
    for i, (at, label) in enumerate(events):
        confirmed = merged.get(i)
        fit = _fit(step_array, value_array, int(at), window)
        rows.append(
            Transition(
                int(at),
                "event",
                label,
                fit,
                None if confirmed is None else confirmed.score,
                None if confirmed is None else confirmed.step,
            )
        )
    return sorted(rows, key=_rank)


def _rank(row: Transition) -> tuple[bool, float, int]:
    """Sort key: rows with a fit first, by slope change descending, then by step."""
    change = row.slope_change
    return (change is None, -(change or 0.0), row.step)
