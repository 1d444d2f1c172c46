"""What a chart does to a series before drawing it: smoothing, normalizing, another x axis,
a y range that ignores outliers. Pure NumPy over the points drawn; no I/O here.

Every function takes the steps and values of one drawn line (NaN and ±inf kept: they stay
gaps, flagged elsewhere) and returns new arrays of the same length, so that a point keeps
its step whatever is done to its value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_NORMALIZE",
    "MAX_SMOOTHING",
    "Band",
    "bucket_firsts",
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


@dataclass(frozen=True)
class Band:
    """Several lines on one grid of step buckets: per bucket, its first step, the mean of
    the lines' values, the least and greatest value any line reaches in it, and how many
    lines count there (the arrays are the buckets', in step order)."""

    steps: npt.NDArray[np.int64]
    """Each bucket's first step."""
    last: int
    """The grid's last step (the last bucket ends there)."""
    mean: Floats
    low: Floats
    high: Floats
    count: npt.NDArray[np.int64]


def bucket_firsts(start: int, end: int, buckets: int) -> list[int]:
    """The first step of each of ``buckets`` equal buckets of ``[start, end]``, as M4 cuts
    a chart's range into pixels (`storage.m4.bucket_of`): bucket ``k`` starts at
    ``start + ⌈k · (end − start + 1) / buckets⌉``; at most one bucket a step. Python
    integers, so steps near 2**63 do not overflow.

    >>> bucket_firsts(0, 9, 4), bucket_firsts(0, 2, 10)
    ([0, 3, 5, 8], [0, 1, 2])
    """
    span = end - start + 1
    count = max(1, min(buckets, span))
    return [start + -(-k * span // count) for k in range(count)]


def mean_band(
    lines: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]],
    *,
    start: int,
    end: int,
    buckets: int,
    downsampled: Sequence[bool] = (),
) -> Band:
    """The mean of several lines (each a pair of integer steps and values, such as seeds
    of one experiment) on ``buckets`` equal buckets of ``[start, end]``
    (`bucket_firsts`), with a band from the least to the greatest value of any line in
    each bucket.

    A line counts in the buckets between its own first and last finite point, where it is
    drawn as straight segments between its points. In each of them:

    * its low and high are the least and greatest of its points in the bucket and of its
      line where it crosses the bucket's edges: the extremes of what is drawn of it there.
      The band of a bucket goes from the least low of the lines to the greatest high, so
      every point of every line, a one-step spike included, lies within the band at its
      step. Lines read with M4 downsampling keep each pixel's lowest and highest point, so
      with pixels of the same width the band holds every stored extreme.
    * its value is the mean of its points in the bucket; for a line ``downsampled`` (M4:
      the bucket holds its first, last, lowest and highest point) the mean of its first
      and last, so that a spike widens the band instead of dragging the mean by a quarter
      of its height; with no point in the bucket, its line at the bucket's middle.

    The mean is over the lines that count; where none does, mean and band are NaN (a
    gap). A non-finite value counts as a step the line did not log (the chart flags it
    on its own).

    >>> band = mean_band([([0, 1, 2, 3], [1.0, 9.0, 1.0, 1.0]), ([0, 3], [3.0, 3.0])],
    ...                  start=0, end=3, buckets=2)
    >>> band.steps.tolist(), band.mean.tolist(), band.count.tolist()
    ([0, 2], [4.0, 2.0], [2, 2])
    >>> band.low.tolist(), band.high.tolist()
    ([1.0, 1.0], [9.0, 3.0])
    """
    if buckets < 1:
        raise ValueError(f"mean_band needs at least 1 bucket, got buckets={buckets}")
    if end < start:
        raise ValueError(f"mean_band's end ({end}) is below its start ({start})")
    firsts = bucket_firsts(start, end, buckets)
    grid = np.asarray(firsts, dtype=np.float64)
    lasts = np.append(grid[1:] - 1, float(end))
    n = len(firsts)
    values = np.full((len(lines), n), np.nan)
    lows = np.full((len(lines), n), np.inf)
    highs = np.full((len(lines), n), -np.inf)
    for row, (steps, ys) in enumerate(lines):
        xs, vs = _finite_sorted(steps, ys)
        if len(xs):
            thin = row < len(downsampled) and downsampled[row]
            _bucket_line(xs, vs, grid, lasts, thin, values[row], lows[row], highs[row])
    counted = np.isfinite(values)
    count = counted.sum(axis=0).astype(np.int64)
    some = count > 0
    mean = np.full(n, np.nan)
    mean[some] = np.where(counted, values, 0.0).sum(axis=0)[some] / count[some]
    low = lows.min(axis=0, initial=np.inf)
    high = highs.max(axis=0, initial=-np.inf)
    low[~some] = high[~some] = np.nan
    return Band(np.asarray(firsts, dtype=np.int64), int(end), mean, low, high, count)


def _finite_sorted(steps: npt.ArrayLike, values: npt.ArrayLike) -> tuple[Floats, Floats]:
    xs = np.asarray(steps, dtype=np.float64)
    ys = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(xs) & np.isfinite(ys)
    order = np.argsort(xs[finite], kind="stable")
    return xs[finite][order], ys[finite][order]


def _bucket_line(
    xs: Floats,
    ys: Floats,
    firsts: Floats,
    lasts: Floats,
    thin: bool,
    value: Floats,
    low: Floats,
    high: Floats,
) -> None:
    """One line's value, low and high in each bucket it spans, written into ``value``,
    ``low`` and ``high`` (see `mean_band`)."""
    spans = (lasts >= xs[0]) & (firsts <= xs[-1])
    # Where the line crosses each bucket's edges (clipped to the line's own ends).
    left = np.interp(np.clip(firsts, xs[0], xs[-1]), xs, ys)
    right = np.interp(np.clip(lasts, xs[0], xs[-1]), xs, ys)
    middle = np.interp(np.clip((firsts + lasts) / 2, xs[0], xs[-1]), xs, ys)
    low[spans] = np.minimum(left, right)[spans]
    high[spans] = np.maximum(left, right)[spans]
    value[spans] = middle[spans]
    owner = np.searchsorted(firsts, xs, side="right") - 1
    inside = (owner >= 0) & (xs <= lasts[np.maximum(owner, 0)])
    owner, py = owner[inside], ys[inside]
    if not len(owner):
        return
    np.minimum.at(low, owner, py)
    np.maximum.at(high, owner, py)
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    ends = np.r_[starts[1:], len(owner)] - 1
    held = owner[starts]
    if thin:
        value[held] = (py[starts] + py[ends]) / 2
    else:
        value[held] = np.add.reduceat(py, starts) / (ends - starts + 1)
