"""M4 selection against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from normwatch.server.storage.m4 import m4_select


def reference(
    steps: np.ndarray, values: np.ndarray, buckets: int, start: int, end: int
) -> set[int]:
    span = end - start + 1
    keep: set[int] = set()
    for b in range(buckets):
        idx = [
            i
            for i, s in enumerate(steps)
            if min(int((s - start) * buckets / span), buckets - 1) == b
        ]
        if not idx:
            continue
        keep |= {idx[0], idx[-1]}
        finite = [i for i in idx if not np.isnan(values[i])]
        if finite:
            keep.add(min(finite, key=lambda i: (values[i], i)))
            keep.add(max(finite, key=lambda i: (values[i], -i)))
        nans = [i for i in idx if np.isnan(values[i])]
        if nans:
            keep.add(nans[0])
    return keep


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("buckets", [1, 3, 17, 100])
def test_matches_reference(seed: int, buckets: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 600))
    steps = np.sort(rng.choice(5000, size=n, replace=False)).astype(np.int64)
    values = rng.normal(size=n).round(1)  # rounding makes ties, which must pick the first
    values[rng.random(n) < 0.05] = np.nan
    values[rng.random(n) < 0.02] = np.inf
    values[rng.random(n) < 0.02] = -np.inf
    start, end = int(steps[0]), int(steps[-1])
    got = m4_select(steps, values, buckets, start, end)
    assert got.tolist() == sorted(reference(steps, values, buckets, start, end))


def test_one_step_spike_survives_any_bucket_count() -> None:
    steps = np.arange(1_000_000, dtype=np.int64)
    values = np.full(len(steps), 0.3)
    values[777_777] = 9.0
    for buckets in (1, 10, 1000, 5000):
        got = m4_select(steps, values, buckets, 0, len(steps) - 1)
        assert 777_777 in got
        assert len(got) <= 4 * buckets


def test_rejects_zero_buckets() -> None:
    with pytest.raises(ValueError, match="buckets"):
        m4_select(np.arange(3, dtype=np.int64), np.zeros(3), 0, 0, 2)
