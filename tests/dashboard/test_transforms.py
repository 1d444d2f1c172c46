"""The chart's transforms against independent references: TensorBoard's smoothing on evenly
spaced points, the same window on points read sparser, normalizing, another x axis, a
y range that leaves the extremes out, and the mean of several lines with its band."""

from __future__ import annotations

import math

import numpy as np
import pytest

from normwatch.dashboard.transforms import ema, interpolate_x, mean_band, normalize, outlier_range


def tensorboard_smoothing(values: list[float], weight: float) -> list[float]:
    """TensorBoard's scalar smoothing, written out as its frontend does it."""
    out, last, n = [], 0.0, 0
    for v in values:
        n += 1
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.6, 0.9, 0.99])
def test_ema_on_evenly_spaced_points_is_tensorboards_smoothing(weight: float) -> None:
    values = np.random.default_rng(1).lognormal(size=500).tolist()
    got = ema(list(range(0, 5000, 10)), values, weight)
    np.testing.assert_allclose(got, tensorboard_smoothing(values, weight), rtol=1e-12)


def test_ema_weighs_a_gap_as_the_steps_it_spans() -> None:
    """A step from 0 to 1 at step 500, read at every step, and read at every step before
    it but every fourth after (as M4 thins a line): the smoothed line crosses 0.5 at about
    the same step, where weighing by points would take it four times as long."""
    dense_steps = list(range(1000))
    dense = ema(dense_steps, [0.0] * 500 + [1.0] * 500, 0.95)
    sparse_steps = list(range(500)) + list(range(500, 1000, 4))
    sparse = ema(sparse_steps, [0.0] * 500 + [1.0] * 125, 0.95)

    def crossing(steps: list[int], smoothed: np.ndarray) -> int:
        return next(s for s, v in zip(steps, smoothed, strict=True) if v >= 0.5)

    assert crossing(dense_steps, dense) == 513  # 0.95**n = 1/2 at n = 13.5 points of 1.0
    assert abs(crossing(sparse_steps, sparse) - 513) <= 4


def test_ema_keeps_gaps_and_skips_them() -> None:
    got = ema([0, 1, 2, 3], [2.0, math.inf, math.nan, 2.0], 0.5)
    assert got[0] == 2.0 and got[1] == math.inf and math.isnan(got[2]) and got[3] == 2.0


def test_normalize_by_start_and_by_median() -> None:
    assert normalize([0.0, -4.0, 8.0], "start").tolist() == [0.0, -1.0, 2.0]
    assert normalize([1.0, 3.0, 2.0, math.nan], "median")[:3].tolist() == [0.5, 1.5, 1.0]
    assert normalize([math.nan], "start") is None
    # The median is the default: a warm-up's first values set no scale.
    assert normalize([10.0, 1.0, 2.0, 1.0, -1.0]).tolist() == [10.0, 1.0, 2.0, 1.0, -1.0]
    assert normalize([-4.0, -2.0, math.nan, -1.0])[[0, 1, 3]].tolist() == [-2.0, -1.0, -0.5]
    with pytest.raises(ValueError, match="normalize mode"):
        normalize([1.0], "max")


def test_interpolate_x_through_a_counter_that_went_back() -> None:
    # A tokens counter restarted lower at step 20 is held at its maximum.
    got = interpolate_x([0, 15, 25, 40], [0, 10, 20, 30], [0.0, 100.0, 50.0, 300.0])
    assert got.tolist()[:3] == [0.0, 100.0, 200.0] and math.isnan(got[3])


def test_outlier_range_ignores_a_spike_and_reads_log_axes_in_decades() -> None:
    values = [1.0] * 98 + [1000.0, 2.0]
    low, high = outlier_range([values])  # type: ignore[misc]
    assert high < 10 and low < 1.0
    log_low, log_high = outlier_range([[0.01, 0.1, 1.0, 10.0, 100.0] * 20], log=True)  # type: ignore[misc]
    assert (round(log_low, 6), round(log_high, 6)) == (-2.4, 2.4)
    assert outlier_range([[math.nan]]) is None


def mean_band_reference(
    lines: list[tuple[list[int], list[float]]],
) -> list[tuple[int, float, float, float, int]]:
    """At each step any line logged a finite value: the lines that span it (linear between
    their two nearest finite points, exact at their own), their mean, least, greatest and
    count, written out point by point."""
    finite = [[(s, v) for s, v in zip(xs, ys, strict=True) if math.isfinite(v)] for xs, ys in lines]
    grid = sorted({s for points in finite for s, _ in points})
    out = []
    for step in grid:
        at = []
        for points in finite:
            before = [(s, v) for s, v in points if s <= step]
            after = [(s, v) for s, v in points if s >= step]
            if before and after:
                (s0, v0), (s1, v1) = before[-1], after[0]
                at.append(v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0))
        out.append((step, sum(at) / len(at), min(at), max(at), len(at)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("runs", [1, 3, 8])
def test_mean_band_against_a_point_by_point_reference(seed: int, runs: int) -> None:
    """Seeds downsampled apart: each line logs a random subset of its own span of steps,
    with a NaN now and then."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(runs):
        first, last = sorted(rng.integers(0, 500, size=2).tolist())
        steps = sorted({first, last, *rng.integers(first, last + 1, size=40).tolist()})
        values = rng.lognormal(size=len(steps))
        values[rng.random(len(steps)) < 0.05] = math.nan
        lines.append((steps, values.tolist()))
    steps, mean, low, high, count = mean_band(lines)
    want = mean_band_reference(lines)
    assert steps.tolist() == [w[0] for w in want]
    assert count.tolist() == [w[4] for w in want]
    np.testing.assert_allclose(mean, [w[1] for w in want], rtol=1e-12)
    np.testing.assert_allclose(low, [w[2] for w in want], rtol=1e-12)
    np.testing.assert_allclose(high, [w[3] for w in want], rtol=1e-12)


def test_mean_band_of_lines_logged_at_the_same_steps_is_their_plain_mean() -> None:
    steps, mean, low, high, count = mean_band(
        [([0, 1, 2], [1.0, 2.0, 3.0]), ([0, 1, 2], [3.0, 2.0, 7.0]), ([0, 1, 2], [2.0, 5.0, 2.0])]
    )
    assert steps.tolist() == [0, 1, 2]
    assert mean.tolist() == [2.0, 3.0, 4.0]
    assert (low.tolist(), high.tolist(), count.tolist()) == ([1, 2, 2], [3, 5, 7], [3, 3, 3])


def test_mean_band_thins_a_long_grid_evenly_and_keeps_its_ends() -> None:
    steps, mean, *_ = mean_band([(list(range(0, 10_001, 2)), [1.0] * 5001)], points=11)
    assert steps.tolist() == list(range(0, 10_001, 1000))
    assert mean.tolist() == [1.0] * 11


def test_mean_band_of_nothing_and_of_no_finite_value() -> None:
    for lines in ([], [([], [])], [([0, 1], [math.nan, math.inf])]):
        steps, mean, low, high, count = mean_band(lines)
        assert [len(a) for a in (steps, mean, low, high, count)] == [0] * 5
    with pytest.raises(ValueError, match="at least 2 points"):
        mean_band([([0], [1.0])], points=1)
