"""The spike finder's fast recoveries answer exactly what the chunked scan answered: on a
float32 sawtooth whose every tooth is a spike, on noisy random walks with spikes, on the
llm.c log's metrics, and where an excess is not finite."""

from __future__ import annotations

import numpy as np
import pytest

from normwatch.server.analytics.spikes import Spike, find_spikes
from tests.helpers.spike_chunked import chunked_spikes
from tests.helpers.spike_series import llmc_series, sawtooth, spiky_walk

LLMC = {name: (steps, values) for name, steps, values in llmc_series()}


@pytest.mark.parametrize("threshold", [5.25, 4.0, 2.0])
@pytest.mark.parametrize("metric", sorted(LLMC))
def test_llmc_metrics_as_before(metric: str, threshold: float) -> None:
    steps, values = LLMC[metric]
    assert find_spikes(steps, values, threshold=threshold) == chunked_spikes(
        steps, values, threshold=threshold
    )


@pytest.mark.parametrize("threshold", [5.25, 3.0, 2.0])
@pytest.mark.parametrize("seed", range(6))
def test_spiky_walks_as_before(seed: int, threshold: float) -> None:
    steps, values = spiky_walk(20_000, seed)
    found = find_spikes(steps, values, threshold=threshold)
    assert found == chunked_spikes(steps, values, threshold=threshold)
    assert len(found) >= 3


@pytest.mark.parametrize("period", [3, 8, 13])
def test_sawtooth_as_before(period: int) -> None:
    steps, values = sawtooth(5_001, period)
    found = find_spikes(steps, values)
    assert found == chunked_spikes(steps, values)
    assert len(found) == {3: 2, 8: 620, 13: 382}[period]


def test_long_sawtooth_every_tooth() -> None:
    """50,001 steps of ``1 + (step % 8) / 16``: σ reads 0 and each tooth's top is 15 % over
    its baseline, so every tooth is a one-step spike but those the two big spikes take in
    (what the chunked scan found, in a minute)."""
    steps, values = sawtooth()
    regular = [
        Spike(start, start + 1, 1.4375, start + 2, 1.15, 1.25, True, 0.0)
        for start in range(38, 50_001, 8)
        if start not in (29_982, 29_990, 41_134)
    ]
    big = [
        Spike(29_982, 29_988, 37.5, 29_992, 30.0, 1.25, True, 0.0),
        Spike(41_134, 41_134, 52.25, 41_136, 41.8, 1.25, True, 0.0),
    ]
    expected = sorted(regular + big, key=lambda spike: spike.start)
    assert find_spikes(steps, values) == expected
    assert find_spikes(steps, values, threshold=4.0) == expected


def test_non_finite_excess_as_before() -> None:
    """NaN and ±inf are dropped; where a spike's excess overflows (a level near -1.5e308
    and a spike to +1.2e308), the chunked scan judges that spike, as before. (Odd seeds'
    walks log every second step.)"""
    steps, values = spiky_walk(6_000, 1)
    huge = values * 1.5e307
    huge[[700, 2_500, 2_501, 4_000]] = [np.nan, np.inf, -np.inf, np.nan]
    low = -1.5e308 * (1 + 0.001 * np.random.default_rng(0).normal(size=6_000))
    low[[3_000, 4_000, 4_001, 5_000]] = [1.5e308, 1.0e308, 1.2e308, -1.0e308]
    for series in (huge, low):
        for threshold in (5.25, 2.0):
            found = find_spikes(steps, series, threshold=threshold)
            assert found == chunked_spikes(steps, series, threshold=threshold)
    assert len(find_spikes(steps, huge, threshold=2.0)) >= 3
    assert [(s.start, s.peak, s.end) for s in find_spikes(steps, low)] == [
        (6_000, 6_000, 6_002),
        (8_000, 8_002, 8_004),
        (10_000, 10_000, 10_002),
    ]
