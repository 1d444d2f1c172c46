"""Metric values the tests log: noisy series, and what the fault tests' trainers log."""

from __future__ import annotations

import numpy as np


def noisy(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Steps 0..n-1 and values around 2.0 (normal noise, sd 0.05), the same for a seed."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.int64)
    values = 2.0 + rng.normal(size=n) * 0.05
    return steps, values


TRAINER_METRICS = 8
"""Metrics ``m/0`` to ``m/7``: what the fault tests' trainers log at every step."""


def trainer_value(step: int, index: int) -> float:
    """What the trainers log for metric ``m/<index>`` at ``step``; the same in every process."""
    return step * 0.001 + index


def trainer_points(steps: range) -> dict[tuple[str, int], float]:
    """Every (metric, step) the trainers log over ``steps``, and its value."""
    return {
        (f"m/{i}", step): trainer_value(step, i) for step in steps for i in range(TRAINER_METRICS)
    }
