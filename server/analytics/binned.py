"""The change-point detector's kernels (:mod:`.changepoints`): a long series as the means
of equal-width step bins, its local noise, the scan of broken lines against a cubic over
every boundary, and the step a change is pinned to on the points themselves."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAD_TO_SIGMA = 1.4826
MIN_BINS_PER_SIDE = 4
"""Fewest bins a side of a boundary needs to be judged."""
WINDOWS_BLOCK = 1 << 18
"""Floats of scan windows copied at a time (2 MiB; the default window over 1,000 bins
takes one copy): the scan's memory does not grow with its window."""


def bin_means(
    offset: IntArray,
    values: FloatArray,
    firsts: IntArray,
    counts: FloatArray,
    occupied: IntArray,
    width: int,
    spacing: int,
) -> FloatArray:
    """Each occupied bin's mean value, moved to where a full bin's points centre.

    A full bin of points ``spacing`` apart centres at ``width · i + (width - spacing) / 2``;
    a bin whose points centre at ``c`` instead has its mean moved by the local slope times
    the difference, so that a straight line stays straight in the bins (the scan takes
    them as equally spaced).
    """
    means = np.add.reduceat(values, firsts) / counts
    centres = np.add.reduceat(offset, firsts, dtype=np.float64) / counts
    shift = occupied * float(width) + (width - spacing) / 2.0 - centres
    if not np.any(shift):
        return means
    k = np.arange(len(means))
    lo, hi = np.maximum(k - 2, 0), np.minimum(k + 2, len(means) - 1)
    slope = (means[hi] - means[lo]) / (centres[hi] - centres[lo])
    moved: FloatArray = means + slope * shift
    return moved


def despike(positions: IntArray, means: FloatArray, half: int, reach: int = 4) -> FloatArray:
    """Bin means with short excursions removed: a mean over 5 robust σ from the median of
    the ``2 · reach + 1`` bins around it, taken along the local slope, becomes that median.
    σ is the local MAD-σ of those distances, within ``half`` bins (noise often grows with
    the metric: a global σ would clip the noisy stretches' ordinary values).

    A median, so that excursions up to ``reach`` bins wide (a loss spike and its recovery)
    go while a jump keeps its step; along the slope (the median of the neighbourhood's
    differences), so that on a steadily rising series the neighbours are not all on one
    side of the centre. Bins near either end use the nearest full neighbourhood: padding
    would repeat the very value under test.
    """
    n = len(means)
    if n < 2 * reach + 1:
        return means
    k = np.arange(n)
    around = np.clip(k, reach, n - 1 - reach)[:, np.newaxis] + np.arange(-reach, reach + 1)
    # Positions, not indices: an empty bin in between is a gap of two bins.
    where = positions[around].astype(np.float64)
    slope = np.median(np.diff(means[around], axis=1) / np.diff(where, axis=1), axis=1)
    along = means[around] - (where - positions[:, np.newaxis]) * slope[:, np.newaxis]
    neighbourhood = np.median(along, axis=1)
    deviation = means - neighbourhood
    scale = robust_sigma(deviation, half, clipped_rms=False)
    # Where the scale is 0 (a noise-free stretch) nothing is an excursion.
    outlier = (np.abs(deviation) > 5.0 * scale) & (scale > 0)
    cleaned: FloatArray = np.where(outlier, neighbourhood, means)
    return cleaned


