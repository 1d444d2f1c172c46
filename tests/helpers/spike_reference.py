"""Spike-shaped test series and a slow, obvious reference for what the spike finder should find."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from normwatch.server.analytics.spikes import Spike

SHAPES = ("flat", "heavy", "walk", "ramp", "decay", "quantised", "negative", "zeros")


def reference_spikes(
    steps: Sequence[int],
    values: Sequence[float],
    *,
    threshold: float = 5.25,
    min_relative_rise: float = 0.05,
    max_gap: int = 2,
    block_size: int = 16,
    window_blocks: int = 9,
    noise_blocks: int = 32,
) -> list[Spike]:
    """The definition, one point at a time: sorted lists and loops, nothing shared."""
    points = [(int(s), float(v)) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
    v = [value for _, value in points]
    n, b, k, w = len(v), block_size, window_blocks, noise_blocks

    def upper_median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    def block_median(t: int) -> float:
        return upper_median(v[t * b : (t + 1) * b])

    def block_spread(t: int) -> float:
        block = v[t * b : (t + 1) * b]
        differences = [block[i + 1] - block[i] for i in range(len(block) - 1)]
        if not differences:
            return 0.0
        middle = upper_median(differences)
        deviations = sorted(abs(d - middle) for d in differences)
        return deviations[min(len(differences) - 1, 7 * len(differences) // 8)]

    baselines = [math.nan] * n
    drifts = [0.0] * n
    sigmas = [0.0] * n
    edges = [math.inf] * n
    for i in range(n):
        j = i // b
        if j < min(2, k):
            continue
        kept, heard = min(k, j), min(w, j)
        medians = [block_median(t) for t in range(j - kept, j)]
        sigma = 0.433 * max(
            upper_median([block_spread(t) for t in range(j - heard, j)]),
            upper_median([block_spread(t) for t in range(j - kept, j)]) / 1.25,
        )
        pairs = [
            (medians[u] - medians[t]) / (u - t) for t in range(kept) for u in range(t + 1, kept)
        ]
        short = upper_median(pairs) if pairs else 0.0
        lag = (heard + 1) // 2
        long_pairs = [
            (block_median(u) - block_median(u - lag)) / lag for u in range(j - heard + lag, j)
        ]
        drift = upper_median(long_pairs) / b if heard > 1 else 0.0
        settled = j >= w  # a whole noise window of history: falls are followed
        if short >= 0:
            slope = short / b
        else:
            slope = max(short / b, drift) if settled else 0.0
        if not settled and drift < 0:
            drift = 0.0
        # The latest (up to) five blocks' medians, each carried along the slope from its
        # centre to the point; their upper median.
        carried = [
            block_median(t) + slope * ((i - t * b) - (b - 1) / 2) for t in range(max(0, j - 5), j)
        ]
        baselines[i] = upper_median(carried)
        # Where every block median of the noise window is of the baseline's sign, the
        # baseline is at least 1.1 times their median size and the median of
        # spread / |level| is at most 0.115 (the lower of the noise window's median and the
        # trend window's), 0.433 times that median times |baseline| too.
        levels = [block_median(t) for t in range(j - heard, j)]
        grown = abs(baselines[i]) >= 1.1 * upper_median([abs(m) for m in levels])
        if grown and (
            all(m > 0 for m in levels)
            and baselines[i] > 0
            or all(m < 0 for m in levels)
            and baselines[i] < 0
        ):
            ratios = [block_spread(t) / abs(block_median(t)) for t in range(j - heard, j)]
            relative = min(upper_median(ratios), upper_median(ratios[heard - kept :]))
            if relative <= 0.115:
                sigma = max(sigma, 0.433 * relative * abs(baselines[i]))
        drifts[i], sigmas[i] = drift, sigma
        edges[i] = baselines[i] + max(threshold * sigma, min_relative_rise * abs(baselines[i]))

    found = []
    lifted: list[tuple[int, int]] = []  # earlier spikes' extents, and as long again after
    i = 0
    while i < n:
        if not v[i] > edges[i]:
            i += 1
            continue
        start, edge, drift, base = i, edges[i], drifts[i], baselines[i]
        # The drift over the noise window's blocks that no earlier spike lifts, at the
        # lag of half their number, if two are left.
        j = start // b
        kept = [
            t
            for t in range(j - min(w, j), j)
            if not any(lo <= t * b + b - 1 and t * b <= hi for lo, hi in lifted)
        ]
        if len(kept) >= 2:
            lag = (len(kept) + 1) // 2
            pairs = [
                (block_median(kept[x + lag]) - block_median(kept[x])) / (kept[x + lag] - kept[x])
                for x in range(len(kept) - lag)
            ]
            drift = upper_median(pairs) / b
            if j < w and drift < 0:
                drift = 0.0
        back = max(sigmas[i], min_relative_rise / 5 * abs(base))
        horizon = k * b if drift < 0 else w * b
        excess = [v[p] - (base + drift * min(p - start, horizon)) for p in range(n)]
        end = n
        for q in range(start + 1, n):
            # Back within one noise SD, or within two and no lower than 33 points before
            # (both windows full); and no abnormal point just after.
            now = smoothed_excess(excess, start, q, max_gap)
            stalled = (
                q - start >= 65
                and now <= 2 * back
                and now >= smoothed_excess(excess, start, q - 33, max_gap)
            )
            ahead = range(q, min(n, q + 2 * max_gap + 1))
            if (now <= back or stalled) and all(
                v[p] <= edge + drift * min(p - start, horizon) for p in ahead
            ):
                end = q
                break
        peak = start
        for p in range(start, min(end + 1, n)):
            if v[p] > v[peak]:
                peak = p
        lifted.append((start, 2 * end - start))
        found.append(
            Spike(
                start=points[start][0],
                peak=points[peak][0],
                peak_value=v[peak],
                end=points[end][0] if end < n else int(steps[-1]),
                magnitude=v[peak] / base if base > 0 else math.inf,
                baseline=base,
                recovered=end < n,
                noise=sigmas[start],
            )
        )
        i = end + 1
    return found


def smoothed_excess(excess: Sequence[float], start: int, q: int, max_gap: int) -> float:
    """The median of a spike's excess over a window as wide as its age at ``q``."""
    half = min(16, max(max_gap, (q - start) // 2))
    window = range(max(start + 1, q - half), min(len(excess) - 1, q + half) + 1)
    return statistics.median(excess[p] for p in window)


def reference_fraction(
    steps: Sequence[int], spikes: Sequence[Spike], start: int | None, end: int | None
) -> float:
    window = [s for s in steps if (start is None or s >= start) and (end is None or s <= end)]
    inside = [s for s in window if any(sp.start <= s <= sp.end for sp in spikes)]
    return len(inside) / len(window) if window else 0.0


def make_series(
    shape: str, n: int, rng: np.random.Generator, *, spikes: int = 4, non_finite: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """A metric of the given shape with ``spikes`` added bumps and a share of NaN/±inf,
    logged at steps with gaps."""
    t = np.arange(n, dtype=np.float64)
    if shape == "flat":
        values = 1.0 + 0.02 * rng.normal(size=n)
    elif shape == "heavy":
        values = 1.0 + 0.02 * rng.standard_t(2, size=n)
    elif shape == "walk":
        values = 0.5 + np.cumsum(0.05 * rng.normal(size=n))
    elif shape == "ramp":
        values = (t + 1) / n * (1 + 0.01 * rng.normal(size=n))
    elif shape == "decay":
        values = (0.27 + 15 * np.exp(-t / 30)) * (1 + 0.03 * rng.normal(size=n))
    elif shape == "quantised":
        values = np.round(0.27 + 0.02 * rng.normal(size=n), 2)
    elif shape == "negative":
        values = -3.0 + 0.05 * rng.normal(size=n)
    else:
        values = np.where(rng.random(n) < 0.02, 1e-3, 0.0)
    for _ in range(spikes if n else 0):
        at, length = int(rng.integers(0, n)), int(rng.integers(1, 21))
        values[at : at + length] += rng.uniform(0.2, 3.0) * max(abs(float(np.median(values))), 0.1)
    for special in (math.nan, math.inf, -math.inf):
        values[rng.random(n) < non_finite / 3] = special
    steps = np.cumsum(rng.choice([1, 1, 1, 2, 10], size=n)).astype(np.int64)
    return steps, values
