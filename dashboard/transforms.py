"""What a chart does to a series before drawing it: smoothing, normalizing, another x axis,
a y range that ignores outliers. Pure NumPy over the points drawn; no I/O here.

Every function takes the steps and values of one drawn line (NaN and ±inf kept: they stay
gaps, flagged elsewhere) and returns new arrays of the same length, so that a point keeps
its step whatever is done to its value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_NORMALIZE",
    "MAX_SMOOTHING",
    "NORMALIZE_MODES",
    "Floats",
    "ema",
    "interpolate_x",
    "mean_band",
    "normalize",
    "outlier_range",
]

Floats = npt.NDArray[np.float64]
MAX_SMOOTHING = 0.999
"""The strongest smoothing weight: at 1 the line would never leave its first value."""
NORMALIZE_MODES = ("median", "start")
"""A series ÷ its median over the view (the default, `DEFAULT_NORMALIZE`), or ÷ its first
finite non-zero value in the view."""
DEFAULT_NORMALIZE = "median"
"""The mode a bare "normalize" means: the median, which a warm-up's first points (a grad
norm ten times its later level) do not move, where the first value would set the scale."""


def ema(steps: Sequence[int] | npt.ArrayLike, values: npt.ArrayLike, weight: float) -> Floats:
    """The debiased exponential moving average of ``values`` with smoothing ``weight``
    (0: none; `MAX_SMOOTHING` at most), weighted by the gaps between ``steps``.

    With points one step apart this is TensorBoard's smoothing: ``s = w·s + (1-w)·v``,
    divided by ``1 - w**n`` so that the start is not pulled toward zero. Points further
    apart weigh by the steps they stand for: across a gap of ``Δ`` steps the past decays by
    ``a = w**(Δ/d)``, with ``d`` the median gap, and the new point enters with weight
    ``1 - a``, as if it had been logged at every step of the gap. The same slider then means
    the same window on a line read at full resolution and on one downsampled to a thousand
    points (whose M4 points bunch in fours). Non-finite values are skipped: the past
    decays across them, but they neither move the average nor are smoothed (they come back
    as they were, so the line keeps its gap).

    >>> ema([0, 1, 2], [1.0, 2.0, 3.0], 0.5).round(4).tolist()
    [1.0, 1.6667, 2.4286]
    >>> ema([0, 1, 2], [1.0, float("nan"), 3.0], 0.0).tolist()
    [1.0, nan, 3.0]
    """
    ys = np.asarray(values, dtype=np.float64)
    out = ys.copy()
    w = min(max(float(weight), 0.0), MAX_SMOOTHING)
    if w == 0.0 or len(ys) < 2:
        return out
    xs = np.asarray(steps, dtype=np.float64)
    gaps = np.diff(xs)
    positive = gaps[gaps > 0]
    unit = float(np.median(positive)) if len(positive) else 1.0
    # The first point stands for one gap, like every other: its weight is then 1 - w.
    decay = np.power(w, np.concatenate(([1.0], np.maximum(gaps, 0.0) / unit)))
    num = den = 0.0
    # A plain loop: a recurrence with a decay that changes from point to point has no
    # vectorised form that keeps float64 accuracy over a million points (a cumulative
    # product underflows), and a thousand points take well under a millisecond.
    finite = np.isfinite(ys)
    for i in range(len(ys)):
        a = decay[i]
        num *= a
        den *= a
        if finite[i]:
            num += (1.0 - a) * ys[i]
            den += 1.0 - a
            if den > 0.0:
                out[i] = num / den
    return out


def normalize(values: npt.ArrayLike, mode: str = DEFAULT_NORMALIZE) -> Floats | None:
    """``values`` divided by the absolute median of their finite values (``mode="median"``,
    the default) or by their first finite non-zero value (``"start"``); None when there is
    nothing to divide by (no finite value, a zero median).

    Every series then reads 1 at its typical level (or at the view's start), so that one
    that doubled and one that moved 5 % read as such on one axis. The median is the robust
    reference: a view that opens in a warm-up, where the grad norm is ten times its later
    level, would otherwise draw the rest of the run at 0.1.

    >>> normalize([10.0, 1.0, 2.0, float("nan"), 1.0]).tolist()
    [6.666666666666667, 0.6666666666666666, 1.3333333333333333, nan, 0.6666666666666666]
    >>> normalize([2.0, 4.0, float("nan"), 1.0], "start").tolist()
    [1.0, 2.0, nan, 0.5]
    >>> normalize([0.0, 0.0], "median") is None
    True
    """
    ys = np.asarray(values, dtype=np.float64)
    finite = ys[np.isfinite(ys)]
    if mode == "start":
        nonzero = finite[finite != 0]
        base = float(nonzero[0]) if len(nonzero) else 0.0
    elif mode == "median":
        base = float(np.median(finite)) if len(finite) else 0.0
    else:
        raise ValueError(f"normalize mode must be one of {NORMALIZE_MODES}, got {mode!r}")
    if base == 0.0 or not np.isfinite(base):
        return None
    return ys / abs(base)


def interpolate_x(steps: npt.ArrayLike, ref_steps: npt.ArrayLike, ref_x: npt.ArrayLike) -> Floats:
    """Each of ``steps`` on another axis given by a reference series (``ref_x`` logged at
    ``ref_steps``: a token count, a wall clock), interpolated linearly between its points;
    NaN outside the reference's steps (nothing says where those steps lie).

    The reference is made non-decreasing first (its running maximum: a counter restarted
    from a checkpoint must not fold the axis back), and its non-finite points are dropped.

    >>> interpolate_x([0, 5, 10, 20], [0, 10], [0.0, 1000.0]).tolist()
    [0.0, 500.0, 1000.0, nan]
    """
    xs = np.asarray(steps, dtype=np.float64)
    rs = np.asarray(ref_steps, dtype=np.float64)
    rx = np.asarray(ref_x, dtype=np.float64)
    keep = np.isfinite(rx) & np.isfinite(rs)
    rs, rx = rs[keep], rx[keep]
    if len(rs) == 0:
        return np.full(len(xs), np.nan)
    order = np.argsort(rs, kind="stable")
    rs, rx = rs[order], np.maximum.accumulate(rx[order])
    out = np.interp(xs, rs, rx)
    out[(xs < rs[0]) | (xs > rs[-1])] = np.nan
    return out


def outlier_range(
    series: Sequence[npt.ArrayLike], *, log: bool = False, tail: float = 0.02
) -> tuple[float, float] | None:
    """A y range for ``series`` that leaves out their most extreme points: from the
    ``tail`` quantile to the ``1 - tail`` quantile of all their finite values (positive
    ones on a log axis, where the range is given in log10 as plotly.js takes it), widened
    by a tenth on each side. None when no value could set a range.

    A run whose grad norm spiked to 400 once draws its usual 0.2–1.5 band across the chart
    instead of a flat line at the bottom; the spike runs off the top, where it stays
    visible as a line leaving the chart.

    >>> outlier_range([[1.0] * 49 + [100.0], [2.0] * 50])
    (0.9, 2.1)
    """
    parts = [np.asarray(s, dtype=np.float64).ravel() for s in series]
    values = np.concatenate(parts) if parts else np.empty(0)
    values = values[np.isfinite(values)]
    if log:
        values = np.log10(values[values > 0])
    if len(values) == 0:
        return None
    low, high = (float(q) for q in np.quantile(values, [tail, 1.0 - tail]))
    pad = (high - low) / 10 if high > low else (abs(low) / 10 or 1.0)
    return round(low - pad, 12), round(high + pad, 12)


def mean_band(
    lines: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], *, points: int = 4000
) -> tuple[npt.NDArray[np.int64], Floats, Floats, Floats, npt.NDArray[np.int64]]:
    """The mean of several lines (each a pair of integer steps and values, such as seeds
    of one experiment) at each step of a common grid, with their minimum and maximum there
    and how many of them count: ``(steps, mean, low, high, count)``.

    The lines were downsampled apart, so their points lie at different steps. The grid is
    the union of their steps (an evenly spaced ``points`` of them where the union is
    longer); each line is interpolated linearly onto it between its own first and last
    step, and counts nowhere else. Where no line counts, the mean and the band are NaN (a
    gap). A non-finite value counts as a step the line did not log (the chart flags it on
    its own).

    >>> steps, mean, low, high, count = mean_band(
    ...     [([0, 10, 20], [1.0, 2.0, 3.0]), ([5, 15], [4.0, 6.0])])
    >>> steps.tolist(), mean.tolist(), count.tolist()
    ([0, 5, 10, 15, 20], [1.0, 2.75, 3.5, 4.25, 3.0], [1, 2, 2, 2, 1])
    >>> low.tolist(), high.tolist()
    ([1.0, 1.5, 2.0, 2.5, 3.0], [1.0, 4.0, 5.0, 6.0, 3.0])
    """
    if points < 2:
        raise ValueError(f"mean_band needs a grid of at least 2 points, got points={points}")
    kept: list[tuple[Floats, Floats]] = []
    for steps, values in lines:
        xs = np.asarray(steps, dtype=np.float64)
        ys = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(xs) & np.isfinite(ys)
        order = np.argsort(xs[finite], kind="stable")
        kept.append((xs[finite][order], ys[finite][order]))
    logged = [xs for xs, _ in kept if len(xs)]
    grid = np.unique(np.concatenate(logged)) if logged else np.empty(0)
    if len(grid) > points:
        grid = grid[np.unique(np.linspace(0, len(grid) - 1, points).round().astype(np.int64))]
    stacked = np.full((len(kept), len(grid)), np.nan)
    for row, (xs, ys) in zip(stacked, kept, strict=True):
        if len(xs):
            inside = (grid >= xs[0]) & (grid <= xs[-1])
            row[inside] = np.interp(grid[inside], xs, ys)
    counted = np.isfinite(stacked)
    count = counted.sum(axis=0).astype(np.int64)
    some = count > 0
    total = np.where(counted, stacked, 0.0).sum(axis=0)
    mean = np.full(len(grid), np.nan)
    mean[some] = total[some] / count[some]
    low = np.where(counted, stacked, np.inf).min(axis=0, initial=np.inf)
    high = np.where(counted, stacked, -np.inf).max(axis=0, initial=-np.inf)
    low[~some] = high[~some] = np.nan
    return grid.round().astype(np.int64), mean, low, high, count