def noise(centres: IntArray, means: FloatArray, counts: FloatArray, half: int) -> FloatArray:
    """One point's noise σ around each occupied bin: the larger of two local estimates.

    ``e_k = m_k - (a m_{k-L} + b m_{k+L})``, the distance from the line through the bins
    ``L`` away (``a + b = 1`` by position), has variance ``σ² (1/n_k + a²/n_{k-L} +
    b²/n_{k+L})`` under white noise. Lag 1 sees the noise; lag ``h/8`` also sees noise
    correlated over several bins (for white noise both agree). Each is a root mean square
    over the window, clipped at 5 MAD-σ so that the change itself barely counts.
    """
    estimates = [np.zeros(len(means))]
    for lag in sorted({1, max(1, half // 8)}):
        if len(means) < 2 * lag + 3:
            continue
        c = centres.astype(np.float64)
        a = (c[2 * lag :] - c[lag:-lag]) / (c[2 * lag :] - c[: -2 * lag])
        b = 1.0 - a
        e = means[lag:-lag] - (a * means[: -2 * lag] + b * means[2 * lag :])
        variance = 1.0 / counts[lag:-lag] + a**2 / counts[: -2 * lag] + b**2 / counts[2 * lag :]
        scaled = np.pad(e / np.sqrt(variance), lag, mode="edge")
        estimates.append(robust_sigma(scaled, half, clipped_rms=lag == 1))
    result: FloatArray = np.maximum.reduce(estimates)
    return result


def robust_sigma(residuals: FloatArray, half: int, *, clipped_rms: bool) -> FloatArray:
    """σ of ``residuals`` within ``half`` of each position: their MAD-σ (``1.4826 ·
    median |r|``), or with ``clipped_rms`` their RMS with each clipped at 5 MAD-σ.

    Evaluated every ``half/4`` positions and interpolated: σ changes slowly, and a median
    over every window would cost more than the scan.
    """
    n = len(residuals)
    reach = min(half, (n - 1) // 2)
    stride = max(1, reach // 4)
    windows = sliding_window_view(np.pad(residuals, reach, mode="reflect"), 2 * reach + 1)
    windows = windows[::stride]
    mad_sigma = MAD_TO_SIGMA * np.median(np.abs(windows), axis=1)
    sigma = mad_sigma
    if clipped_rms:
        clipped = np.minimum(windows**2, (5.0 * mad_sigma[:, np.newaxis]) ** 2)
        sigma = np.sqrt(clipped.mean(axis=1))
    result: FloatArray = np.interp(np.arange(n), np.arange(0, n, stride), sigma)
    return result


def least_bins(half: int) -> int:
    """Occupied bins each side of a boundary needs within a window of ``half`` bins: a
    quarter window, at least `MIN_BINS_PER_SIDE`.

    A side with few bins lets one line chase one noisy bin (heavy tails near a series' ends
    scored like changes). A series with fewer than twice this many occupied bins has no
    boundary that can be judged.
    """
    return max(MIN_BINS_PER_SIDE, half // 4)


def scan(counts: FloatArray, level: FloatArray, half: int) -> tuple[FloatArray, FloatArray]:
    """``RSS_cubic - RSS_two_lines`` and the relative size of the change at every boundary.

    Boundary ``τ`` (``0..n_bins``) lies before bin ``τ``; its window is bins ``τ - h`` to
    ``τ + h - 1`` at ``u = (k - h + ½) / h``, weighted by their point counts. Boundaries with
    fewer than `least_bins` occupied bins on a side score ``-inf``.

    Memory and time grow with ``min(h, n_bins)``, not with ``h``: a window's bins further
    than ``n_bins`` from its centre lie outside the series for every boundary, so only the
    kernel's middle ``2 · min(h, n_bins)`` rows are used.
    """
    reach = min(half, len(counts))
    u = (np.arange(2 * reach) - reach + 0.5) / half
    left = (u < 0).astype(np.float64)
    powers = u[:, np.newaxis] ** np.arange(7)
    kernels = np.hstack([powers * left[:, np.newaxis], powers * (1.0 - left)[:, np.newaxis]])

    def correlate(series: FloatArray, columns: FloatArray) -> FloatArray:
        windows = sliding_window_view(np.pad(series, reach), 2 * reach)
        rows = max(1, WINDOWS_BLOCK // (2 * reach))
        result: FloatArray = np.empty((len(windows), columns.shape[1]))
        for first in range(0, len(windows), rows):
            # A contiguous copy: BLAS multiplies it in well under a millisecond, while the
            # strided view sometimes takes ten times as long. In blocks, so that a wide
            # window costs time, not memory.
            block = np.ascontiguousarray(windows[first : first + rows])
            result[first : first + rows] = block @ columns
        return result

    w = correlate(counts, kernels)  # Σ n u^p for p = 0..6, left side then right side
    wy = correlate(counts * level, kernels[:, [0, 1, 2, 3, 7, 8, 9, 10]])
    wyy = correlate(counts * level**2, kernels[:, [0, 7]])
    filled = correlate((counts > 0).astype(np.float64), kernels[:, [0, 7]])
    least = least_bins(half)
    valid = (filled[:, 0] >= least) & (filled[:, 1] >= least)

    rss_left, level_left, slope_left = line_rss(w[:, 0:3], wy[:, 0:2], wyy[:, 0])
    rss_right, level_right, slope_right = line_rss(w[:, 7:10], wy[:, 4:6], wyy[:, 1])
    both = w[:, :7] + w[:, 7:]
    normal = both[:, np.add.outer(np.arange(4), np.arange(4))]
    normal[~valid] = np.eye(4)
    moments = wy[:, 0:4] + wy[:, 4:8]
    coefficients = np.linalg.solve(normal, moments[:, :, np.newaxis])[:, :, 0]
    rss_cubic = wyy[:, 0] + wyy[:, 1] - np.einsum("ij,ij->i", coefficients, moments)
    gain = np.where(valid, rss_cubic - rss_left - rss_right, -np.inf)

    change = np.abs(level_right - level_left) + np.abs(slope_right - slope_left)
    trend = np.maximum(np.abs(slope_left), np.abs(slope_right))
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(trend > 0, change / trend, np.inf)
    return gain, relative


def line_rss(
    s: FloatArray, t: FloatArray, yy: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Weighted line fits from sums ``s = [Σw, Σwu, Σwu²]``, ``t = [Σwy, Σwuy]``, ``yy =
    Σwy²``: residual sum of squares, intercept and slope."""
    det = s[:, 0] * s[:, 2] - s[:, 1] ** 2
    det = np.where(det > 0, det, 1.0)
    slope = (s[:, 0] * t[:, 1] - s[:, 1] * t[:, 0]) / det
    intercept = (s[:, 2] * t[:, 0] - s[:, 1] * t[:, 1]) / det
    rss = yy - intercept * t[:, 0] - slope * t[:, 1]
    return rss, intercept, slope


def locate(offset: IntArray, values: FloatArray, boundary: int, reach: int, slack: int) -> int:
    """Index of the first point after the change near ``boundary``, at full resolution.

    The points within ``reach`` steps of ``boundary`` are fitted by a parabola (which takes
    up the trend's curvature) plus a hinge and a step at a split ``t``: ``a + b x + c x² +
    d (x - t)₊ + e [x ≥ t]``; the split with the least squared error wins, tried between
    every two points within ``slack`` steps. The parabola is fitted once; a split adds two
    columns ``Z``, whose gain is ``z' (Z'MZ)⁻¹ z`` with ``z = Z'r``, ``r`` the parabola's
    residuals and ``M`` its residual maker: a 2x2 system per split, from suffix sums.
    """
    lo, first, last, hi = (
        int(i)
        for i in np.searchsorted(
            offset, [boundary - reach, boundary - slack, boundary + slack + 1, boundary + reach]
        )
    )
    # At least three points on each side of a split before index k.
    first, last = max(first, lo + 3), min(last, hi - 3)
    if first >= last:
        return int(np.searchsorted(offset, boundary))
    x = (offset[lo:hi] - boundary).astype(np.float64) / max(reach, 1)
    y = values[lo:hi]
    x2 = x * x
    power_sums = [float(len(x)), float(x.sum()), float(x2.sum()), dot(x2, x), dot(x2, x2)]
    gram = np.array([power_sums[i : i + 3] for i in range(3)])
    inverse = np.linalg.inv(gram)
    a, b, c = inverse @ np.array([y.sum(), dot(x, y), dot(x2, y)])
    residual = y - (a + b * x + c * x2)

    start, count = first - lo, last - first
    xs, rs = x[start:], residual[start:]

    def suffix(terms: FloatArray) -> FloatArray:
        """Sums over the points at or after each split."""
        sums: FloatArray = np.cumsum(terms[::-1])[::-1][:count]
        return sums

    s0 = np.arange(len(xs), len(xs) - count, -1, dtype=np.float64)
    s1, s2, s3 = suffix(xs), suffix(xs * xs), suffix(xs * xs * xs)
    r0, r1 = suffix(rs), suffix(xs * rs)
    t = (x[start - 1 : start - 1 + count] + x[start : start + count]) / 2.0
    hinge = (s1 - t * s0, s2 - t * s1, s3 - t * s2)  # Σ (x - t)₊ xᵖ over the points after
    step = (s0, s1, s2)  # Σ [x ≥ t] xᵖ

    def through_parabola(u: tuple[FloatArray, ...], v: tuple[FloatArray, ...]) -> FloatArray:
        """``u' (X'X)⁻¹ v`` for each split, spelled out: 3x3 products on 1-D arrays."""
        total: FloatArray = sum(
            (inverse[i, j] * u[i] * v[j] for i in range(3) for j in range(3)),
            start=np.zeros(count),
        )
        return total

    hh = s2 - 2.0 * t * s1 + t * t * s0 - through_parabola(hinge, hinge)
    hs = s1 - t * s0 - through_parabola(hinge, step)
    ss = s0 - through_parabola(step, step)
    zh, zs = r1 - t * r0, r0
    det = hh * ss - hs * hs
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(det > 0, (ss * zh * zh - 2.0 * hs * zh * zs + hh * zs * zs) / det, -np.inf)
    return first + int(np.argmax(gain))


def dot(a: FloatArray, b: FloatArray) -> float:
    """``Σ a b`` in one thread: BLAS would spread a long dot product over threads, which
    costs more than it saves on a busy server."""
    return float(np.einsum("i,i->", a, b))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
