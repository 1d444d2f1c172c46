"""A metric's level on either side of a step: measured close to the step, robust to noise.

A transition's level change is ``level_after - level_before``, the difference of these two
levels (`.transitions.Fit`). Each is the **Theil–Sen line** through the points of its side
nearest the step, evaluated at the step. With ``x = step - at`` over those points::

    slope = median over pairs i < j of (y_j - y_i) / (x_j - x_i)
    level = median over i of (y_i - slope · x_i)

The points are the side's finite points within ``window / LEVEL_SHARE`` steps of the step,
but at least `LEVEL_MIN_POINTS` and at most `LEVEL_MAX_POINTS` of them, the nearest.

Why this estimate:

- **A line, not a mean.** The mean or median of the points next to the step lags a sloped
  trend by ``slope × span / 2`` on each side, so a straight line through the step would
  read a jump of ``slope × span``; a line evaluated at the step reads none on any straight
  trend, and on a curve its error shrinks as the square of the span.
- **Short.** The lines the slopes come from span the whole window on each side; evaluated
  at the step, they disagree wherever the curve bends differently on the two sides (the
  demo's grad norm at 81k, flat before and curving up after, read a drop of 0.41 where
  nothing jumped). An eighth of the window makes that error 64 times smaller on a
  quadratic bend (the 128-point cap, smaller still); the price is noise of its own: with
  128 points a side the level change varies by ≈ 0.28 of the metric's noise SD (0.283
  measured by ``scripts/level-change``), with 16 points by ≈ 0.8.
- **Medians.** A spike among the points (up to 29 % of them, Theil–Sen's breakdown point)
  does not move the level, where one outlier moves a least-squares line without bound.

The values are scaled by a power of two before the differences are taken, so values near
the float range's end do not overflow, and scaling a series by a power of two scales its
levels exactly.

>>> level_at([-3, -2, -1], [1.0, 2.0, 3.0], at=0, window=100)  # the line y = 4 + x, at 0
4.0
>>> level_at([0, 1, 2, 3, 4], [5.0, 5.0, 90.0, 5.0, 5.0], at=0, window=100)  # a spike
5.0
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["LEVEL_MAX_POINTS", "LEVEL_MIN_POINTS", "LEVEL_SHARE", "level_at", "nearest"]

LEVEL_SHARE = 8
"""A level is measured on the points within ``window / LEVEL_SHARE`` steps of the step."""
LEVEL_MIN_POINTS = 16
"""… but on at least this many, the nearest (all of the side's where it has fewer)."""
LEVEL_MAX_POINTS = 128
"""… and on at most this many, the nearest."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_INT64 = np.iinfo(np.int64)


def nearest(steps: IntArray, at: int, window: int) -> slice:
    """Which of one side's ascending ``steps`` (every one finite, all before ``at`` or all
    from ``at`` on) a level is measured on: the nearest to ``at`` among those within
    ``window / LEVEL_SHARE`` steps of it, at least `LEVEL_MIN_POINTS`, at most
    `LEVEL_MAX_POINTS`.

    >>> steps = np.arange(-200, 0)
    >>> (lambda s: (int(steps[s][0]), int(steps[s][-1])))(nearest(steps, 0, 400))
    (-50, -1)
    """
    n = len(steps)
    before = n > 0 and int(steps[-1]) < at
    # Steps are integers: within window / LEVEL_SHARE is within its floor, compared exactly.
    reach = window // LEVEL_SHARE
    if before:
        edge = np.int64(max(at - reach, _INT64.min))
        close = n - int(np.searchsorted(steps, edge, side="left"))
    else:
        edge = np.int64(min(at + reach, _INT64.max))
        close = int(np.searchsorted(steps, edge, side="right"))
    count = min(n, max(close, LEVEL_MIN_POINTS), LEVEL_MAX_POINTS)
    return slice(n - count, n) if before else slice(0, count)


def level_at(steps: npt.ArrayLike, values: npt.ArrayLike, at: int, window: int) -> float:
    """The level at ``at`` of one side's points (steps ascending, all before ``at`` or all
    from ``at`` on): the Theil–Sen line through the finite ones `nearest` the step, at the
    step (see the module notes). NaN without a finite point; with one, its value."""
    s = np.asarray(steps, dtype=np.int64)
    y = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(y)
    s, y = s[finite], y[finite]
    if len(y) == 0:
        return math.nan
    picked = nearest(s, at, window)
    s, y = s[picked], y[picked]
    if len(y) == 1:
        return float(y[0])
    # Scaled by a power of two: exact, and no difference of two values overflows.
    largest = float(np.max(np.abs(y)))
    scale = math.ldexp(1.0, math.frexp(largest)[1] - 1) if largest > 0.0 else 1.0
    y = y / scale
    x = (s - np.int64(at)).astype(np.float64)
    i, j = np.triu_indices(len(y), k=1)
    slope = float(np.median((y[j] - y[i]) / (x[j] - x[i])))
    return float(np.median(y - slope * x)) * scale
