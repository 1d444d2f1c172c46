"""Transitions: fits against numpy's least squares, detection on generated runs.

The generated run is phenomenon 1 of the domain notes: a parameter norm climbing the concave
curve ``78 + 264 (1 - exp(-t/81k)) / (1 - exp(-1))`` (slope ≈1.9 per 1k steps at 81k), with
noise, whose slope becomes 2.5x steeper at step 81,000 and stays so to step 120,000.
"""

from __future__ import annotations

import doctest
import json
import math
import tracemalloc
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from normwatch.server.analytics import binned, changepoints, summary
from normwatch.server.analytics import transitions as transitions_module
from normwatch.server.analytics.transitions import (
    Fit,
    default_window,
    detect_change_points,
    fit_transition,
    transitions,
)

EVENT = 81_000
RUN_STEPS = 120_000
GROWTH = 264.0 / (1.0 - math.exp(-1.0))

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def concave(t: FloatArray) -> FloatArray:
    result: FloatArray = 78.0 + GROWTH * -np.expm1(-t / 81_000.0)
    return result


def param_norm_run(
    seed: int = 0, noise: float = 0.5, gain: float = 2.5
) -> tuple[IntArray, FloatArray]:
    """Steps 0..119,999; after ``EVENT`` the norm grows on a line ``gain`` x as steep as the
    curve was there."""
    steps = np.arange(RUN_STEPS, dtype=np.int64)
    t = steps.astype(np.float64)
    slope_at_event = GROWTH * math.exp(-EVENT / 81_000.0) / 81_000.0
    at_event = float(concave(np.array([float(EVENT)]))[0])
    trend = np.where(t < EVENT, concave(t), at_event + gain * slope_at_event * (t - EVENT))
    values: FloatArray = trend + noise * np.random.default_rng(seed).normal(size=len(t))
    return steps, values


def line_with_noise(n: int, noise: float, seed: int) -> tuple[IntArray, FloatArray]:
    rng = np.random.default_rng(seed)
    steps = 10**9 + 3 * np.arange(n, dtype=np.int64)
    values: FloatArray = 5.0 + 0.002 * np.arange(n) + noise * rng.normal(size=n)
    return steps, values


def reference_line(steps: IntArray, values: FloatArray, at: int) -> tuple[float, float, float]:
    """(slope per 1k steps, value at ``at``, slope's standard error per 1k) by numpy."""
    keep = np.isfinite(values)
    x = (steps[keep] - at).astype(np.float64)
    design = np.column_stack([np.ones_like(x), x])
    (level, slope), *_ = np.linalg.lstsq(design, values[keep], rcond=None)
    if len(x) > 2:
        _, cov = np.polyfit(x, values[keep], 1, cov=True)
        stderr = math.sqrt(cov[0, 0])
    else:
        stderr = 0.0
    return 1000.0 * slope, level, 1000.0 * stderr


def reference_level(steps: IntArray, values: FloatArray, at: int, window: int) -> float:
    """A side's level by scipy: the Theil–Sen line (``theilslopes``, intercept as the median
    of ``y - slope · x``) at ``at``, through the side's finite points nearest ``at``: those
    within an eighth of the window, at least 16 and at most 128 (`analytics.levels`)."""
    keep = np.isfinite(values)
    s, v = steps[keep], values[keep]
    distance = np.abs(s - at)
    count = min(len(s), max(int(np.sum(distance <= window / 8)), 16), 128)
    chosen = np.argsort(distance, kind="stable")[:count]
    x = (s[chosen] - at).astype(np.float64)
    if count == 1:
        return float(v[chosen][0])
    return float(stats.theilslopes(v[chosen], x, method="joint").intercept)


# -- phenomenon 1 ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_fit_at_the_event_reports_the_steepening(seed: int) -> None:
    steps, values = param_norm_run(seed)
    fit = fit_transition(steps, values, at=EVENT, window=default_window(steps, values))
    assert fit is not None
    assert fit.ratio is not None
    assert fit.ratio == pytest.approx(2.5, rel=0.10)
    assert fit.slope_after == pytest.approx(2.5 * 1.897, rel=0.01)
    assert fit.level_after - fit.level_before == pytest.approx(0.0, abs=0.1)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("noise", [0.0, 0.5, 2.0])
def test_detection_finds_the_steepening_without_the_event(seed: int, noise: float) -> None:
    steps, values = param_norm_run(seed, noise)
    points = detect_change_points(steps, values)
    assert len(points) == 1
    assert abs(points[0].step - EVENT) <= 1500


