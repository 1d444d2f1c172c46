"""Spikes in one metric: where they start, peak and recover, the share of steps spent in
them, and which metric's spikes lead another's.

Definition (``find_spikes``). Non-finite values are dropped first (they are the
``non_finite`` alert kind's business); ``v_0 … v_{n-1}`` are the finite values in step order.
Windows count these points, not steps. With ``B = block_size``, ``K = window_blocks``,
``N = noise_blocks`` and ``med`` the upper median (``sorted(x)[len(x) // 2]``, a value of
``x``, so no rounding):

* block ``t`` holds points ``tB … tB+B-1``; ``m_t = med(block)``. Its noise is read from the
  ``B - 1`` differences of neighbouring points inside it, ``d = v_{i+1} - v_i``: ``a_t`` is
  the ``⌊7(B-1)/8⌋``-th smallest (from 0) of ``|d - med(d)|``, the 14th of 15. A trend moves
  every difference alike, and ``med(d)`` takes it out, so a falling loss is not noise; a
  slow excursion (a spike's long recovery) barely moves a difference either.
* point ``i`` in block ``j = i // B ≥ 1`` is judged on the complete blocks before its own,
  so a spike never raises its own baseline (``K' = min(K, j)``, ``N' = min(N, j)``):

  - ``σ = 0.433 · max(med(a_{j-N'} … a_{j-1}), med(a_{j-K'} … a_{j-1}) / 1.25)``
    (`SPREAD_TO_SIGMA`: the standard deviation of Gaussian noise; the longer window, 512
    points, makes it steady to ±6 %; the shorter one raises it where the noise has
    clearly grown, as on a warm-up whose noise grows with it),
  - where the level has moved fast, σ is read relative to it as well: with
    ``ρ = min(med(a_t / |m_t|, j-N' ≤ t < j), med(a_t / |m_t|, j-K' ≤ t < j))``, if every
    ``m_t`` of the noise window has the sign of ``baseline_i`` (below), ``ρ ≤ 0.115``
    (`LEVEL_SPREAD`: the level 20 noise SDs from zero) and ``|baseline_i| ≥ 1.1 ·
    med(|m_t|, j-N' ≤ t < j)`` (`LEVEL_MOVE`), then ``σ_i = max(σ, 0.433 · ρ ·
    |baseline_i|)``; elsewhere ``σ_i = σ``. A norm's noise grows with the norm: on a
    warm-up that doubles in 100 steps, σ read from the older, lower blocks alone lags
    the level by 2x, and points 3 SDs up read as more than 5. On noise that does not
    grow with a rising level this reads σ high, by up to a third (the shorter window's
    ``ρ`` keeps it near the level's recent growth),
  - ``drift = med((m_u - m_{u-ℓ}) / ℓ, j-N'+ℓ ≤ u < j) / B`` with ``ℓ = ⌈N'/2⌉`` (0 if
    ``N' = 1``), the slope over the noise window,
  - ``slope = med((m_u - m_t) / (u - t), j-K' ≤ t < u < j) / B`` (Theil-Sen; 0 if
    ``K' = 1``), and where that falls, ``max(slope, drift)``: a fall is followed only as
    steeply as the longer window confirms (the recovery of a spike in the short window
    would tilt it down past the series). Before a whole noise window of history
    (``j < N``) a fall is not followed at all (slope and drift 0 where they fall): a
    run's first steps fall too fast and too curved for a line,
  - ``baseline_i = med(m_t + slope · (i - tB - (B-1)/2), max(0, j-5) ≤ t < j)``: the last
    five blocks' medians, each carried along the slope from its centre to the point
    (`ANCHORS`), so the trend is followed up and down with little reach for a curve,
  - band edge ``e_i = baseline_i + max(threshold · σ_i, min_relative_rise · |baseline_i|)``.

  Points of blocks 0 and 1 (only 0 when ``K = 1``) are never abnormal: one block of
  history has no slope, and on a ramp up from zero it would flag the ramp itself.
* ``v_i`` is abnormal when ``v_i > e_i``: above ``threshold`` σ *and* more than
  ``min_relative_rise`` above the baseline, so a series too smooth to have a spread (σ = 0)
  still needs a real rise.
* A spike starts at the first abnormal point ``s`` after the previous spike's end. Its
  trend is frozen there, ``T_s(p) = baseline_s + drift_s · min(p - s, H)``, on the steadier
  slope of the noise window, followed for ``H = NB`` points when it rises and ``H = KB``
  when it falls (a falling loss flattens: a line followed further would fall below it, and
  no extrapolated trend "recovers" a divergence); its *excess* is ``x_p = v_p - T_s(p)``.
  ``drift_s`` is read as ``drift`` is, but over the blocks of the noise window that no
  earlier spike lifts: a block is left out where it overlaps an earlier spike's
  ``[start, end + (end - start)]`` (its extent, and as long again for the tail of its
  recovery, by then shrunk as much again), and the lagged differences pair the kept
  blocks ``k_0 < k_1 < …`` as ``(m_{k_{x+ℓ}} - m_{k_x}) / (k_{x+ℓ} - k_x)`` with ``ℓ`` half
  their number, rounded up (with no block left out, exactly ``drift``; with fewer than two
  kept, ``drift`` itself; before a whole noise window of history, 0 where it falls). A
  recovery inside the window would otherwise tilt the slope: on a rising line, a third of
  its slope, and the next spike's excess grew with the line and never came back.
  It is over once the excess, with the noise smoothed out, is back within one noise SD,
  ``r_s = max(σ_s, min_relative_rise/5 · |baseline_s|)`` (the floor lets a series too
  smooth to have a spread come back), however long that takes: it ends at the first
  ``q > s`` where

  - the median of ``x_p`` over ``max(s+1, q-h) ≤ p ≤ min(n-1, q+h)`` is ``≤ r_s``, with
    ``h = min(SMOOTHING, max(max_gap, ⌊(q - s) / 2⌋))``: a window as wide as the spike's
    age so far (at most 33 points), so a slow recovery is judged on its level, not on the
    first noisy point that dips under, and a short spike on a few points;
    or, once ``q - s ≥ 65`` (`spike_extent.SETTLED`: both windows full), that median ``M_q`` is
    ``≤ 2 r_s`` and no lower than ``M_{q-33}`` (`spike_extent.STALL`, one full window earlier): the
    excess has stopped falling, and what is left of it is the frozen trend's error (a
    baseline read 0.8 SD low holds a finished recovery's smoothed excess near the line
    for a long while, and a drifting metric may never cross it);
  - and none of ``v_q … v_{q+2·max_gap}`` is above ``e_s + drift_s · min(p - s, H)``:
    an excursion that starts inside the recovery is part of the spike.

  With no such ``q`` it has not recovered and ends at the series' last logged step; a
  lasting step up therefore reads as a spike that never recovers, which for a diverging
  loss is the point. ``peak`` is the first maximum of ``v_s … v_q``.
* ``magnitude = peak_value / baseline_s`` for a positive baseline, else ``+inf`` (a ratio
  to a zero or negative level means nothing; compare ``peak_value - baseline``);
  ``noise = σ_s``.

Why ``threshold = 5.25`` (`THRESHOLD`): a point's noise is independent of the points
before it, so on Gaussian noise of SD σ around a trend ``f`` the expected number of false
spikes is ``Σ Q((e_i - f_i) / σ)``, the estimates' own errors included (`band` gives each
``e_i``). Around flat, linear, exponential and slow sinusoidal trends that sum is 0.4–0.6
a million points at 5, 0.13–0.17 at 5.25 and 0.04–0.06 at 5.5. A point 7 SDs up is missed
only where σ is overestimated and the baseline misplaced together: none of 10,000 at
5.25, about 1 in 100 at 6 (docs/analytics.md has the command). Heavy-tailed metrics (a
grad norm) have more points past 5.25 SDs of their Gaussian-equivalent noise; the 5 %
least rise keeps the blips of a quiet metric out.

Everything is scale-free: multiplying the values by ``c > 0`` scales every quantity above
by ``c`` (exactly when ``c`` is a power of two), so the same spikes are found. Zeros and
negative values need no special case; a series stuck at exactly one value ``b`` has
``σ = 0``, so any value above ``b + min_relative_rise · |b|`` is a spike.

``lead_lag`` pairs each leader spike with the first follower spike that starts
``0 < lag ≤ max_lag`` steps after it. Lag 0 does not count: spikes starting at the same
step show that two metrics moved together, not which one led.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .arguments import check_count, check_number, checked_series, checked_steps
from .spike_extent import Judged, walk

__all__ = [
    "LeadLag",
    "NoiseBand",
    "Spike",
    "band",
    "find_spikes",
    "fraction_in_spikes",
    "lead_lag",
    "lower_threshold",
    "noise_sd",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

SPREAD_TO_SIGMA = 0.433
"""Gaussian noise of standard deviation σ has neighbour differences of SD ``σ√2``; the
14th-smallest of 15 absolute deviations of a 16-point block's differences from their median
has a median of ≈ 2.31 σ (simulated over 3.2M points), so ``0.433 ·`` that reads ≈ σ."""
ANCHORS = 5
"""How many of the latest blocks a point's baseline is carried from."""
RECENT_NOISE = 1.25
"""How much noisier the last ``K`` blocks must read than the last ``N`` to raise σ."""
LEVEL_MOVE = 1.1
"""How far a point's baseline must be past the noise window's typical level,
``med(|m_t|)``, for σ to be read relative to the level as well."""
LEVEL_SPREAD = 0.115
"""The largest ``med(a_t / |m_t|)`` at which σ is read relative to the level: noise of SD
under 5 % of the level (``0.433 · 0.115``), a level 20 noise SDs from zero; nearer zero
the ratio means little."""


