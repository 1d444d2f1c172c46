"""Change points: steps where a metric's trend changes level or slope abruptly, found with
no event given (the gentle curvature every norm curve has is not one).

See :func:`detect_change_points` for the method and its calibration; the argument checks
here are shared with :mod:`.transitions`, which fits lines on each side of such a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "DEFAULT_MIN_RELATIVE_CHANGE",
    "DEFAULT_PENALTY",
    "ChangePoint",
    "default_window",
    "detect_change_points",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAX_BINS = 1000
"""Detection works on the means of at most this many equal-width step bins."""
DEFAULT_PENALTY = 40.0
"""Score a change needs, in noise variances (see :func:`detect_change_points`)."""
DEFAULT_MIN_RELATIVE_CHANGE = 0.2
"""Smallest change detected, relative to the trend: see :func:`detect_change_points`."""
_MAD_TO_SIGMA = 1.4826
_MIN_BINS_PER_SIDE = 4
_INT64 = np.iinfo(np.int64)


# -- arguments ----------------------------------------------------------------------------


def _series(steps: npt.ArrayLike, values: npt.ArrayLike) -> tuple[IntArray, FloatArray]:
    """Both as arrays, checked: one dimension, equal lengths, integral steps, ascending."""
    step_array = np.asarray(steps)
    value_array = np.asarray(values, dtype=np.float64)
    if step_array.ndim != 1 or value_array.ndim != 1:
        raise ValueError("steps and values must be one-dimensional: pass one series at a time")
    if len(step_array) != len(value_array):
        raise ValueError(
            f"steps and values must have equal lengths, got {len(step_array)} and "
            f"{len(value_array)}: pass one value per step (NaN where none was logged)"
        )
    if step_array.dtype.kind not in "iu" and len(step_array):
        integral = np.isfinite(step_array) & (np.floor(step_array) == step_array)
        if not np.all(integral & (np.abs(step_array) < 2.0**63)):
            raise ValueError("steps must be integers within int64: pass an integer array")
    int_steps: IntArray = step_array.astype(np.int64, copy=False)
    if len(int_steps) > 1 and not np.all(int_steps[1:] > int_steps[:-1]):
        i = int(np.flatnonzero(int_steps[1:] <= int_steps[:-1])[0])
        raise ValueError(
            f"steps must be strictly ascending, got {int_steps[i + 1]} after {int_steps[i]} "
            f"at index {i + 1}: sort the points, drop repeated steps, and pass one run "
            "segment at a time (a restart's steps go backwards)"
        )
    return int_steps, value_array


def _check_window(window: int) -> int:
    if window <= 0:
        raise ValueError(f"window must be a positive number of steps, got {window}")
    return int(window)


def _check_step(at: int) -> None:
    if not _INT64.min <= at <= _INT64.max:
        raise ValueError(f"a step must fit in int64, got {at}")


def _check_detection(max_points: int, penalty: float, min_relative_change: float) -> None:
    if max_points < 0:
        raise ValueError(f"max_points must be >= 0, got {max_points}")
    if not penalty >= 0:
        raise ValueError(f"penalty must be a number >= 0, got {penalty}")
    if not min_relative_change >= 0:
        raise ValueError(f"min_relative_change must be a number >= 0, got {min_relative_change}")


def default_window(steps: npt.ArrayLike, values: npt.ArrayLike) -> int:
    """One twentieth of the step span of the finite points, at least 1.

    Long enough to average the noise over the hundreds to thousands of points a run logs in
    5 % of its length; short enough that a smooth curve's own change of slope across it
    stays small (≈4 % over 6k of the 120k steps of the domain notes' final_norm curve).
    """
    return _default_window(*_finite(*_series(steps, values)))


def _default_window(steps: IntArray, values: FloatArray) -> int:
    if len(steps) < 2:
        return 1
    return max(1, int(steps[-1] - steps[0]) // 20)


def _finite(steps: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    finite = np.isfinite(values)
    if finite.all():
        return steps, values
    return steps[finite], values[finite]


# -- change points ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """An abrupt change of level or slope at ``step``, the first step after it.

    ``score``: ``(RSS_cubic - RSS_two_lines) / σ²`` over the window around it, how many noise
    variances better two lines broken there explain the data than the best smooth (cubic)
    curve does; see :func:`detect_change_points`.
    """

    step: int
    score: float


def detect_change_points(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    *,
    max_points: int = 5,
    penalty: float = DEFAULT_PENALTY,
    window: int | None = None,
    min_relative_change: float = DEFAULT_MIN_RELATIVE_CHANGE,
) -> list[ChangePoint]:
    """Steps where the trend's level or slope changes abruptly, highest score first.

    1. **Bins.** The finite points are averaged in at most 1,000 equal-width step bins (a
       multiple of the usual step spacing). A change of trend is a feature many bins wide,
       so the bin means keep it while cutting the noise by √(points per bin), and 1M points
       reduce in milliseconds; step 5 goes back to the points for the exact step. A bin
       whose points do not centre where a full bin's do (gaps, NaN, the last bin) is moved
       along the local slope. Excursions up to four bins wide (a loss spike and its
       recovery) are replaced by the local median: a spike is not a change of trend.
    2. **Noise.** Each bin mean's distance from the line through its neighbours, scaled to
       one point's σ, gives a local σ over the window (an RMS clipped at 5 MAD-σ, which
       follows heavy tails); so does the distance from the bins ``h/8`` away (a MAD-σ,
       which sees noise correlated over several bins). The larger one counts.
    3. **Scan.** For every bin boundary τ, on the bins within ``h`` of it (``h`` is
       ``window`` in bins, by default a tenth of the span), weighted least squares fits two
       models with four parameters each: two lines broken at τ, and one cubic. Gentle
       curvature is fitted by the cubic at least as well as by the broken line; a kink or a
       jump is not, so ``G(τ) = (RSS_cubic - RSS_two_lines) / σ²`` is large only at abrupt
       changes. All boundaries at once: the normal equations' sums are correlations of the
       bins with fixed kernels. A boundary needs a quarter window of bins on each side, so
       changes within ``h/4`` of either end are not judged.
    4. **Select.** Local maxima of ``G`` above ``penalty`` where the change is at least
       ``min_relative_change`` of the trend, ``(|jump| + h |Δslope|) / (h max|slope|)`` from
       the two lines, are peaks unless within ``h`` of a larger one; the ``max_points``
       highest-scoring peaks are kept. Changes closer than ``h`` count as one.
    5. **Locate.** Each peak goes to the step where ``a + b x + c x² + d (x - t)₊ +
       e [x ≥ t]`` (a parabola for the trend's curvature, a hinge, a step) fits the points
       within ``h/2`` best, trying every split ``t`` within ``h/4`` of the peak.

    Under white noise on a line ``G`` is a difference of two χ²₂ variables per boundary.
    Its largest value over a series measured at most 19 for Gaussian, Student-t(3),
    log-normal and gappy noise and 34 for AR(1) noise with φ = 0.5 (60 series of each at
    1k, 5k, 30k, 120k and 1M points), and 20 over 200 metrics of simulated runs away from
    their changes; hence the default penalty of 40. Strongly correlated noise (AR(1),
    φ = 0.9) on series under ~10k points scores higher and gives false changes.

    >>> steps = np.arange(10_000)
    >>> values = np.where(steps < 6_000, 1.0, 1.0 + 0.01 * (steps - 6_000))
    >>> [point.step for point in detect_change_points(steps, values)]
    [6000]
    """
    _check_detection(max_points, penalty, min_relative_change)
    if window is not None:
        window = _check_window(window)
    step_array, value_array = _series(steps, values)
    return _detect(step_array, value_array, max_points, penalty, window, min_relative_change)


def _detect(
    steps: IntArray,
    values: FloatArray,
    max_points: int,
    penalty: float,
    window: int | None,
    min_relative_change: float,
) -> list[ChangePoint]:
    """:func:`detect_change_points` on checked arrays."""
    # Values near the float range's end overflow the sums: their scores come out NaN and
    # are no change, without warnings.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _changes(steps, values, max_points, penalty, window, min_relative_change)


def _changes(
    steps: IntArray,
    values: FloatArray,
    max_points: int,
    penalty: float,
    window: int | None,
    min_relative_change: float,
) -> list[ChangePoint]:
    steps, values = _finite(steps, values)
    if max_points == 0 or len(steps) < 2 * _MIN_BINS_PER_SIDE:
        return []
    # Offsets from the first step, so that shifting every step shifts the result exactly.
    offset = steps - steps[0]
    span = int(offset[-1])
    # The usual spacing, as the median over ~4k stretches of the points' mean spacing: a
    # median of 1M gaps would cost more than all the rest together.
    stride = max(1, len(offset) // 4096)
    spacing = max(1, int(np.median(np.diff(offset[::stride]))) // stride)
    width = spacing * _ceil_div(_ceil_div(span + 1, MAX_BINS), spacing)
    half = max(_MIN_BINS_PER_SIDE, _ceil_div(window or max(1, span // 10), width))
    n_bins = span // width + 1
    # Steps ascend, so each bin is a run of points, found by binary search.
    firsts = np.searchsorted(offset, np.arange(n_bins, dtype=np.int64) * width)
    counts = np.diff(np.append(firsts, len(offset))).astype(np.float64)
    occupied = np.flatnonzero(counts)
    if len(occupied) < 2 * _MIN_BINS_PER_SIDE:
        return []
    occupied_counts = counts[occupied]
    means = _bin_means(offset, values, firsts[occupied], occupied_counts, occupied, width, spacing)
    spread = float(np.ptp(means))
    if spread == 0.0:
        return []
    means = _despike(occupied, means, half)
    # The scan's sums carry round-off of ~1e-16 of the squared spread per point: a floor
    # on σ keeps a noise-free series from scoring it.
    sigma = np.maximum(_noise(occupied, means, occupied_counts, half), 1e-5 * spread)

    # Residuals from one weighted line through all bins: smaller sums, less round-off.
    centre = occupied.astype(np.float64)
    level = np.zeros(n_bins)
    level[occupied] = means - np.polyval(
        np.polyfit(centre, means, 1, w=occupied_counts**0.5), centre
    )
    gain, relative = _scan(counts, level, half)
    nearest = np.minimum(np.searchsorted(occupied, np.arange(n_bins + 1)), len(occupied) - 1)
    score = gain / sigma[nearest] ** 2

    # A peak must be a local maximum with judged boundaries on both sides: at the edge of
    # the judged range the change may lie beyond it, where its step cannot be told.
    inner = np.zeros(len(gain), dtype=bool)
    inner[1:-1] = (gain[1:-1] >= gain[:-2]) & (gain[1:-1] >= gain[2:])
    inner[1:-1] &= np.isfinite(gain[:-2]) & np.isfinite(gain[2:])
    candidates = np.flatnonzero(inner & (score > penalty) & (relative >= min_relative_change))
    peaks: list[int] = []
    # Peaks by the raw gain: σ is local and largest right at a change, so dividing by it
    # would pull the peak of a noise-free series off the change.
    for boundary in candidates[np.argsort(-gain[candidates], kind="stable")].tolist():
        if all(abs(boundary - other) > half for other in peaks):
            peaks.append(boundary)
    peaks.sort(key=lambda b: -score[b])
    # Located on the points within half a window (a fit's window in `transitions`): enough
    # to pin a kink, little of whatever else the trend does further off.
    reach, slack = max(2, half // 2) * width, max(2, half // 4) * width
    return [
        ChangePoint(int(steps[_locate(offset, values, b * width, reach, slack)]), float(score[b]))
        for b in peaks[:max_points]
    ]


def _bin_means(
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


def _despike(positions: IntArray, means: FloatArray, half: int, reach: int = 4) -> FloatArray:
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
    scale = _robust_sigma(deviation, half, clipped_rms=False)
    # Where the scale is 0 (a noise-free stretch) nothing is an excursion.
    outlier = (np.abs(deviation) > 5.0 * scale) & (scale > 0)
    cleaned: FloatArray = np.where(outlier, neighbourhood, means)
    return cleaned


def _noise(centres: IntArray, means: FloatArray, counts: FloatArray, half: int) -> FloatArray:
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
        estimates.append(_robust_sigma(scaled, half, clipped_rms=lag == 1))
    result: FloatArray = np.maximum.reduce(estimates)
    return result


def _robust_sigma(residuals: FloatArray, half: int, *, clipped_rms: bool) -> FloatArray:
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
    mad_sigma = _MAD_TO_SIGMA * np.median(np.abs(windows), axis=1)
    sigma = mad_sigma
    if clipped_rms:
        clipped = np.minimum(windows**2, (5.0 * mad_sigma[:, np.newaxis]) ** 2)
        sigma = np.sqrt(clipped.mean(axis=1))
    result: FloatArray = np.interp(np.arange(n), np.arange(0, n, stride), sigma)
    return result


def _scan(counts: FloatArray, level: FloatArray, half: int) -> tuple[FloatArray, FloatArray]:
    """``RSS_cubic - RSS_two_lines`` and the relative size of the change at every boundary.

    Boundary ``τ`` (``0..n_bins``) lies before bin ``τ``; its window is bins ``τ - h`` to
    ``τ + h - 1`` at ``u = (k - h + ½) / h``, weighted by their point counts. Boundaries with
    fewer than a quarter window of occupied bins on a side score ``-inf``.
    """
    u = (np.arange(2 * half) - half + 0.5) / half
    left = (u < 0).astype(np.float64)
    powers = u[:, np.newaxis] ** np.arange(7)
    kernels = np.hstack([powers * left[:, np.newaxis], powers * (1.0 - left)[:, np.newaxis]])

    def correlate(series: FloatArray, columns: FloatArray) -> FloatArray:
        # A contiguous copy: BLAS multiplies it in well under a millisecond, while the strided
        # view sometimes takes ten times as long.
        windows = np.ascontiguousarray(sliding_window_view(np.pad(series, half), 2 * half))
        result: FloatArray = windows @ columns
        return result

    w = correlate(counts, kernels)  # Σ n u^p for p = 0..6, left side then right side
    wy = correlate(counts * level, kernels[:, [0, 1, 2, 3, 7, 8, 9, 10]])
    wyy = correlate(counts * level**2, kernels[:, [0, 7]])
    filled = correlate((counts > 0).astype(np.float64), kernels[:, [0, 7]])
    # A side with few bins lets one line chase one noisy bin (heavy tails near the series'
    # ends scored like changes): each side needs a quarter window of occupied bins.
    least = max(_MIN_BINS_PER_SIDE, half // 4)
    valid = (filled[:, 0] >= least) & (filled[:, 1] >= least)

    rss_left, level_left, slope_left = _line_rss(w[:, 0:3], wy[:, 0:2], wyy[:, 0])
    rss_right, level_right, slope_right = _line_rss(w[:, 7:10], wy[:, 4:6], wyy[:, 1])
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


def _line_rss(
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


def _locate(offset: IntArray, values: FloatArray, boundary: int, reach: int, slack: int) -> int:
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
    power_sums = [float(len(x)), float(x.sum()), float(x2.sum()), _dot(x2, x), _dot(x2, x2)]
    gram = np.array([power_sums[i : i + 3] for i in range(3)])
    inverse = np.linalg.inv(gram)
    a, b, c = inverse @ np.array([y.sum(), _dot(x, y), _dot(x2, y)])
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


def _dot(a: FloatArray, b: FloatArray) -> float:
    """``Σ a b`` in one thread: BLAS would spread a long dot product over threads, which
    costs more than it saves on a busy server."""
    return float(np.einsum("i,i->", a, b))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
