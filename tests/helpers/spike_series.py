"""Long series the spike finder must answer quickly and exactly: a float32 sawtooth with two
spikes, noisy random walks with spikes of several shapes, and the llm.c log's metrics."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from normwatch.client.importers.llmc import parse_llmc

from .training_logs import LLMC_LOG

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def sawtooth(n: int = 50_001, period: int = 8) -> tuple[IntArray, FloatArray]:
    """``1 + (step % period) / 16`` (exact in float32) with spikes of 37.5 and 52.25 at 60 %
    and 82 % of the run (steps 29,988 and 41,134 of 50,001): σ reads 0, so every tooth's top
    is a spike of its own."""
    steps = np.arange(n, dtype=np.int64)
    values = (1 + (steps % period) / 16).astype(np.float32).astype(np.float64)
    values[n * 29_988 // 50_001] = 37.5
    values[n * 41_134 // 50_001] = 52.25
    return steps, values


def spiky_walk(n: int, seed: int) -> tuple[IntArray, FloatArray]:
    """A random walk around 10 (odd seeds: 1, where the noise passes 5 % of the level) with
    Gaussian noise on top, and one spike in every 2,000 steps or so: one-step blips, short
    bursts and slow decays of 1.2-6x; every fourth seed's walk is shifted below zero."""
    rng = np.random.default_rng(seed)
    level = (10 if seed % 2 == 0 else 1) + np.cumsum(rng.normal(0, 0.01, n))
    values = level + rng.normal(0, 0.05 * (1 + seed % 3), n)
    for at in rng.choice(n, size=max(1, n // 2_000), replace=False).tolist():
        length = int(rng.choice([1, 3, 40, 400]))
        factor = float(rng.uniform(1.2, 6.0))
        shape = np.exp(-np.arange(min(length, n - at)) / max(1, length / 4))
        values[at : at + len(shape)] += (factor - 1) * abs(level[at]) * shape
    if seed % 4 == 3:
        values -= 20.0
    return np.arange(n, dtype=np.int64) * (1 + seed % 2), values


def llmc_series() -> Iterator[tuple[str, IntArray, FloatArray]]:
    """Each metric of the llm.c log shipped with the package, in step order."""
    points: dict[str, dict[int, float]] = {}
    for step, metrics in parse_llmc(LLMC_LOG):
        for name, value in metrics.items():
            points.setdefault(name, {})[step] = value
    for name, by_step in sorted(points.items()):
        steps = sorted(by_step)
        yield (
            name,
            np.array(steps, dtype=np.int64),
            np.array([by_step[s] for s in steps], dtype=np.float64),
        )