@dataclass(frozen=True, slots=True)
class Spike:
    """One upward excursion: first abnormal step, highest point, and recovery step, with
    the baseline and the noise SD it was judged on."""

    start: int
    peak: int
    peak_value: float
    end: int
    magnitude: float
    baseline: float
    recovered: bool
    noise: float = 0.0


@dataclass(frozen=True, slots=True)
class LeadLag:
    """How often, and by how many steps, ``leader``'s spikes come before ``follower``'s."""

    leader: str
    follower: str
    lag_steps: float | None
    matched: int
    unmatched_leader: int


@dataclass(frozen=True, slots=True)
class NoiseBand:
    """Per finite point (in step order): its baseline, the per-step slope of its trend, its
    noise SD and its band edge; NaN (edge: +inf) for points that are never judged."""

    baseline: FloatArray
    slope: FloatArray
    drift: FloatArray
    """The per-step slope over the noise window, which a spike's recovery follows."""
    noise: FloatArray
    edge: FloatArray


THRESHOLD = 5.25
"""How many robust noise SDs above its baseline a point must be to start a spike, unless
told otherwise (see the module docstring for why 5)."""
MIN_THRESHOLD, MAX_THRESHOLD = 2.0, 100.0
"""The range a request may ask for: below 2 σ ordinary noise is a spike."""
LOWER_LOOKS = (4.0, 3.0, 2.0)
"""Where an answer looks below its threshold to say how many more spikes it would find."""


