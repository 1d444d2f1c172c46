"""Change points: steps where a metric's trend changes level or slope abruptly, found with
no event given (the gentle curvature every norm curve has is not one).

See :func:`detect_change_points` for the method and its calibration; the argument checks
here are shared with :mod:`.transitions`, which fits lines on each side of such a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .binned import (
    MIN_BINS_PER_SIDE,
    bin_means,
    ceil_div,
    despike,
    least_bins,
    locate,
    noise,
    scan,
)

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
    if len(int_steps) and int(int_steps[-1]) - int(int_steps[0]) > _INT64.max:
        raise ValueError(
            f"steps must span at most {_INT64.max} steps, got {int_steps[0]} to "
            f"{int_steps[-1]}: offsets from the first step are int64"
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
    if max_points == 0 or len(steps) < 2 * MIN_BINS_PER_SIDE:
        return []
    # Offsets from the first step, so that shifting every step shifts the result exactly.
    offset = steps - steps[0]
    span = int(offset[-1])
    # The usual spacing, as the median over ~4k stretches of the points' mean spacing: a
    # median of 1M gaps would cost more than all the rest together.
    stride = max(1, len(offset) // 4096)
    spacing = max(1, int(np.median(np.diff(offset[::stride]))) // stride)
    width = spacing * ceil_div(ceil_div(span + 1, MAX_BINS), spacing)
    half = max(MIN_BINS_PER_SIDE, ceil_div(window or max(1, span // 10), width))
    n_bins = span // width + 1
    # Steps ascend, so each bin is a run of points, found by binary search.
    firsts = np.searchsorted(offset, np.arange(n_bins, dtype=np.int64) * width)
    counts = np.diff(np.append(firsts, len(offset))).astype(np.float64)
    occupied = np.flatnonzero(counts)
    # No boundary has enough occupied bins on both sides (a window much wider than the
    # series asks for more than it holds): nothing to judge, and nothing is allocated by
    # the window's size.
    if len(occupied) < 2 * least_bins(half):
        return []
    occupied_counts = counts[occupied]
    means = bin_means(offset, values, firsts[occupied], occupied_counts, occupied, width, spacing)
    spread = float(np.ptp(means))
    if spread == 0.0:
        return []
    means = despike(occupied, means, half)
    # The scan's sums carry round-off of ~1e-16 of the squared spread per point: a floor
    # on σ keeps a noise-free series from scoring it.
    sigma = np.maximum(noise(occupied, means, occupied_counts, half), 1e-5 * spread)

    # Residuals from one weighted line through all bins: smaller sums, less round-off.
    centre = occupied.astype(np.float64)
    level = np.zeros(n_bins)
    level[occupied] = means - np.polyval(
        np.polyfit(centre, means, 1, w=occupied_counts**0.5), centre
    )
    gain, relative = scan(counts, level, half)
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
        ChangePoint(int(steps[locate(offset, values, b * width, reach, slack)]), float(score[b]))
        for b in peaks[:max_points]
    ]
