"""Spike-shaped test series and a slow, obvious reference for what the spike finder should find."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from normwatch.server.analytics.spikes import (
    Spike,
)

SHAPES = ("flat", "heavy", "walk", "ramp", "decay", "quantised", "negative", "zeros")


def reference_spikes(
    steps: Sequence[int],
    values: Sequence[float],
    *,
    threshold: float = 10.0,
    min_relative_rise: float = 0.05,
    max_gap: int = 2,
    block_size: int = 16,
    window_blocks: int = 9,
) -> list[Spike]:
    """The definition, one point at a time: sorted lists and loops, nothing shared."""
    points = [(int(s), float(v)) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
    v = [value for _, value in points]
    n, b, k = len(v), block_size, window_blocks

    def upper_median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    def block_stats(t: int) -> tuple[float, float]:
        block = v[t * b : (t + 1) * b]
        m = upper_median(block)
        deviations = sorted(abs(x - m) for x in block)
        return m, deviations[min(b - 1, 7 * b // 8)]

    baselines = [math.nan] * n
    edges = [math.inf] * n
    backs = [math.inf] * n
    climbs = [0.0] * n
    for i in range(n):
        j = i // b
        if j < min(2, k):
            continue
        kept = min(k, j)
        stats = [block_stats(t) for t in range(j - kept, j)]
        medians = [m for m, _ in stats]
        level = upper_median(medians)
        sigma = 0.61 * upper_median([a for _, a in stats])
        pairs = [
            (medians[u] - medians[t]) / (u - t) for t in range(kept) for u in range(t + 1, kept)
        ]
        slope = upper_median(pairs) if pairs else 0.0
        climbs[i] = max(slope / b, 0.0)
        baselines[i] = level + climbs[i] * ((i - j * b) + (kept * b + 1) / 2)
        edges[i] = baselines[i] + max(threshold * sigma, min_relative_rise * abs(baselines[i]))
        backs[i] = baselines[i] + max(sigma, min_relative_rise / 5 * abs(baselines[i]))

    found = []
    i = 0
    while i < n:
        if not v[i] > edges[i]:
            i += 1
            continue
        start, edge, back, climb = i, edges[i], backs[i], climbs[i]
        end = n
        for q in range(start + 1, n):
            # Back within one noise SD of the trend, and staying there: the point, the
            # median of the window from it, and no point of the window abnormal again.
            level = back + climb * min(q - start, k * b)
            window = range(q, min(n, q + 2 * max_gap + 1))
            if (
                v[q] <= level
                and statistics.median(v[p] for p in window) <= level
                and all(v[p] <= edge + climb * min(p - start, k * b) for p in window)
            ):
                end = q
                break
        peak = start
        for p in range(start, min(end + 1, n)):
            if v[p] > v[peak]:
                peak = p
        found.append(
            Spike(
                start=points[start][0],
                peak=points[peak][0],
                peak_value=v[peak],
                end=points[end][0] if end < n else int(steps[-1]),
                magnitude=v[peak] / baselines[start] if baselines[start] > 0 else math.inf,
                baseline=baselines[start],
                recovered=end < n,
            )
        )
        i = end + 1
    return found


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