def lower_threshold(threshold: float) -> float | None:
    """The threshold an answer at ``threshold`` also counts spikes at: the first of
    `LOWER_LOOKS` below it (None below 3).

    >>> lower_threshold(5.0), lower_threshold(4.0), lower_threshold(2.0)
    (4.0, 3.0, None)
    """
    return next((look for look in LOWER_LOOKS if look < threshold), None)


def find_spikes(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    *,
    threshold: float = THRESHOLD,
    min_relative_rise: float = 0.05,
    max_gap: int = 2,
    block_size: int = 16,
    window_blocks: int = 9,
    noise_blocks: int = 32,
) -> list[Spike]:
    """The upward spikes of one metric, in step order (see the module docstring).

    ``steps`` are unique and ascending; ``values`` may hold NaN and ±inf, which are
    ignored. By default each block of 16 points is judged on the trend of the 9 · 16 = 144
    before it and the noise of the 32 · 16 = 512 before it, and a spike is more than 5.25
    robust σ and 5 % above that baseline.

    >>> steps = np.arange(400); values = 1.0 + 0.01 * (steps % 3 - 1); values[300] = 2.0
    >>> [(s.start, s.peak, s.end, s.magnitude) for s in find_spikes(steps, values)]
    [(300, 300, 301, 2.0)]
    """
    step_arr, value_arr = checked_series(steps, values)
    check_number("threshold", threshold, least=0.0, strict=True)
    check_number("min_relative_rise", min_relative_rise, least=0.0, strict=False)
    max_gap = check_count("max_gap", max_gap, least=0)
    block_size = check_count("block_size", block_size, least=1)
    window_blocks = check_count("window_blocks", window_blocks, least=1)
    noise_blocks = check_count("noise_blocks", noise_blocks, least=1)

    finite = np.isfinite(value_arr)
    if finite.all():
        v, finite_steps = value_arr, step_arr
    else:
        v, finite_steps = value_arr[finite], step_arr[finite]
    # Values near ±1e308 overflow in differences; the inf/NaN edges that come out of that
    # flag nothing, which is the right answer for numbers that large.
    with np.errstate(over="ignore", invalid="ignore"):
        judged = _band(v, threshold, min_relative_rise, block_size, window_blocks, noise_blocks)
        at = np.flatnonzero(v > judged.edge)
        if len(at) == 0:
            return []
        horizons = (block_size * window_blocks, block_size * noise_blocks)
        read = Judged(judged.baseline, judged.noise, judged.edge, judged.drift)
        first, ends = walk(
            v, at, read, min_relative_rise, max_gap, horizons, (block_size, noise_blocks)
        )
    starts = at[first]
    peaks = _first_argmax(v, starts, np.minimum(ends + 1, len(v)))
    recovered = ends < len(v)
    end_steps = np.where(recovered, finite_steps[np.minimum(ends, len(v) - 1)], step_arr[-1])
    columns = zip(
        finite_steps[starts].tolist(),
        finite_steps[peaks].tolist(),
        v[peaks].tolist(),
        end_steps.tolist(),
        judged.baseline[starts].tolist(),
        recovered.tolist(),
        judged.noise[starts].tolist(),
        strict=True,
    )
    return [
        Spike(start, peak, top, end, top / level if level > 0 else math.inf, level, back, sd)
        for start, peak, top, end, level, back, sd in columns
    ]


