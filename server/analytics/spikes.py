"""Spikes in one metric: where they start, peak and recover, the share of steps spent in
them, and which metric's spikes lead another's.

Definition (``find_spikes``). Non-finite values are dropped first (they are the
``non_finite`` alert kind's business); ``v_0 … v_{n-1}`` are the finite values in step order.
Windows count these points, not steps. With ``B = block_size``, ``K = window_blocks`` and
``med`` the upper median (``sorted(x)[len(x) // 2]``, a value of ``x``, so no rounding):

* block ``t`` holds points ``tB … tB+B-1``; ``m_t = med(block)`` and ``a_t`` the
  ``⌊7B/8⌋``-th smallest (from 0) of ``|block - m_t|``, the 15th of 16;
* point ``i`` in block ``j = i // B ≥ 1`` is judged on the ``K' = min(K, j)`` complete blocks
  before its own, so a spike never raises its own baseline:

  - ``level = med(m_{j-K'} … m_{j-1})``,
  - ``σ = 0.61 · med(a_{j-K'} … a_{j-1})`` (≈ the standard deviation of Gaussian noise),
  - ``slope = med((m_u - m_t) / (u - t), j-K' ≤ t < u < j) / B`` (Theil-Sen; 0 if ``K' = 1``),
  - ``baseline_i = level + max(slope, 0) · d_i``, with ``d_i = (i - jB) + (K'B + 1) / 2`` the
    distance from the window's centre: a rise (LR warm-up lifting the update norm) is
    followed, a decay is not (the lagging level stays above a falling series, which is safe),
  - band edge ``e_i = baseline_i + max(threshold · σ, min_relative_rise · |baseline_i|)``.

  Points of blocks 0 and 1 (only 0 when ``K = 1``) are never abnormal: one block of
  history has no slope, and on a ramp up from zero it would flag the ramp itself.
* ``v_i`` is abnormal when ``v_i > e_i``: above ``threshold`` σ *and* more than
  ``min_relative_rise`` above the baseline, so a series too smooth to have a spread (σ = 0)
  still needs a real rise.
* A spike starts at the first abnormal point after the previous spike's end. Its trend is
  frozen at the start: ``r_s(p) = baseline_s + max(σ_s, min_relative_rise/5 · |baseline_s|)
  + max(slope, 0)_s · min(p - s, KB)``, one noise SD above the pre-spike trend (the floor
  lets a series too smooth to have a spread come back), and the band edge
  ``e_s(p) = e_s + max(slope, 0)_s · min(p - s, KB)``. A long spike lifts later baselines,
  not its own recovery level, which follows the start's climb (a spike on a warm-up ramp
  recovers) for one window's length only (no extrapolated trend "recovers" a divergence).
  The spike lasts until it is back within that SD, however long that takes: it ends at the
  first point ``q > s`` with ``v_q ≤ r_s(q)``, the median of ``v_q … v_{q+2·max_gap}`` (those
  that exist) ``≤ r_s(q)``, and none of those points above ``e_s``. An excursion that starts
  inside the recovery is part of the spike. With no such ``q`` it has not recovered and
  ends at the series' last logged step; a lasting step up therefore reads as a spike that
  never recovers, which for a diverging loss is the point. ``peak`` is the first maximum of
  ``v_s … v_q`` (``v_q`` only wins where a ramp climbed past the spike).
* ``magnitude = peak_value / baseline_s`` for a positive baseline, else ``+inf`` (a ratio
  to a zero or negative level means nothing; compare ``peak_value - baseline``).

Why a high quantile of the deviations and ``threshold = 10``: training metrics have heavy
tails and are often logged rounded (llm.c prints the grad norm to 2 decimals, so a quiet
block's MAD is 0). On that log's grad norm, MAD-based σ at 6 flags 119 one-step blips down
to 1.08× the level; these defaults keep 40, the smallest 1.33×, and all four of the 3-7×
spikes, which last up to 13 steps until the norm is back within its noise. Gaussian noise
is never near 10 σ, so a seeded 2× spike on 5 % noise is found.

Everything is scale-free: multiplying the values by ``c > 0`` scales every quantity above
by ``c`` (exactly when ``c`` is a power of two), so the same spikes are found. Zeros and
negative values need no special case; a series stuck at exactly one value ``b`` has
``σ = 0``, so any value above ``b + min_relative_rise · |b|`` is a spike.

``lead_lag`` pairs each leader spike with the first follower spike that starts
``0 < lag ≤ max_lag`` steps after it. Lag 0 does not count: spikes starting at the same
step show that two metrics moved together, not which one led.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .arguments import check_count, check_number, checked_series, checked_steps

__all__ = ["LeadLag", "Spike", "find_spikes", "fraction_in_spikes", "lead_lag"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

SPREAD_TO_SIGMA = 0.61
"""Gaussian noise of standard deviation σ has a 15th-smallest of 16 absolute deviations from
the block's median of ≈ 1.64 σ (simulated), so ``0.61 ·`` that reads ≈ σ at the default
block of 16."""


@dataclass(frozen=True, slots=True)
class Spike:
    """One upward excursion: first abnormal step, highest point, and recovery step."""

    start: int
    peak: int
    peak_value: float
    end: int
    magnitude: float
    baseline: float
    recovered: bool


@dataclass(frozen=True, slots=True)
class LeadLag:
    """How often, and by how many steps, ``leader``'s spikes come before ``follower``'s."""

    leader: str
    follower: str
    lag_steps: float | None
    matched: int
    unmatched_leader: int


THRESHOLD = 10.0
"""How many robust noise SDs above its baseline a point must be to start a spike, unless
told otherwise (see the module docstring for why 10)."""
MIN_THRESHOLD, MAX_THRESHOLD = 2.0, 100.0
"""The range a request may ask for: below 2 σ ordinary noise is a spike."""


def find_spikes(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    *,
    threshold: float = THRESHOLD,
    min_relative_rise: float = 0.05,
    max_gap: int = 2,
    block_size: int = 16,
    window_blocks: int = 9,
) -> list[Spike]:
    """The upward spikes of one metric, in step order (see the module docstring).

    ``steps`` are unique and ascending; ``values`` may hold NaN and ±inf, which are
    ignored. By default each block of 16 points is judged on the 9 · 16 = 144 before it,
    and a spike is more than 10 robust σ and 5 % above that baseline.

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

    finite = np.isfinite(value_arr)
    if finite.all():
        v, finite_steps = value_arr, step_arr
    else:
        v, finite_steps = value_arr[finite], step_arr[finite]
    # Values near ±1e308 overflow in differences; the inf/NaN edges that come out of that
    # flag nothing, which is the right answer for numbers that large.
    with np.errstate(over="ignore", invalid="ignore"):
        at, baseline, edge, back, climb = _abnormal(
            v, threshold, min_relative_rise, block_size, window_blocks
        )
        if len(at) == 0:
            return []
        first, ends = _walk(v, at, edge, back, climb, max_gap, block_size * window_blocks)
    starts = at[first]
    peaks = _first_argmax(v, starts, np.minimum(ends + 1, len(v)))
    recovered = ends < len(v)
    end_steps = np.where(recovered, finite_steps[np.minimum(ends, len(v) - 1)], step_arr[-1])
    columns = zip(
        finite_steps[starts].tolist(),
        finite_steps[peaks].tolist(),
        v[peaks].tolist(),
        end_steps.tolist(),
        baseline[first].tolist(),
        recovered.tolist(),
        strict=True,
    )
    return [
        Spike(start, peak, top, end, top / level if level > 0 else math.inf, level, back)
        for start, peak, top, end, level, back in columns
    ]