def test_transitions_merge_the_detected_change_into_the_event() -> None:
    steps, values = param_norm_run()
    rows = transitions(steps, values, [(EVENT, "near-dropless EP routing")])
    assert len(rows) == 1
    (row,) = rows
    assert (row.step, row.source, row.label) == (EVENT, "event", "near-dropless EP routing")
    assert row.detected_step is not None and abs(row.detected_step - EVENT) <= 1500
    assert row.score is not None and row.score > 40
    assert row.fit is not None and row.fit.ratio == pytest.approx(2.5, rel=0.10)


def test_transitions_without_events_list_the_detected_change() -> None:
    steps, values = param_norm_run()
    (row,) = transitions(steps, values, [])
    assert row.source == "detected"
    assert abs(row.step - EVENT) <= 1500
    assert row.fit is not None and row.fit.at == row.step
    assert row.fit.slope_after / row.fit.slope_before == pytest.approx(2.5, rel=0.10)


def test_simulated_run_final_norm_steepens_at_its_event() -> None:
    from normwatch.simulate import SimulatedRun

    run = SimulatedRun(seed=0)
    steps, metrics = run.block(0, 120_000, layer_every=10)
    gain = metrics["params/norm/final_norm.weight"]
    fit = fit_transition(steps, gain, at=run.event_step, window=6000)
    assert fit is not None and fit.ratio is not None and fit.ratio > 2.0
    points = detect_change_points(steps, gain)
    assert any(abs(p.step - run.event_step) <= 1500 for p in points)


# -- no false changes -----------------------------------------------------------------------


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000, 1_000_000])
@pytest.mark.parametrize("noise", [1e-3, 1.0, 100.0])
@pytest.mark.parametrize("seed", range(3))
def test_straight_line_with_noise_has_no_change(n: int, noise: float, seed: int) -> None:
    steps, values = line_with_noise(n, noise, seed)
    assert detect_change_points(steps, values) == []


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["student-t", "log-normal", "gaps-and-nan"])
def test_rougher_noise_has_no_change(seed: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    steps = np.arange(50_000, dtype=np.int64)
    t = steps.astype(np.float64)
    if kind == "student-t":
        values = 1.0 + 1e-4 * t + 0.1 * rng.standard_t(3, size=len(t))
    elif kind == "log-normal":
        values = np.exp(-1.0 + 1e-5 * t + 0.3 * rng.normal(size=len(t)))
    else:
        keep = rng.random(len(t)) > 0.4
        steps, t = steps[keep], t[keep]
        values = 2.0 - 1e-5 * t + rng.normal(size=len(t))
        values[rng.random(len(t)) < 0.05] = np.nan
    assert detect_change_points(steps, values) == []


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("noise", [0.0, 1e-3, 0.1, 0.5, 2.0])
def test_smooth_concave_growth_has_no_change(seed: int, noise: float) -> None:
    # Its slope falls 2.7x over the span, but gradually: a cubic follows it in any window.
    steps = np.arange(80_001, dtype=np.int64)
    values = concave(steps.astype(np.float64))
    values = values + noise * np.random.default_rng(seed).normal(size=len(steps))
    assert detect_change_points(steps, values) == []


def test_one_step_spikes_are_not_changes() -> None:
    rng = np.random.default_rng(7)
    steps = np.arange(120_000, dtype=np.int64)
    values = 1.0 + 1e-5 * steps + 0.05 * rng.normal(size=len(steps))
    for at in rng.integers(0, len(steps) - 3, size=8):
        values[at : at + 3] *= 3.0
    assert detect_change_points(steps, values) == []


# -- level jumps ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "every", "jump_at"),
    [(2_000, 1, 1_234), (50_000, 1, 31_337), (20_000, 10, 123_450), (1_000_000, 1, 654_321)],
)
def test_level_jump_is_found_at_its_step(n: int, every: int, jump_at: int) -> None:
    rng = np.random.default_rng(1)
    steps = every * np.arange(n, dtype=np.int64)
    values = 3.0 + 1e-6 * steps + 4.0 * (steps >= jump_at) + rng.normal(size=n)
    (point,) = detect_change_points(steps, values)
    assert point.step == jump_at