def band(
    values: npt.ArrayLike,
    *,
    threshold: float = THRESHOLD,
    min_relative_rise: float = 0.05,
    block_size: int = 16,
    window_blocks: int = 9,
    noise_blocks: int = 32,
) -> NoiseBand:
    """Each point's baseline, trend slope, noise SD and band edge, as `find_spikes` judges
    them, for values that are all finite (in step order).

    A point is abnormal where it is above its edge. Since a point's noise is independent
    of the points before it, the chance that Gaussian noise of SD ``σ`` around a trend
    ``f`` passes the edge at ``i`` is ``Q((e_i - f_i) / σ)``, so their sum is the expected
    number of false spikes on such a series.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or not np.isfinite(v).all():
        raise ValueError("values must be one-dimensional and finite: drop NaN and ±inf first")
    check_number("threshold", threshold, least=0.0, strict=True)
    check_number("min_relative_rise", min_relative_rise, least=0.0, strict=False)
    block_size = check_count("block_size", block_size, least=1)
    window_blocks = check_count("window_blocks", window_blocks, least=1)
    noise_blocks = check_count("noise_blocks", noise_blocks, least=1)
    with np.errstate(over="ignore", invalid="ignore"):
        return _band(v, threshold, min_relative_rise, block_size, window_blocks, noise_blocks)


def noise_sd(values: npt.ArrayLike, *, block_size: int = 16) -> float:
    """A metric's typical noise SD over the whole series: ``0.433 · med(a_t)`` over all its
    complete blocks (see the module docstring), 0.0 with fewer than one block or two points
    a block. Non-finite values are dropped first.

    >>> round(noise_sd(1.0 + 0.01 * np.random.default_rng(0).normal(size=4096)), 3)
    0.01
    """
    block_size = check_count("block_size", block_size, least=1)
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) < block_size or block_size < 2:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        spread = _spreads(v[: len(v) // block_size * block_size].reshape(-1, block_size))
    return float(SPREAD_TO_SIGMA * _column(spread[None, :], len(spread) // 2)[0])


def _spreads(blocks: FloatArray) -> FloatArray:
    """``a_t`` of each row: the ``⌊7(B-1)/8⌋``-th smallest of ``|d - med(d)|`` over the
    row's neighbour differences ``d`` (0 for rows of fewer than two points)."""
    width = blocks.shape[1] - 1
    if width < 1:
        return np.zeros(len(blocks))
    diffs = np.diff(blocks, axis=1)
    middle = np.partition(diffs, width // 2, axis=1)[:, width // 2]
    diffs -= middle[:, None]
    np.abs(diffs, out=diffs)
    high = min(width - 1, 7 * width // 8)
    spread: FloatArray = np.partition(diffs, high, axis=1)[:, high]
    return spread


def _trailing_median(x: FloatArray, width: int) -> FloatArray:
    """Row ``j - 1`` (``j = 1 … len(x)``): ``med(x[max(0, j - width) : j])``."""
    out = np.empty(len(x))
    for j in range(1, min(width, len(x) + 1)):
        out[j - 1] = _column(x[None, :j], j // 2)[0]
    if len(x) >= width:
        out[width - 1 :] = _rolling_upper_median(x, width)
    return out


def _relative_spread(
    spreads: FloatArray, med: FloatArray, width: int, short: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Row ``j - 1``: over the last ``N' = min(width, j)`` blocks, ``med(a_t / |m_t|)``,
    ``med(|m_t|)`` and the sign all the ``m_t`` share (0 where they do not share one, or
    where the first is above `LEVEL_SPREAD`: a level too close to the noise for the ratio to
    mean much)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(med != 0, spreads / np.abs(med), np.inf)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    typical = np.minimum(_trailing_median(ratio, width), _trailing_median(ratio, short))
    counts = np.arange(1, len(med) + 1)
    kept = np.minimum(counts, width)
    sign = np.zeros(len(med))
    for value in (1.0, -1.0):
        agree = np.r_[0, np.cumsum(np.sign(med) == value)]
        sign[agree[counts] - agree[counts - kept] == kept] = value
    sign[~(typical <= LEVEL_SPREAD)] = 0.0
    return typical, _trailing_median(np.abs(med), width), sign


def _band(
    v: FloatArray, threshold: float, rise: float, block: int, window: int, noise_window: int
) -> NoiseBand:
    """`band` without the argument checks (see the module docstring for each quantity)."""
    n = len(v)
    complete = n // block
    judged_from = min(2, window)
    baseline = np.full(n, np.nan)
    slope = np.full(n, np.nan)
    steady = np.full(n, np.nan)
    noise = np.full(n, np.nan)
    edge = np.full(n, np.inf)
    if n <= judged_from * block:
        return NoiseBand(baseline, slope, steady, noise, edge)
    blocks = v[: complete * block].reshape(complete, block)
    med = np.partition(blocks, block // 2, axis=1)[:, block // 2]
    # Row j - 1 describes block j, judged on the blocks before it (j = 1 … complete;
    # block `complete` may be partial). Early rows see fewer blocks.
    spreads = _spreads(blocks)
    # The long window's noise, raised where the short window's is clearly larger: noise
    # that grows with the metric (a warm-up) is not judged on its past.
    sigma = SPREAD_TO_SIGMA * np.maximum(
        _trailing_median(spreads, noise_window), _trailing_median(spreads, window) / RECENT_NOISE
    )
    # The noise window's spreads relative to each block's level, where every level in it is
    # of one sign and far above the noise: scaled by the point's baseline, the noise of a
    # metric whose noise grows with it (an update norm in warm-up) does not lag the level.
    relative = _relative_spread(spreads, med, noise_window, window)
    rows = np.arange(judged_from - 1, complete)
    # A fall is followed only as steeply as the longer noise window confirms: a spike's
    # recovery in the short window would tilt its slope down past the series.
    short = _slopes(med, rows + 1, window)
    drift = _long_slopes(med, rows + 1, noise_window) / block
    # Within the first noise window, a fall is not followed at all: a run's first steps
    # fall too fast and too curved for a line.
    settled = rows + 1 >= noise_window
    per_step = np.where(
        short < 0, np.where(settled, np.maximum(short / block, drift), 0.0), short / block
    )
    drift = np.where(settled | (drift > 0), drift, 0.0)
    judged = np.arange(judged_from * block, n)
    row = judged // block - 1
    at = row - (judged_from - 1)
    # Each of the last (up to) three blocks' medians, carried along the slope to the point
    # from the block's centre; their upper median.
    carried = np.full((len(judged), ANCHORS), -np.inf)
    for back in range(1, ANCHORS + 1):
        has = row + 1 - back >= 0
        distance = (judged - (row + 1 - back) * block) - (block - 1) / 2
        carried[has, back - 1] = med[(row + 1 - back)[has]] + per_step[at[has]] * distance[has]
    counted = np.minimum(row + 1, ANCHORS)
    carried.sort(axis=1)
    base = carried[np.arange(len(judged)), ANCHORS - counted + counted // 2]
    baseline[judged] = base
    slope[judged] = per_step[at]
    steady[judged] = drift[at]
    ratio, typical_level, sign = (column[row] for column in relative)
    moved = (sign != 0) & (np.sign(base) == sign) & (np.abs(base) >= LEVEL_MOVE * typical_level)
    scaled = np.where(moved, SPREAD_TO_SIGMA * ratio * np.abs(base), 0.0)
    sd = np.maximum(sigma[row], scaled)
    noise[judged] = sd
    edge[judged] = base + np.maximum(threshold * sd, rise * np.abs(base))
    return NoiseBand(baseline, slope, steady, noise, edge)


def _slopes(med: FloatArray, judged: IntArray, window: int) -> FloatArray:
    """Theil-Sen slope per block, ``med((m_u - m_t) / (u - t), j - K' ≤ t < u < j)``, for
    each judged block ``j`` (0 when ``K' = 1``)."""
    slope = np.zeros(len(judged))
    for kept in np.unique(np.minimum(judged, window)).tolist():
        if kept < 2:
            continue
        rows = np.flatnonzero(np.minimum(judged, window) == kept)
        older, newer = np.triu_indices(kept, 1)
        first = judged[rows, None] - kept
        pairs = (med[first + newer] - med[first + older]) / (newer - older)
        slope[rows] = _column(pairs, len(older) // 2)
    return slope


def _long_slopes(med: FloatArray, judged: IntArray, window: int) -> FloatArray:
    """``med((m_u - m_{u-ℓ}) / ℓ, j - N' + ℓ ≤ u < j)`` with ``ℓ = ⌈N' / 2⌉`` for each judged
    block ``j`` (``N' = min(N, j)``; 0 when ``N' = 1``)."""
    slope = np.zeros(len(judged))
    for kept in np.unique(np.minimum(judged, window)).tolist():
        if kept < 2:
            continue
        lag = (kept + 1) // 2
        rows = np.flatnonzero(np.minimum(judged, window) == kept)
        newer = judged[rows, None] - kept + lag + np.arange(kept - lag)
        pairs = (med[newer] - med[newer - lag]) / lag
        slope[rows] = _column(pairs, (kept - lag) // 2)
    return slope


def _column(rows: FloatArray, k: int) -> FloatArray:
    """The ``k``-th smallest of each row (``k = len // 2``: the upper median)."""
    column: FloatArray = np.partition(rows, k, axis=1)[:, k]
    return column


def _rolling_upper_median(x: FloatArray, width: int) -> FloatArray:
    """``med(x[r : r + width])`` for every ``r``, as rows of a strided view."""
    return _column(np.lib.stride_tricks.sliding_window_view(x, width), width // 2)


def _first_argmax(v: FloatArray, starts: IntArray, ends: IntArray) -> IntArray:
    """Index of the first maximum of ``v[start:end]`` for each spike (spans are disjoint)."""
    bounds = np.stack([starts, ends], axis=1).ravel()
    tops = np.maximum.reduceat(v, bounds[bounds < len(v)])[::2]
    lengths = ends - starts
    owner = np.repeat(np.arange(len(starts)), lengths)
    span = np.arange(len(owner)) + np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    at_top = np.flatnonzero(v[span] == tops[owner])
    first = np.r_[True, owner[at_top][1:] != owner[at_top][:-1]]
    peaks: IntArray = span[at_top[first]]
    return peaks


def fraction_in_spikes(
    steps: npt.ArrayLike,
    spikes: Sequence[Spike],
    start: int | None = None,
    end: int | None = None,
) -> float:
    """Share of the logged steps in ``[start, end]`` that lie in some spike's ``[start, end]``.

    ``#{s in steps : start ≤ s ≤ end, ∃ spike: spike.start ≤ s ≤ spike.end} / #{s in steps :
    start ≤ s ≤ end}``; the window defaults to the whole series, and is 0.0 when it holds no
    step. Spikes may overlap (say, those of several metrics): a step counts once.

    >>> spike = Spike(start=2, peak=2, peak_value=3.0, end=3, magnitude=3.0, baseline=1.0,
    ...               recovered=True)
    >>> fraction_in_spikes([0, 1, 2, 3, 4], [spike])
    0.4
    """
    step_arr = checked_steps(steps)
    if start is not None and end is not None and start > end:
        raise ValueError(f"start must be <= end, got start={start} and end={end}")
    lo = 0 if start is None else int(np.searchsorted(step_arr, start, side="left"))
    hi = len(step_arr) if end is None else int(np.searchsorted(step_arr, end, side="right"))
    window = step_arr[lo:hi]
    if len(window) == 0:
        return 0.0
    # Each spike covers the window's indices [first, after); merge overlapping ones (sorted by
    # first, a new group starts past the furthest end so far) and add up the groups.
    first = np.searchsorted(window, [spike.start for spike in spikes], side="left")
    after = np.searchsorted(window, [spike.end for spike in spikes], side="right")
    keep = after > first
    order = np.argsort(first[keep], kind="stable")
    first, after = first[keep][order], after[keep][order]
    if len(first) == 0:
        return 0.0
    reach = np.maximum.accumulate(after)
    opens = np.r_[True, first[1:] > reach[:-1]]
    closes = np.r_[opens[1:], True]
    inside = int(reach[closes].sum() - first[opens].sum())
    return inside / len(window)


def lead_lag(
    leader: str,
    leader_spikes: Sequence[Spike],
    follower: str,
    follower_spikes: Sequence[Spike],
    *,
    max_lag: int = 50,
) -> LeadLag:
    """Pair each leader spike with the first follower spike starting ``0 < lag ≤ max_lag``
    steps after it; ``lag_steps`` is the median lag over the pairs (None when none).

    A follower spike may answer several leader spikes.

    >>> def at(step: int) -> Spike:
    ...     return Spike(step, step, 2.0, step + 1, 2.0, 1.0, True)
    >>> lead_lag("updates", [at(10), at(50)], "loss", [at(18), at(200)])
    LeadLag(leader='updates', follower='loss', lag_steps=8.0, matched=1, unmatched_leader=1)
    """
    max_lag = check_count("max_lag", max_lag, least=1)
    leads = np.array([spike.start for spike in leader_spikes], dtype=np.int64)
    follows = np.sort(np.array([spike.start for spike in follower_spikes], dtype=np.int64))
    after = np.searchsorted(follows, leads, side="right")
    has_next = after < len(follows)
    lags = follows[after[has_next]] - leads[has_next]
    lags = lags[lags <= max_lag]
    return LeadLag(
        leader=leader,
        follower=follower,
        lag_steps=float(np.median(lags)) if len(lags) else None,
        matched=len(lags),
        unmatched_leader=len(leads) - len(lags),
    )
