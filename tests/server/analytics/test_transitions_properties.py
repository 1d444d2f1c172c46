"""Transitions over generated series: what must not change when the data change in ways
that do not change the question.

Series come from a hypothesis-drawn shape (length, step pattern and offset, trend with or
without a kink or a jump, noise level, NaN/±Inf rates) and a seed for the bulk of the numbers.
Scaling by a power of two and negating are exact in floating point, and so must be their
effect on the fits and the detected changes; adding a constant and other factors are
compared to a tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import hypothesis.strategies as st
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings

from normwatch.server.analytics.transitions import Fit, detect_change_points, fit_transition

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Series:
    steps: IntArray
    values: FloatArray
    change_index: int | None
    """Index of the first point after a built-in kink or jump, if any."""


@st.composite
def series(draw: st.DrawFn, *, special: bool = True) -> Series:
    n = draw(st.integers(0, 20_000) | st.sampled_from([0, 1, 2, 3, 8, 50, 1000]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    offset = draw(st.sampled_from([0, 1, 77_096, 10**9, 2**52]))
    pattern = draw(st.sampled_from(["dense", "every-10", "gaps", "irregular"]))
    if pattern == "dense":
        increments = np.ones(n, dtype=np.int64)
    elif pattern == "every-10":
        increments = np.full(n, 10, dtype=np.int64)
    elif pattern == "gaps":
        increments = np.where(rng.random(n) < 0.01, rng.integers(100, 5_000, n), 1)
    else:
        increments = rng.integers(1, 50, n)
    steps = offset + np.cumsum(increments, dtype=np.int64)

    t = np.arange(n, dtype=np.float64) / max(n, 1)
    slope = draw(st.sampled_from([0.0, 1.0, -3.0, 250.0]))
    values = 7.0 + slope * t
    change_index = None
    shape = draw(st.sampled_from(["line", "kink", "jump", "curve"]))
    if shape in ("kink", "jump") and n >= 50:
        change_index = int(rng.integers(int(0.3 * n), int(0.7 * n)))
        after = np.arange(n) >= change_index
        if shape == "kink":
            values = values + 20.0 * after * (t - t[change_index])
        else:
            values = values + 5.0 * after
    elif shape == "curve":
        values = values + 4.0 * np.sqrt(t)
    noise = draw(st.sampled_from([0.0, 1e-3, 0.3]))
    values = values + noise * rng.normal(size=n)
    if special:
        for value, rate in (
            (math.nan, draw(st.sampled_from([0.0, 0.05, 1.0]))),
            (math.inf, draw(st.sampled_from([0.0, 0.01]))),
            (-math.inf, draw(st.sampled_from([0.0, 0.01]))),
        ):
            values[rng.random(n) < rate] = value
    return Series(steps, values, change_index)


def window_and_at(data: st.DataObject, steps: IntArray) -> tuple[int, int]:
    """A window up to the whole span, at a step of the series or a few steps off one."""
    if len(steps) == 0:
        return 100, 0
    at = int(steps[data.draw(st.integers(0, len(steps) - 1))]) + data.draw(st.integers(-3, 3))
    span = int(steps[-1] - steps[0]) + 2
    return data.draw(st.integers(1, span)), at


POWERS_OF_TWO = st.sampled_from([2.0**-20, 0.25, 2.0, -1.0, -8.0, 2.0**30])


def fields(fit: Fit | None) -> tuple[object, ...] | None:
    """Everything but the step positions, which some properties move."""
    if fit is None:
        return None
    return (
        fit.slope_before,
        fit.slope_after,
        fit.slope_before_stderr,
        fit.slope_after_stderr,
        fit.ratio,
        fit.level_before,
        fit.level_after,
        fit.n_before,
        fit.n_after,
    )


# -- fits ---------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(st.data(), series())
def test_fit_fields_are_json_numbers_or_none(data: st.DataObject, s: Series) -> None:
    window, at = window_and_at(data, s.steps)
    fit = fit_transition(s.steps, s.values, at, window)
    if fit is None:
        return
    numbers: list[float | None] = [
        fit.slope_before,
        fit.slope_after,
        fit.slope_before_stderr,
        fit.slope_after_stderr,
        fit.ratio,
        fit.level_before,
        fit.level_after,
        fit.slope_change,
    ]
    numbers += [value for _, value in (*fit.before_segment, *fit.after_segment)]
    assert all(x is None or math.isfinite(x) for x in numbers)
    assert fit.n_before >= 2 and fit.n_after >= 2
    # Each line is drawn over its own side's points, never past them to the step.
    finite = s.steps[np.isfinite(s.values)]
    before = finite[(finite >= at - window) & (finite < at)]
    after = finite[(finite >= at) & (finite <= at + window)]
    assert [step for step, _ in fit.before_segment] == [before[0], before[-1]]
    assert [step for step, _ in fit.after_segment] == [after[0], after[-1]]


@PROPERTY_SETTINGS
@given(st.data(), series(), POWERS_OF_TWO)
def test_scaling_by_a_power_of_two_scales_slopes_and_keeps_the_ratio(
    data: st.DataObject, s: Series, factor: float
) -> None:
    window, at = window_and_at(data, s.steps)
    fit = fit_transition(s.steps, s.values, at, window)
    scaled = fit_transition(s.steps, factor * s.values, at, window)
    if fit is None:
        assert scaled is None
        return
    assert scaled is not None
    assert scaled.slope_before == factor * fit.slope_before
    assert scaled.slope_after == factor * fit.slope_after
    assert scaled.slope_before_stderr == abs(factor) * fit.slope_before_stderr
    assert (scaled.level_before, scaled.level_after) == (
        factor * fit.level_before,
        factor * fit.level_after,
    )
    assert scaled.ratio == fit.ratio
    assert scaled.slope_change == fit.slope_change


def roundoff_slope(fit: Fit, size: float) -> tuple[float, float]:
    """How far round-off of values of ``size`` may move each slope (per 1k steps): the
    values' error, ~1e-16 of their size, over each side's extent, with a wide margin."""
    before = max(1, fit.at - fit.before_segment[0][0])
    after = max(1, fit.after_segment[1][0] - fit.at)
    return 1e-9 * size * 1000 / before, 1e-9 * size * 1000 / after


@PROPERTY_SETTINGS
@given(st.data(), series(), st.floats(1e-3, 1e3) | st.floats(-1e3, -1e-3))
def test_scaling_by_any_factor_scales_slopes_and_keeps_the_ratio(
    data: st.DataObject, s: Series, factor: float
) -> None:
    window, at = window_and_at(data, s.steps)
    fit = fit_transition(s.steps, s.values, at, window)
    scaled = fit_transition(s.steps, factor * s.values, at, window)
    assert (fit is None) == (scaled is None)
    if fit is None or scaled is None:
        return
    size = abs(factor) * float(np.max(np.abs(s.values[np.isfinite(s.values)])))
    before, after = roundoff_slope(fit, size)
    assert scaled.slope_before == pytest.approx(factor * fit.slope_before, abs=before)
    assert scaled.slope_after == pytest.approx(factor * fit.slope_after, abs=after)
    assert scaled.level_after == pytest.approx(factor * fit.level_after, abs=1e-9 * size)
    if fit.ratio is not None and scaled.ratio is not None:
        assert scaled.ratio == pytest.approx(fit.ratio, rel=1e-6)
    elif fit.ratio is not None or scaled.ratio is not None:
        # Only a slope right at twice its standard error may fall either side.
        assert abs(fit.slope_before) == pytest.approx(2 * fit.slope_before_stderr, rel=1e-6)


@PROPERTY_SETTINGS
@given(st.data(), series(), st.sampled_from([-1e6, -3.5, 0.1, 42.0, 1e6]))
def test_adding_a_constant_keeps_slopes_and_shifts_levels(
    data: st.DataObject, s: Series, constant: float
) -> None:
    window, at = window_and_at(data, s.steps)
    fit = fit_transition(s.steps, s.values, at, window)
    shifted = fit_transition(s.steps, s.values + constant, at, window)
    assert (fit is None) == (shifted is None)
    if fit is None or shifted is None:
        return
    size = float(np.max(np.abs(s.values[np.isfinite(s.values)]))) + abs(constant)
    before, after = roundoff_slope(fit, size)
    assert shifted.slope_before == pytest.approx(fit.slope_before, abs=before)
    assert shifted.slope_after == pytest.approx(fit.slope_after, abs=after)
    assert shifted.level_before == pytest.approx(fit.level_before + constant, abs=1e-9 * size)
    assert shifted.level_after == pytest.approx(fit.level_after + constant, abs=1e-9 * size)


@PROPERTY_SETTINGS
@given(st.data(), series(), st.integers(-(10**12), 10**12))
def test_shifting_the_steps_shifts_only_the_steps(
    data: st.DataObject, s: Series, shift: int
) -> None:
    window, at = window_and_at(data, s.steps)
    fit = fit_transition(s.steps, s.values, at, window)
    moved = fit_transition(s.steps + shift, s.values, at + shift, window)
    assert fields(moved) == fields(fit)
    if fit is not None and moved is not None:
        assert moved.before_segment[0][0] == fit.before_segment[0][0] + shift
        assert moved.after_segment[1][0] == fit.after_segment[1][0] + shift


# -- change points ------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(series(), st.integers(0, 6))
def test_detection_gives_steps_of_the_series_strongest_first(s: Series, max_points: int) -> None:
    points = detect_change_points(s.steps, s.values, max_points=max_points)
    assert len(points) <= max_points
    assert {p.step for p in points} <= set(s.steps.tolist())
    assert [p.score for p in points] == sorted((p.score for p in points), reverse=True)
    assert all(p.score > 40 and math.isfinite(p.score) for p in points)


@PROPERTY_SETTINGS
@given(series(), st.integers(-(10**12), 10**12))
def test_shifting_the_steps_shifts_the_changes_by_as_much(s: Series, shift: int) -> None:
    points = detect_change_points(s.steps, s.values)
    moved = detect_change_points(s.steps + shift, s.values)
    assert [(p.step + shift, p.score) for p in points] == [(p.step, p.score) for p in moved]


@PROPERTY_SETTINGS
@given(series(), POWERS_OF_TWO)
def test_negating_or_scaling_finds_the_same_changes(s: Series, factor: float) -> None:
    assert detect_change_points(s.steps, factor * s.values) == detect_change_points(
        s.steps, s.values
    )


@st.composite
def clear_change(draw: st.DrawFn) -> Series:
    """1k-20k points with one kink or jump far above the noise, in the middle 40 %."""
    n = draw(st.integers(1_000, 20_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    every = draw(st.sampled_from([1, 10]))
    steps = draw(st.sampled_from([0, 10**9])) + every * np.arange(n, dtype=np.int64)
    t = np.arange(n, dtype=np.float64) / n
    change_index = int(rng.integers(int(0.3 * n), int(0.7 * n)))
    after = np.arange(n) >= change_index
    values = 7.0 + draw(st.sampled_from([0.0, 1.0, -3.0])) * t
    if draw(st.booleans()):
        values = values + draw(st.sampled_from([-30.0, 30.0])) * after * (t - t[change_index])
    else:
        values = values + draw(st.sampled_from([-5.0, 5.0])) * after
    values = values + draw(st.sampled_from([0.0, 0.1])) * rng.normal(size=n)
    return Series(steps, values, change_index)


@PROPERTY_SETTINGS
@given(clear_change())
def test_a_reversed_series_has_its_change_mirrored(s: Series) -> None:
    # Reversed in time, step s becomes (first + last) - s: the change stays between the
    # same two points, and the first point after it is the other one of the two.
    assert s.change_index is not None
    n = len(s.steps)
    mirrored_steps = (s.steps[-1] + s.steps[0]) - s.steps[::-1]
    (forward,) = detect_change_points(s.steps, s.values, max_points=1)
    (backward,) = detect_change_points(mirrored_steps, s.values[::-1], max_points=1)
    index = int(np.searchsorted(s.steps, forward.step))
    mirrored_index = n - int(np.searchsorted(mirrored_steps, backward.step))
    # A kink in noise is pinned to within a few tens of points, and the two directions bin
    # the series differently, so they may differ by a little of that.
    assert abs(index - s.change_index) <= max(3, n // 20)
    assert abs(mirrored_index - s.change_index) <= max(3, n // 20)
    assert abs(mirrored_index - index) <= max(3, n // 40)
