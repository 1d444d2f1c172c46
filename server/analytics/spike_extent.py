"""Where each spike starts and ends: the walk over a series' abnormal points and each
spike's recovery, as `spikes` defines them (its module docstring has the formulas).

Sequential by nature (a spike's end decides where the next may start, and an abnormal point
inside a recovery belongs to the spike), so the walk loops once per spike. Most spikes end
within a few points of their start, so their recovery is judged point by point on Python
floats, where a NumPy call per point would cost more than the arithmetic; a spike still
going once its smoothing windows are full width is scanned in growing NumPy chunks. Both
compute every quantity with the same float64 operations, in the same order, so they find
the same end.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

SMOOTHING = 16
"""The widest half-window, in points, the excess is smoothed over to judge a recovery."""
STALL = 2 * SMOOTHING + 1
"""How far back, in points (one full smoothing window), a recovery's smoothed excess is
compared with to see whether it still falls."""
SETTLED = 2 * SMOOTHING + STALL
"""How old a spike must be, in points, for both of those windows to be full width."""


@dataclass(frozen=True, slots=True)
class Trend:
    """A spike's pre-spike trend, frozen at its start ``s``: ``T(p) = baseline + slope ·
    min(p - s, horizon)``, its band edge, and the excess it is back at (one noise SD)."""

    baseline: float
    slope: float
    edge: float
    back: float
    horizon: int


@dataclass(frozen=True, slots=True)
class Judged:
    """Per finite point, what the band read there: baseline, noise SD, band edge and the
    noise window's per-step drift (`spikes.NoiseBand`'s columns)."""

    baseline: FloatArray
    noise: FloatArray
    edge: FloatArray
    drift: FloatArray


def walk(
    v: FloatArray,
    at: IntArray,
    judged: Judged,
    rise: float,
    gap: int,
    horizons: tuple[int, int],
    block_shape: tuple[int, int],
) -> tuple[IntArray, IntArray]:
    """Which abnormal points ``at`` start spikes (positions in ``at``), and each spike's end
    index; ``len(v)`` for one that never recovers."""
    points = at.tolist()
    values = v.tolist()
    first: list[int] = []
    ends: list[int] = []
    block, noise_window = block_shape
    complete = len(v) // block
    med = np.partition(v[: complete * block].reshape(complete, block), block // 2, axis=1)[
        :, block // 2
    ]
    # Each earlier spike's extent and as long again after it, in blocks: the blocks its
    # recovery's tail may still lift.
    lifted = bytearray(complete + 1)
    k = 0
    while k < len(points):
        s = points[k]
        level = float(judged.baseline[s])
        back = max(float(judged.noise[s]), rise / 5 * abs(level))
        drift = _spike_drift(med, s // block, noise_window, block, lifted)
        if drift is None:
            drift = float(judged.drift[s])
        horizon = horizons[0] if drift < 0 else horizons[1]
        trend = Trend(level, drift, float(judged.edge[s]), back, horizon)
        q = _young_recovery(values, s, trend, gap)
        if q is None:
            q = _recovery(v, s, trend, gap, s + 1)
        elif q < 0:
            q = _recovery(v, s, trend, gap, s + SETTLED)
        first.append(k)
        ends.append(q)
        lo, hi = s // block, min(complete, (2 * q - s) // block + 1)
        lifted[lo:hi] = b"\x01" * max(0, hi - lo)
        k = bisect.bisect_right(points, q, k + 1)
    return np.array(first, dtype=np.int64), np.array(ends, dtype=np.int64)


def _spike_drift(
    med: FloatArray, j: int, window: int, block: int, lifted: bytearray
) -> float | None:
    """The drift a spike starting in block ``j`` follows: the noise window's lagged slope
    over the blocks no earlier spike lifts (see `spikes`); None where fewer than two are
    left (the band's drift then)."""
    unlifted = [t for t in range(j - min(window, j), j) if not lifted[t]]
    if len(unlifted) < 2:
        return None
    kept = np.array(unlifted, dtype=np.int64)
    lag = (len(kept) + 1) // 2
    newer, older = kept[lag:], kept[: len(kept) - lag]
    pairs = (med[newer] - med[older]) / (newer - older)
    k = len(pairs) // 2
    drift = float(np.partition(pairs, k)[k]) / block
    # Within the first noise window a fall is not followed (as in `spikes._band`).
    return drift if j >= window or drift > 0 else 0.0


def _young_recovery(v: list[float], s: int, trend: Trend, gap: int) -> int | None:
    """The first ``q`` in ``s < q < s + SETTLED`` where the spike is over, judged one point
    at a time; -1 where there is none (the chunked scan goes on from ``s + SETTLED``), ``n``
    where the series ends first, and None where an excess is not finite (the chunked scan
    then judges the whole spike, as NumPy orders infinities and NaN).

    Before ``SETTLED`` the stall test cannot hold, so a point is over when the median
    excess around it is within ``back`` and nothing over the edge follows it. The median is
    NumPy's: the mean of the two middle values, ``(x + x) / 2`` for an odd count.
    """
    n = len(v)
    baseline, slope, horizon = trend.baseline, trend.slope, trend.horizon
    for q in range(s + 1, min(n, s + SETTLED)):
        half = min(SMOOTHING, max(gap, (q - s) // 2))
        window = range(max(s + 1, q - half), min(n - 1, q + half) + 1)
        excess = [v[p] - (baseline + slope * min(p - s, horizon)) for p in window]
        # A NaN or an infinity anywhere makes the sum one (or overflows it: no harm).
        if not math.isfinite(sum(excess)):
            return None
        excess.sort()
        count = len(excess)
        # Written as the chunked scan compares, so a NaN ``back`` never ends a spike.
        if not (excess[(count - 1) // 2] + excess[count // 2]) / 2 <= trend.back:
            continue
        ahead = range(q, min(n, q + 2 * gap + 1))
        if not any(v[p] > trend.edge + slope * min(p - s, horizon) for p in ahead):
            return q
    return n if s + SETTLED >= n else -1


def _recovery(v: FloatArray, s: int, trend: Trend, gap: int, lo: int) -> int:
    """First ``q ≥ lo`` where the spike is over (see `spikes`), else ``len(v)``. Scans in
    growing chunks, the first a few points; from ``s + SETTLED`` on, on contiguous runs."""
    n = len(v)
    size = 1
    while lo < n:
        hi = min(n, lo + size)
        if lo >= s + SETTLED:
            # Every q here is settled; the excess a full window earlier is the same run's.
            run = _smoothed_run(v, s, lo - STALL, hi, trend, gap)
            smoothed, before = run[STALL:], run[: hi - lo]
            stalled = (smoothed <= 2 * trend.back) & (smoothed >= before)
        else:
            reach = np.arange(lo, hi)
            smoothed = _clipped_excess(v, s, reach, trend, gap)
            settled = reach - s >= SETTLED
            before = _clipped_excess(v, s, np.where(settled, reach - STALL, reach), trend, gap)
            stalled = settled & (smoothed <= 2 * trend.back) & (smoothed >= before)
        hit = np.flatnonzero(((smoothed <= trend.back) | stalled) & _calm(v, s, lo, hi, trend, gap))
        if len(hit):
            return lo + int(hit[0])
        lo, size = hi, min(1 << 16, max(64, size * 4))
    return n


def _calm(v: FloatArray, s: int, lo: int, hi: int, trend: Trend, gap: int) -> npt.NDArray[np.bool_]:
    """For each ``q`` in ``[lo, hi)``: none of ``v_q … v_{q+2·gap}`` (those logged) is above
    the spike's edge carried along its trend."""
    n = len(v)
    seen = np.arange(lo, min(n, hi + 2 * gap))
    over = np.zeros(hi - lo + 2 * gap, dtype=np.bool_)
    over[: len(seen)] = v[seen] > trend.edge + trend.slope * np.minimum(seen - s, trend.horizon)
    windows = np.lib.stride_tricks.sliding_window_view(over, 2 * gap + 1)
    calm: npt.NDArray[np.bool_] = ~np.any(windows, axis=1)
    return calm


def _smoothed_run(v: FloatArray, s: int, first: int, hi: int, trend: Trend, gap: int) -> FloatArray:
    """`_clipped_excess` for every ``q`` in ``[first, hi)``, where ``first - s ≥ 2·SMOOTHING``.

    Where the window is full width (all but the series' last ``SMOOTHING`` points) and the
    excess finite, the median is the middle of 33 values of one excess array, read through
    a sliding view. It is written ``(x + x) / 2``, as NumPy's masked median (which the
    clipped windows need) writes it, so the two agree to the bit.
    """
    n = len(v)
    cut = max(first, min(hi, n - SMOOTHING))
    smoothed = np.empty(hi - first)
    if cut > first:
        at = np.arange(first - SMOOTHING, cut + SMOOTHING)
        excess = v[at] - (trend.baseline + trend.slope * np.minimum(at - s, trend.horizon))
        if np.isfinite(excess).all():
            windows = np.lib.stride_tricks.sliding_window_view(excess, 2 * SMOOTHING + 1)
            middle = np.partition(windows, SMOOTHING, axis=1)[:, SMOOTHING]
            smoothed[: cut - first] = (middle + middle) / 2
        else:
            cut = first
    if cut < hi:
        smoothed[cut - first :] = _clipped_excess(v, s, np.arange(cut, hi), trend, gap)
    return smoothed


def _clipped_excess(v: FloatArray, s: int, reach: IntArray, trend: Trend, gap: int) -> FloatArray:
    """The median of the excess over the frozen trend around each ``q`` in ``reach``, over
    ``max(s+1, q-h) ≤ p ≤ min(n-1, q+h)`` with ``h = min(SMOOTHING, max(gap, ⌊(q-s)/2⌋))``
    (NumPy's median of those that are not NaN)."""
    n = len(v)
    offsets = np.arange(-SMOOTHING, SMOOTHING + 1)
    half = np.minimum(SMOOTHING, np.maximum(gap, (reach - s) // 2))
    span = reach[:, None] + offsets
    inside = (np.abs(offsets) <= half[:, None]) & (span > s) & (span < n)
    shown = np.minimum(np.maximum(span, s + 1), n - 1)
    excess = v[shown] - (trend.baseline + trend.slope * np.minimum(shown - s, trend.horizon))
    smoothed: FloatArray = np.nanmedian(np.where(inside, excess, np.nan), axis=1)
    return smoothed
