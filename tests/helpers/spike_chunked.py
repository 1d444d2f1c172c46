"""The spike finder as it was before its recoveries were judged point by point: every end
found by NumPy chunks and masked medians. Slow on series with thousands of short spikes
(a minute for a 50k-step sawtooth), kept to check that the fast one answers the same."""

from __future__ import annotations

import bisect
import math

import numpy as np
import numpy.typing as npt

from normwatch.server.analytics.spikes import NoiseBand, Spike, band

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

SMOOTHING = 16
STALL = 2 * SMOOTHING + 1
SETTLED = 2 * SMOOTHING + STALL


def chunked_spikes(steps: IntArray, values: FloatArray, *, threshold: float = 5.25) -> list[Spike]:
    """`find_spikes` with its default arguments but ``threshold``, the old way."""
    rise, gap, block, window, noise_window = 0.05, 2, 16, 9, 32
    finite = np.isfinite(values)
    v, finite_steps = values[finite], steps[finite]
    with np.errstate(over="ignore", invalid="ignore"):
        judged = band(v, threshold=threshold)
        at = np.flatnonzero(v > judged.edge)
        if len(at) == 0:
            return []
        points = at.tolist()
        complete = len(v) // block
        med = np.partition(v[: complete * block].reshape(complete, block), block // 2, axis=1)[
            :, block // 2
        ]
        lifted = np.zeros(complete + 1, dtype=np.int64)
        found: list[Spike] = []
        k = 0
        while k < len(points):
            s = points[k]
            q = _end(v, s, judged, med, lifted, (rise, gap, block, window, noise_window))
            lifted[s // block : min(complete, (2 * q - s) // block + 1)] = 1
            stop = min(q + 1, len(v))
            peak = s + int(np.argmax(v[s:stop]))
            level = float(judged.baseline[s])
            top = float(v[peak])
            found.append(
                Spike(
                    int(finite_steps[s]),
                    int(finite_steps[peak]),
                    top,
                    int(finite_steps[q]) if q < len(v) else int(steps[-1]),
                    top / level if level > 0 else math.inf,
                    level,
                    q < len(v),
                    float(judged.noise[s]),
                )
            )
            k = bisect.bisect_right(points, q, k + 1)
    return found


def _end(
    v: FloatArray,
    s: int,
    judged: NoiseBand,
    med: FloatArray,
    lifted: IntArray,
    shape: tuple[float, int, int, int, int],
) -> int:
    """The end of the spike starting at ``s``: its frozen trend, then the chunked scan."""
    rise, gap, block, window, noise_window = shape
    level = float(judged.baseline[s])
    back = max(float(judged.noise[s]), rise / 5 * abs(level))
    j = s // block
    heard = min(noise_window, j)
    kept = np.flatnonzero(lifted[j - heard : j] == 0) + (j - heard)
    if len(kept) < 2:
        drift = float(judged.drift[s])
    else:
        lag = (len(kept) + 1) // 2
        newer, older = kept[lag:], kept[: len(kept) - lag]
        pairs = (med[newer] - med[older]) / (newer - older)
        drift = float(np.partition(pairs, len(pairs) // 2)[len(pairs) // 2]) / block
        drift = drift if j >= noise_window or drift > 0 else 0.0
    horizon = block * (window if drift < 0 else noise_window)
    edge = float(judged.edge[s])
    n = len(v)
    ahead = np.arange(2 * gap + 1)
    lo, size = s + 1, 1
    while lo < n:
        hi = min(n, lo + size)
        reach = np.arange(lo, hi)
        trend = (level, drift, horizon)
        smoothed = _smoothed(v, s, reach, trend, gap)
        settled = reach - s >= SETTLED
        before = _smoothed(v, s, np.where(settled, reach - STALL, reach), trend, gap)
        stalled = settled & (smoothed <= 2 * back) & (smoothed >= before)
        near = reach[:, None] + ahead
        seen = np.minimum(near, n - 1)
        over = v[seen] > edge + drift * np.minimum(seen - s, horizon)
        calm = ~(over & (near < n)).any(axis=1)
        hit = np.flatnonzero(((smoothed <= back) | stalled) & calm)
        if len(hit):
            return lo + int(hit[0])
        lo, size = hi, min(1 << 16, max(64, size * 4))
    return n


def _smoothed(
    v: FloatArray, s: int, reach: IntArray, trend: tuple[float, float, int], gap: int
) -> FloatArray:
    """The median excess over the frozen trend in each ``q``'s clipped window."""
    level, drift, horizon = trend
    n = len(v)
    offsets = np.arange(-SMOOTHING, SMOOTHING + 1)
    half = np.minimum(SMOOTHING, np.maximum(gap, (reach - s) // 2))
    span = reach[:, None] + offsets
    inside = (np.abs(offsets) <= half[:, None]) & (span > s) & (span < n)
    shown = np.minimum(np.maximum(span, s + 1), n - 1)
    excess = v[shown] - (level + drift * np.minimum(shown - s, horizon))
    smoothed: FloatArray = np.nanmedian(np.where(inside, excess, np.nan), axis=1)
    return smoothed
