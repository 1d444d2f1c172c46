"""The overlay chart's forecast: a least-squares line over the last points drawn, extended
past the latest step, and how many steps it takes to reach an alert rule's threshold. Pure.

The line is fitted to the points the chart drew (M4 keeps each pixel's first, last, lowest
and highest point, so the highs and lows balance out in a least-squares fit); the alert
rules' ``forecast`` condition (`normwatch.server.alerts.conditions`) judges the stored
points themselves and is what notifies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from normwatch.server.analytics.fit import fit_line

__all__ = [
    "AHEAD_FRACTION",
    "FIT_FRACTION",
    "MIN_POINTS",
    "Forecast",
    "approx_steps",
    "forecast",
    "forecast_text",
    "least_squares",
    "value_text",
]

FIT_FRACTION = 0.1
"""The line is fitted to the points in this last share of the steps shown."""
MIN_POINTS = 5
"""Fewer points than this in that share: the last this many points are fitted instead."""
AHEAD_FRACTION = 0.25
"""The line reaches this share of the steps shown past the latest step, or the threshold
when that is nearer than `MAX_AHEAD_SPANS` times the steps shown."""
MAX_AHEAD_SPANS = 2.0


@dataclass(frozen=True)
class Forecast:
    """``value = level + slope · (step - latest)``: the line fitted to ``points`` points from
    step ``first`` to ``latest``, drawn up to ``end``; ``eta`` steps after ``latest`` it
    reaches ``target`` (the nearest threshold it heads toward; None when it heads toward
    none). ``slope`` is per step."""

    metric: str
    slope: float
    level: float
    first: int
    latest: int
    end: int
    points: int
    target: float | None = None
    eta: float | None = None
    thresholds: int = 0
    """How many thresholds of the metric there were to head toward."""

    def value(self, step: float) -> float:
        return self.level + self.slope * (step - self.latest)


def least_squares(steps: npt.ArrayLike, values: npt.ArrayLike, at: float) -> tuple[float, float]:
    """The ordinary least-squares line through the points, as ``(slope, level)``: its slope
    per step and its value at step ``at``::

        slope = Σ (x - x̄)(y - ȳ) / Σ (x - x̄)²      level = ȳ + slope · (at - x̄)

    with ``x`` the steps taken relative to ``at`` (so that steps near 1e9 lose no
    precision). A slope of 0 when every point has the same step.

    >>> least_squares([0, 1, 2, 3], [1.0, 3.0, 5.0, 7.0], at=3)
    (2.0, 7.0)
    """
    fit = fit_line(steps, values, origin=at)
    if fit is None:  # every point at one step: flat, at their mean
        return 0.0, float(np.mean(np.asarray(values, dtype=np.float64)))
    return fit.slope, fit.level


def forecast(
    metric: str,
    steps: Sequence[int],
    values: Sequence[float],
    *,
    span: tuple[int, int] | None = None,
    thresholds: Sequence[float] = (),
    fraction: float = FIT_FRACTION,
) -> Forecast | None:
    """The line over the finite points with steps in the last ``fraction`` of ``span`` (the
    steps shown; default: the points' own first to last step), at least the last
    `MIN_POINTS` of them, extended ahead of the latest step. None with fewer than two
    finite points.

    ``thresholds`` are the metric's alert values: ``eta`` is the steps from the latest step
    until the line meets the nearest one it heads toward (one above the line's value there
    for a rising line, below for a falling one).

    >>> f = forecast("m", [0, 10, 20, 30], [1.0, 2.0, 3.0, 4.0], thresholds=[9.0, 0.5])
    >>> f.slope, f.level, f.target, f.eta
    (0.1, 4.0, 9.0, 50.0)
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    xs = np.asarray(steps, dtype=np.int64)
    ys = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(ys)
    xs, ys = xs[finite], ys[finite]
    if len(xs) < 2:
        return None
    lo, hi = span if span is not None else (int(xs[0]), int(xs[-1]))
    width = max(1, hi - lo)
    latest = int(xs[-1])
    take = max(MIN_POINTS, int(np.count_nonzero(xs >= latest - fraction * width)))
    xs, ys = xs[-take:], ys[-take:]
    slope, level = least_squares(xs, ys, latest)
    if not (math.isfinite(slope) and math.isfinite(level)):
        return None
    # (steps to reach it, threshold) for each threshold the line heads toward.
    ahead_of = [
        ((t - level) / slope, t)
        for t in thresholds
        if math.isfinite(t) and slope != 0 and (t - level) / slope > 0
    ]
    eta, target = min(ahead_of, default=(None, None))
    ahead = max(1.0, AHEAD_FRACTION * width)
    if eta is not None and eta <= MAX_AHEAD_SPANS * width:
        ahead = max(ahead, eta)
    return Forecast(
        metric=metric,
        slope=slope,
        level=level,
        first=int(xs[0]),
        latest=latest,
        end=latest + round(ahead),
        points=len(xs),
        target=target,
        eta=eta,
        thresholds=len(thresholds),
    )


def approx_steps(steps: float) -> str:
    """A number of steps as a forecast says it: two significant digits from 100 on.

    >>> approx_steps(3217.4), approx_steps(96.6), approx_steps(123_456)
    ('3,200', '97', '120,000')
    """
    if steps < 100:
        return f"{round(steps):,}"
    digits = math.floor(math.log10(steps)) - 1
    return f"{round(steps, -digits):,.0f}"


def value_text(value: float) -> str:
    """A threshold as a forecast names it: one decimal for whole numbers (``5.0``), else up
    to four significant digits.

    >>> value_text(5), value_text(0.25), value_text(1234.5)
    ('5.0', '0.25', '1234')
    """
    if float(value).is_integer() and abs(value) < 1e6:
        return f"{value:.1f}"
    return f"{value:.4g}"


def forecast_text(found: Forecast) -> str:
    """What the forecast says: the trend, and when it reaches a threshold.

    >>> forecast_text(forecast("m", [0, 1000, 2000], [1.0, 2.0, 3.0], thresholds=[5]))
    'forecast of m: +1 per 1k steps over the last 3 points; reaches 5.0 in ~2,000 steps'
    """
    trend = (
        f"forecast of {found.metric}: {1000 * found.slope:+.3g} per 1k steps "
        f"over the last {found.points:,} points"
    )
    if found.target is not None and found.eta is not None:
        return f"{trend}; reaches {value_text(found.target)} in ~{approx_steps(found.eta)} steps"
    if found.thresholds:
        return f"{trend}; heading toward no threshold"
    return trend
