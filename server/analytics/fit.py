"""The least-squares line, written once: slopes of transitions, of comparisons, of slope and
forecast alert rules, and of the dashboard's forecast all come from `fit_line`.

Over the finite points (NaN and infinities are left out), with ``x = step - origin``::

    slope  = Σ (x - x̄)(y - ȳ) / Σ (x - x̄)²       level = ȳ + slope · (0 - x̄)   (at ``origin``)
    stderr = sqrt(Σ r² / (n - 2) / Σ (x - x̄)²)    r = y - level - slope · x     (0 for n = 2)

Centring on ``origin`` and on the mean keeps steps near 1e9 and beyond from costing
precision. No line (None) with fewer than two finite points or with every point at one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .binned import dot

__all__ = ["LineFit", "fit_line"]


@dataclass(frozen=True, slots=True)
class LineFit:
    """A least-squares line: ``n`` points, ``slope`` per step, ``level`` its value at the
    origin it was fitted about, the slope's standard error, and the first and last steps."""

    n: int
    slope: float
    level: float
    stderr: float
    first: int
    last: int
    origin: float

    def value(self, step: float) -> float:
        """The line's value at ``step``."""
        return self.level + self.slope * (step - self.origin)


def fit_line(steps: npt.ArrayLike, values: npt.ArrayLike, origin: float = 0.0) -> LineFit | None:
    """The least-squares line through the finite points (see the module docstring).

    >>> fit = fit_line([10, 11, 12, 13], [1.0, 3.0, float("nan"), 7.0], origin=13)
    >>> fit.slope, fit.level, fit.n, (fit.first, fit.last)
    (2.0, 7.0, 3, (10, 13))
    >>> fit_line([5, 5], [1.0, 2.0]) is None, fit_line([1], [1.0]) is None
    (True, True)
    """
    s = np.asarray(steps)
    y = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(y)
    s, y = s[finite], y[finite]
    n = len(y)
    if n < 2:
        return None
    if np.issubdtype(s.dtype, np.integer):
        x = (
            (s - np.int64(origin)).astype(np.float64)
            if float(origin).is_integer()
            else (s.astype(np.float64) - origin)
        )
    else:
        x = s.astype(np.float64) - origin
    x_mean, y_mean = float(x.mean()), float(y.mean())
    dx, dy = x - x_mean, y - y_mean
    spread = dot(dx, dx)
    if spread == 0.0:
        return None
    slope = dot(dx, dy) / spread
    stderr = 0.0
    if n > 2:
        residual = dy - slope * dx
        stderr = math.sqrt(dot(residual, residual) / (n - 2) / spread)
    return LineFit(n, slope, y_mean - slope * x_mean, stderr, int(s[0]), int(s[-1]), float(origin))
