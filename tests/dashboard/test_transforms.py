"""The chart's transforms against independent references: TensorBoard's smoothing on evenly
spaced points, the same window on points read sparser, normalizing, another x axis, a
y range that leaves the extremes out, and the mean of several lines with its band."""

from __future__ import annotations

import math

import numpy as np
import pytest

from normwatch.dashboard.transforms import (
    bucket_firsts,
    ema,
    interpolate_x,
    mean_band,
    normalize,
    outlier_range,
)
from normwatch.server.storage.m4 import bucket_of


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
    lines: list[tuple[list[int], list[float]]], start: int, end: int, buckets: int
) -> list[tuple[int, float, float, float, int]]:
    """Bucket by bucket, written out step by step: each line counts between its first and
    last finite point, drawn straight between them; its low and high are the least and
    greatest it reaches at any step of the bucket, its value the mean of its points there
    (its line at the bucket's middle when it has none). Then the mean, least low, greatest
    high and count of the lines that count."""
    span = end - start + 1
    n = min(buckets, span)
    firsts = [start + math.ceil(k * span / n) for k in range(n)]
    lasts = [f - 1 for f in firsts[1:]] + [end]
    finite = [
        sorted((s, v) for s, v in zip(xs, ys, strict=True) if math.isfinite(v)) for xs, ys in lines
    ]

    def at(points: list[tuple[int, float]], step: float) -> float:
        (s0, v0) = max((p for p in points if p[0] <= step), default=points[0])
        (s1, v1) = min((p for p in points if p[0] >= step), default=points[-1])
        return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)

    out = []
    for first, last in zip(firsts, lasts, strict=True):
        values, lows, highs = [], [], []
        for points in finite:
            if not points or points[-1][0] < first or points[0][0] > last:
                continue
            lo, hi = max(first, points[0][0]), min(last, points[-1][0])
            reached = [at(points, s) for s in range(lo, hi + 1)]
            inside = [v for s, v in points if first <= s <= last]
            lows.append(min(reached))
            highs.append(max(reached))
            values.append(sum(inside) / len(inside) if inside else at(points, (first + last) / 2))
        if values:
            out.append((first, sum(values) / len(values), min(lows), max(highs), len(values)))
        else:
            out.append((first, math.nan, math.nan, math.nan, 0))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("runs", [1, 3, 8])
@pytest.mark.parametrize("buckets", [7, 60, 1000])
def test_mean_band_against_a_step_by_step_reference(seed: int, runs: int, buckets: int) -> None:
    """Seeds downsampled apart: each line logs a random subset of its own span of steps,
    with a NaN now and then; buckets wider than a step, and one a step."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(runs):
        first, last = sorted(rng.integers(0, 500, size=2).tolist())
        steps = sorted({first, last, *rng.integers(first, last + 1, size=40).tolist()})
        values = rng.lognormal(size=len(steps))
        values[rng.random(len(steps)) < 0.05] = math.nan
        lines.append((steps, values.tolist()))
    band = mean_band(lines, start=0, end=499, buckets=buckets)
    want = mean_band_reference(lines, 0, 499, buckets)
    assert band.steps.tolist() == [w[0] for w in want]
    assert band.last == 499
    assert band.count.tolist() == [w[4] for w in want]
    np.testing.assert_allclose(band.mean, [w[1] for w in want], rtol=1e-12)
    np.testing.assert_allclose(band.low, [w[2] for w in want], rtol=1e-12)
    np.testing.assert_allclose(band.high, [w[3] for w in want], rtol=1e-12)


def test_every_point_of_every_line_lies_within_the_band_at_its_step() -> None:
    rng = np.random.default_rng(7)
    lines = []
    for _ in range(4):
        steps = np.unique(rng.integers(0, 100_000, size=3000))
        values = rng.lognormal(size=len(steps))
        values[rng.integers(0, len(steps), size=5)] = rng.uniform(50, 500, size=5)  # spikes
        lines.append((steps.tolist(), values.tolist()))
    band = mean_band(lines, start=0, end=99_999, buckets=1000)
    for steps, values in lines:
        bucket = np.searchsorted(band.steps, steps, side="right") - 1
        assert (band.low[bucket] <= values).all() and (
            np.asarray(values) <= band.high[bucket]
        ).all()
    assert band.high.max() == max(max(v) for _, v in lines)


def test_mean_band_of_lines_logged_at_the_same_steps_is_their_plain_mean() -> None:
    band = mean_band(
        [([0, 1, 2], [1.0, 2.0, 3.0]), ([0, 1, 2], [3.0, 2.0, 7.0]), ([0, 1, 2], [2.0, 5.0, 2.0])],
        start=0,
        end=2,
        buckets=1000,
    )
    assert band.steps.tolist() == [0, 1, 2]
    assert band.mean.tolist() == [2.0, 3.0, 4.0]
    assert (band.low.tolist(), band.high.tolist(), band.count.tolist()) == (
        [1, 2, 2],
        [3, 5, 7],
        [3, 3, 3],
    )


def test_a_downsampled_line_counts_by_its_first_and_last_point_in_a_bucket() -> None:
    # M4's points of one bucket: first 1, lowest 0, highest 9, last 3.
    line = ([0, 1, 2, 3], [1.0, 0.0, 9.0, 3.0])
    thin = mean_band([line], start=0, end=3, buckets=1, downsampled=[True])
    whole = mean_band([line], start=0, end=3, buckets=1)
    assert (thin.mean.tolist(), whole.mean.tolist()) == ([2.0], [13.0 / 4])
    assert (thin.low.tolist(), thin.high.tolist()) == ([0.0], [9.0])


def test_bucket_firsts_cut_as_m4_cuts_a_range_into_pixels() -> None:
    steps = np.arange(1_000, 60_001, dtype=np.int64)
    pixels = bucket_of(steps, 37, 1_000, 60_000)
    firsts = bucket_firsts(1_000, 60_000, 37)
    assert firsts == steps[np.flatnonzero(np.r_[True, np.diff(pixels) != 0])].tolist()
    assert bucket_firsts(2**63 - 10, 2**63 - 1, 4) == [2**63 - 10, 2**63 - 7, 2**63 - 5, 2**63 - 2]


def test_mean_band_of_nothing_and_of_no_finite_value() -> None:
    for lines in ([], [([], [])], [([0, 1], [math.nan, math.inf])]):
        band = mean_band(lines, start=0, end=1, buckets=10)
        assert band.steps.tolist() == [0, 1] and band.count.tolist() == [0, 0]
        assert np.isnan(band.mean).all() and np.isnan(band.low).all() and np.isnan(band.high).all()
    with pytest.raises(ValueError, match="at least 1 bucket"):
        mean_band([([0], [1.0])], start=0, end=1, buckets=0)
    with pytest.raises(ValueError, match="below its start"):
        mean_band([([0], [1.0])], start=5, end=1, buckets=10)