def test_several_changes_are_found_strongest_first() -> None:
    steps = np.arange(100_000, dtype=np.int64)
    t = steps.astype(np.float64)
    values = np.interp(t, [0, 20_000, 50_000, 100_000], [0, 0, 30, 30]) + 5.0 * (t >= 75_000)
    values += np.random.default_rng(0).normal(size=len(t))
    points = detect_change_points(steps, values)
    assert [p.score for p in points] == sorted((p.score for p in points), reverse=True)
    assert sorted(p.step for p in points) == pytest.approx([20_000, 50_000, 75_000], abs=300)
    assert detect_change_points(steps, values, max_points=1) == points[:1]


# -- the fit against numpy --------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("offset", [0, 77_096, 10**9, 2**52])
def test_fit_matches_numpy_least_squares(seed: int, offset: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([3, 10, 500, 20_000]))
    gaps = rng.choice([1, 1, 2, 10, 997], size=n)
    steps = offset + np.cumsum(gaps).astype(np.int64)
    values = rng.normal(size=n) * 10.0 ** rng.integers(-3, 4) + 1e-3 * (steps - offset)
    values[rng.random(n) < 0.1] = np.nan
    values[rng.random(n) < 0.02] = np.inf
    at = int(steps[n // 2] + rng.integers(-2, 3))
    window = int(rng.integers(1, int(steps[-1] - steps[0]) + 2))

    fit = fit_transition(steps, values, at, window)
    before = (steps >= at - window) & (steps < at) & np.isfinite(values)
    after = (steps >= at) & (steps <= at + window) & np.isfinite(values)
    if before.sum() < 2 or after.sum() < 2:
        assert fit is None
        return
    assert fit is not None
    sides = [
        (before, fit.slope_before, fit.slope_before_stderr, fit.n_before, fit.before_segment),
        (after, fit.slope_after, fit.slope_after_stderr, fit.n_after, fit.after_segment),
    ]
    for mask, slope, stderr, count, segment in sides:
        ref_slope, ref_level, ref_stderr = reference_line(steps[mask], values[mask], at)
        scale = float(np.nanmax(np.abs(values[mask])))
        assert count == mask.sum()
        assert slope == pytest.approx(ref_slope, rel=1e-9, abs=1e-12 * scale)
        assert stderr == pytest.approx(ref_stderr, rel=1e-7, abs=1e-12 * scale)
        # The drawn line is that line, from the side's first point to its last.
        assert [step for step, _ in segment] == [steps[mask][0], steps[mask][-1]]
        for step, value in segment:
            line = ref_level + ref_slope / 1000.0 * (step - at)
            assert value == pytest.approx(line, rel=1e-9, abs=1e-9 * scale)
    # The levels are no line's: each side's own, near the step (`reference_level`).
    for mask, level in [(before, fit.level_before), (after, fit.level_after)]:
        scale = float(np.nanmax(np.abs(values[mask])))
        expected = reference_level(steps[mask], values[mask], at, window)
        assert level == pytest.approx(expected, rel=1e-9, abs=1e-9 * scale)


def test_fit_segments_lie_on_the_lines_and_span_the_points() -> None:
    steps = np.array([10, 20, 30, 40, 50, 60], dtype=np.int64)
    values = np.array([1.0, 2.0, math.nan, 9.0, 12.0, 15.0])
    fit = fit_transition(steps, values, at=35, window=30)
    assert fit is not None
    # Each line spans the points it was fitted on: the one after starts at step 40, where
    # its data starts, not back at the step over the gap (the NaN at 30 is no point).
    (first, first_value), (end, end_value) = fit.before_segment
    assert (first, end) == (10, 20)
    assert first_value == pytest.approx(1.0) and end_value == pytest.approx(2.0)
    (start, start_value), (last, last_value) = fit.after_segment
    assert (start, last) == (40, 60)
    assert start_value == pytest.approx(9.0) and last_value == pytest.approx(15.0)
    # The levels either side are the points' own lines at the step (two and three points).
    assert fit.level_before == pytest.approx(3.5) and fit.level_after == pytest.approx(7.5)
    assert fit.slope_before == pytest.approx(100.0) and fit.slope_after == pytest.approx(300.0)
    assert (fit.n_before, fit.n_after) == (2, 3)


def test_window_edges_are_half_open_before_and_closed_after() -> None:
    steps = np.arange(0, 11, dtype=np.int64)
    values = steps.astype(np.float64) ** 2
    fit = fit_transition(steps, values, at=5, window=5)
    assert fit is not None
    assert (fit.n_before, fit.n_after) == (5, 6)  # steps 0-4, then 5-10


def test_ratio_is_none_when_the_slope_before_is_flat() -> None:
    steps = np.arange(100, dtype=np.int64)
    values = np.where(steps < 50, 4.0, 4.0 + 0.1 * (steps - 50))
    fit = fit_transition(steps, values, at=50, window=50)
    assert fit is not None
    assert fit.slope_before == 0.0 and fit.ratio is None
    assert math.isfinite(fit.slope_change) and fit.slope_change > 10
    # Noise whose own slope is far below its standard error: still no ratio.
    noisy = values + np.where(steps % 2 == 0, 0.5, -0.5)
    noisy_fit = fit_transition(steps, noisy, at=50, window=50)
    assert noisy_fit is not None and noisy_fit.slope_before != 0.0
    assert abs(noisy_fit.slope_before) < noisy_fit.slope_before_stderr
    assert noisy_fit.ratio is None


def test_slope_change_is_symmetric_and_finite_through_zero() -> None:
    def fit(before: float, after: float, stderr: float = 0.01) -> Fit:
        segment = ((0, 0.0), (0, 0.0))
        return Fit(0, 1, before, after, stderr, stderr, None, 0, 0, 10, 10, segment, segment)

    assert fit(2.0, 5.0).slope_change == pytest.approx(math.log(2.5), rel=1e-4)
    assert fit(5.0, 2.0).slope_change == pytest.approx(fit(2.0, 5.0).slope_change)
    assert fit(-2.0, 2.0).slope_change > fit(2.0, 5.0).slope_change
    assert fit(0.001, 0.002).slope_change < 0.2  # both within their noise of flat
    assert fit(0.0, 0.0, stderr=0.0).slope_change == 0.0


def test_fit_to_dict_is_strict_json() -> None:
    steps, values = param_norm_run()
    fit = fit_transition(steps, values, EVENT, 6000)
    assert fit is not None
    doc = json.loads(json.dumps(fit.to_dict(), allow_nan=False))
    assert set(doc) >= {"slope_before", "slope_after", "ratio", "level_before", "level_after"}
    (row,) = transitions(steps, values, [(EVENT, "change")])
    json.dumps(row.to_dict(), allow_nan=False)


# -- orchestration --------------------------------------------------------------------------


def test_transitions_rank_by_slope_change_and_keep_every_event() -> None:
    steps, values = param_norm_run()
    events = [(40_000, "nothing happens"), (EVENT, "steeper"), (500_000, "after the data")]
    rows = transitions(steps, values, events, detect=False)
    assert [row.label for row in rows] == ["steeper", "nothing happens", "after the data"]
    assert rows[-1].fit is None and rows[-1].slope_change is None
    assert rows[0].score is None and rows[0].detected_step is None


def test_detected_change_away_from_any_event_is_its_own_row() -> None:
    steps, values = param_norm_run()
    rows = transitions(steps, values, [(EVENT + 5_000, "later")], window=6000)
    assert [row.source for row in rows] == ["detected", "event"]
    assert rows[1].detected_step is None


def test_default_window_is_a_twentieth_of_the_finite_span() -> None:
    steps = np.arange(1000, 121_000, dtype=np.int64)
    values = np.ones(len(steps))
    values[:1000] = np.nan
    assert default_window(steps, values) == 118_999 // 20


# -- degenerate inputs and wrong arguments ----------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "values"),
    [
        ([], []),
        ([5], [1.0]),
        ([1, 2, 3], [math.nan] * 3),
        (list(range(1000)), [7.0] * 1000),
        (list(range(1000)), [0.1] * 1000),
        (list(range(1000)), [math.inf] * 500 + [2.0] * 500),
        (list(range(1000)), [1.7e308, -1.7e308] * 500),
    ],
)
def test_degenerate_series_do_not_raise(steps: list[int], values: list[float]) -> None:
    assert detect_change_points(steps, values) == []
    fit = fit_transition(steps, values, at=500, window=100)
    if fit is not None:
        assert fit.slope_before == 0.0 and fit.slope_after == 0.0 and fit.ratio is None
    rows = transitions(steps, values, [(500, "event")])
    assert [row.source for row in rows] == ["event"]
    assert default_window(steps, values) >= 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fit_transition([1, 2], [1.0, 2.0], at=1, window=0), "window must be a positive"),
        (lambda: fit_transition([1, 2], [1.0], at=1, window=5), "equal lengths"),
        (lambda: fit_transition([1, 3, 2], [1.0] * 3, at=1, window=5), "strictly ascending"),
        (lambda: fit_transition([1, 1, 2], [1.0] * 3, at=1, window=5), "strictly ascending"),
        (lambda: fit_transition([1.5, 2.0], [1.0] * 2, at=1, window=5), "integers"),
        (lambda: fit_transition([1e19, 2e19], [1.0] * 2, at=1, window=5), "within int64"),
        (lambda: fit_transition([[1, 2]], [[1.0, 2.0]], at=1, window=5), "one-dimensional"),
        (lambda: fit_transition([1, 2], [1.0] * 2, at=2**63, window=5), "int64"),
        (lambda: detect_change_points([1, 2], [1.0] * 2, window=-3), "window must be a positive"),
        (lambda: detect_change_points([1, 2], [1.0] * 2, max_points=-1), "max_points"),
        (lambda: detect_change_points([1, 2], [1.0] * 2, penalty=math.nan), "penalty"),
        (lambda: detect_change_points([2, 1], [1.0] * 2), "strictly ascending"),
        (lambda: detect_change_points([-(2**63), 2**63 - 1], [1.0] * 2), "span at most"),
        (lambda: transitions([1, 2], [1.0] * 2, [], window=0), "window must be a positive"),
        (lambda: transitions([1, 2], [1.0] * 2, [], merge_distance=-1), "merge_distance"),
    ],
)
def test_wrong_arguments_say_what_to_pass(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def weighted_rss(u: FloatArray, y: FloatArray, weight: FloatArray, degree: int) -> FloatArray:
    """Residual sum of squares and coefficients (constant first) of the weighted
    least-squares polynomial, by `np.linalg.lstsq`."""
    design = u[:, np.newaxis] ** np.arange(degree + 1)
    root = np.sqrt(weight)
    coefficients = np.linalg.lstsq(design * root[:, np.newaxis], y * root, rcond=None)[0]
    residual = y - design @ coefficients
    return np.array([float(np.sum(weight * residual**2)), *coefficients])


@pytest.mark.parametrize("half", [8, 20, 40, 61, 85])
def test_the_scan_matches_least_squares_at_every_boundary_for_any_window(half: int) -> None:
    """Windows past the series (``half`` > its 40 bins) use only the bins it has, and score
    what plain weighted least squares on those bins gives."""
    rng = np.random.default_rng(half)
    n = 40
    counts = rng.integers(0, 4, n).astype(np.float64)
    level = np.where(counts > 0, 0.1 * np.arange(n) + rng.standard_normal(n), 0.0)
    gain, relative = binned.scan(counts, level, half)
    assert gain.shape == relative.shape == (n + 1,)
    least = binned.least_bins(half)
    bins = np.arange(n)
    judged = 0
    for boundary in range(n + 1):
        inside = (bins >= boundary - half) & (bins < boundary + half) & (counts > 0)
        left, right = inside & (bins < boundary), inside & (bins >= boundary)
        if left.sum() < least or right.sum() < least:
            assert gain[boundary] == -np.inf
            continue
        judged += 1
        u = (bins - boundary + 0.5) / half
        rss_left, level_left, slope_left = weighted_rss(u[left], level[left], counts[left], 1)
        rss_right, level_right, slope_right = weighted_rss(u[right], level[right], counts[right], 1)
        cubic = weighted_rss(u[inside], level[inside], counts[inside], 3)[0]
        scale = float(np.sum(counts * level**2))
        assert gain[boundary] == pytest.approx(cubic - rss_left - rss_right, abs=1e-9 * scale)
        change = abs(level_right - level_left) + abs(slope_right - slope_left)
        trend = max(abs(slope_left), abs(slope_right))
        assert relative[boundary] == pytest.approx(change / trend, rel=1e-7)
    assert judged > 0 or half > 2 * n


def test_a_window_wider_than_the_series_allocates_what_the_series_has() -> None:
    """A detection window past a 2,000-point series judges nothing (no boundary has a
    quarter window of bins on each side) and costs what the points do, however wide."""
    steps = np.arange(2000, dtype=np.int64)
    values = 1.0 + 0.002 * steps + 0.003 * np.maximum(steps - 1200, 0)
    for window in (10**6, 2**40, 2**63 - 1):
        tracemalloc.start()
        try:
            assert detect_change_points(steps, values, window=window) == []
            rows = transitions(steps, values, [(1200, "lr")], window=window)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        [row] = rows
        assert row.fit is not None and (row.fit.n_before, row.fit.n_after) == (1200, 800)
        assert peak < 2**20


def test_the_module_examples_hold() -> None:
    for module in (transitions_module, changepoints, summary):
        assert doctest.testmod(module).failed == 0, module.__name__