def _abnormal(
    v: FloatArray, threshold: float, rise: float, block: int, window: int
) -> tuple[IntArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The abnormal points' indices, with their ``baseline_i``, band edge ``e_i``, recovery
    level ``r_i`` and climb.

    Level and σ are computed for every block; the slope, and a point's exact edge, only
    where the point passes ``level + threshold · σ``, a lower bound of the edge (the
    climb is never negative, and rounding is monotone, so it holds in floating point too).
    """
    complete = len(v) // block
    judged_from = min(2, window)
    if len(v) <= judged_from * block:
        return np.empty(0, dtype=np.int64), np.empty(0), np.empty(0), np.empty(0), np.empty(0)
    blocks = v[: complete * block].reshape(complete, block)
    # One scratch copy serves both statistics: deviations from a row's median do not
    # depend on the order that partitioning left the row in.
    scratch = np.partition(blocks, block // 2, axis=1)
    med = scratch[:, block // 2].copy()
    scratch -= med[:, None]
    np.abs(scratch, out=scratch)
    high = min(block - 1, 7 * block // 8)
    scratch.partition(high, axis=1)
    spread = scratch[:, high].copy()
    del scratch
    # Row j - 1 describes block j, judged on blocks max(0, j - window) … j - 1 (j = 1 …
    # complete; block `complete` may be partial). Early rows see fewer blocks.
    level = np.empty(complete)
    sigma = np.empty(complete)
    for j in range(1, min(window, complete + 1)):
        level[j - 1] = _column(med[None, :j], j // 2)[0]
        sigma[j - 1] = _column(spread[None, :j], j // 2)[0]
    if complete >= window:
        level[window - 1 :] = _rolling_upper_median(med, window)
        sigma[window - 1 :] = _rolling_upper_median(spread, window)
    sigma *= SPREAD_TO_SIGMA

    bound = level + threshold * sigma
    tail = complete * block
    at = np.concatenate(
        [
            np.flatnonzero(blocks[judged_from:] > bound[judged_from - 1 : -1, None])
            + judged_from * block,
            np.flatnonzero(v[tail:] > bound[-1]) + tail,
        ]
    )
    row = at // block - 1
    rows, where = np.unique(row, return_inverse=True)
    climb = np.maximum(_slopes(med, rows + 1, window) / block, 0.0)[where]
    kept = np.minimum(row + 1, window)
    baseline = level[row] + climb * ((at - (row + 1) * block) + (kept * block + 1) / 2)
    edge = baseline + np.maximum(threshold * sigma[row], rise * np.abs(baseline))
    keep = v[at] > edge
    # Back within one noise SD of the trend (at least a fifth of the least rise, so that a
    # series too smooth to have a spread can still come back).
    back = baseline + np.maximum(sigma[row], rise / 5 * np.abs(baseline))
    return at[keep], baseline[keep], edge[keep], back[keep], climb[keep]


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


def _column(rows: FloatArray, k: int) -> FloatArray:
    """The ``k``-th smallest of each row (``k = len // 2``: the upper median)."""
    column: FloatArray = np.partition(rows, k, axis=1)[:, k]
    return column


def _rolling_upper_median(x: FloatArray, width: int) -> FloatArray:
    """``med(x[r : r + width])`` for every ``r``, as rows of a strided view."""
    return _column(np.lib.stride_tricks.sliding_window_view(x, width), width // 2)


def _walk(
    v: FloatArray,
    at: IntArray,
    edge: FloatArray,
    back: FloatArray,
    climb: FloatArray,
    gap: int,
    horizon: int,
) -> tuple[IntArray, IntArray]:
    """Which abnormal points start spikes (positions in ``at``), and each spike's end index;
    ``len(v)`` for one that never recovers.

    Sequential by nature (a spike's end decides where the next may start, and an abnormal
    point inside a recovery belongs to the spike), so the loop runs once per spike, over
    Python ints.
    """
    points = at.tolist()
    first: list[int] = []
    ends: list[int] = []
    k = 0
    while k < len(points):
        s = points[k]
        q = _recovery(v, s, float(edge[k]), float(back[k]), float(climb[k]), gap, horizon)
        first.append(k)
        ends.append(q)
        k = bisect.bisect_right(points, q, k + 1)
    return np.array(first, dtype=np.int64), np.array(ends, dtype=np.int64)


def _recovery(
    v: FloatArray, s: int, edge: float, back: float, climb: float, gap: int, horizon: int
) -> int:
    """First ``q > s`` where the spike is over (see the module docstring), else ``len(v)``:
    ``v_q ≤ r_s(q)``, the median of the window ``v_q … v_{q+2·gap}`` (those that exist)
    ``≤ r_s(q)``, and no point of the window above ``e_s(p)``. Scans in growing chunks, the
    first of a single window (the common one-step spike)."""
    n = len(v)
    width = 2 * gap + 1
    lo, size = s + 1, 1
    while lo < n:
        hi = min(n, lo + size)
        reach = np.arange(lo, hi)
        tail = np.arange(lo, min(n, hi + width - 1))
        padded = np.concatenate([v[tail], np.full(width - 1, np.nan)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, width)[: hi - lo]
        over = v[tail] > edge + climb * np.minimum(tail - s, horizon)
        over_pad = np.concatenate([over, np.zeros(width - 1, dtype=bool)])
        any_over = np.lib.stride_tricks.sliding_window_view(over_pad, width)[: hi - lo].any(axis=1)
        level = back + climb * np.minimum(reach - s, horizon)
        # The last points have fewer than `width` after them: the median of those there.
        middle = np.nanmedian(windows, axis=1) if hi + width - 1 > n else np.median(windows, axis=1)
        done = (v[reach] <= level) & (middle <= level) & ~any_over
        hit = np.flatnonzero(done)
        if len(hit):
            return lo + int(hit[0])
        lo, size = hi, max(64, size * 4)
    return n


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
