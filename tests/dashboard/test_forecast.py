"""The overlay chart's forecast: the least-squares line against numpy.polyfit, the points it
is fitted to, how far it reaches, and when it meets a threshold."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from normwatch.dashboard import forecast as forecast_module
from normwatch.dashboard.forecast import (
    MIN_POINTS,
    approx_steps,
    forecast,
    forecast_text,
    least_squares,
    value_text,
)


def test_doctests() -> None:
    failed, tried = doctest.testmod(forecast_module)
    assert (failed, tried > 0) == (0, True)


def noisy_line(
    n: int, start: int, every: int, slope: float, seed: int
) -> tuple[list[int], list[float]]:
    rng = np.random.default_rng(seed)
    steps = start + every * np.arange(n)
    values = 3.0 + slope * (steps - start) + 0.1 * rng.standard_normal(n)
    return steps.tolist(), values.tolist()


@pytest.mark.parametrize(
    ("n", "start", "every", "slope"),
    [
        (2, 0, 1, 1.0),
        (10, 0, 1, -0.5),
        (1000, 81_000, 7, 1e-4),
        (500, 10**9, 3, 2e-3),  # steps near 1e9: centring keeps the precision
        (3000, 0, 1, 0.0),
    ],
)
def test_least_squares_matches_numpy_polyfit(n: int, start: int, every: int, slope: float) -> None:
    steps, values = noisy_line(n, start, every, slope, seed=n)
    at = steps[-1]
    got_slope, got_level = least_squares(steps, values, at)
    # The reference fits against steps taken from `at`, as the level is the line there.
    ref_slope, ref_level = np.polyfit(np.asarray(steps, dtype=np.float64) - at, values, 1)
    assert_allclose([got_slope, got_level], [ref_slope, ref_level], rtol=1e-9, atol=1e-12)


def test_least_squares_of_points_at_one_step_is_flat() -> None:
    assert least_squares([5, 5, 5], [1.0, 2.0, 3.0], at=5) == (0.0, 2.0)


def test_forecast_fits_the_last_tenth_of_the_steps_shown() -> None:
    steps = list(range(1000))
    values = [0.0 if s < 900 else 2.0 * (s - 900) for s in steps]  # a kink at 900
    found = forecast("m", steps, values)
    assert found is not None
    assert (found.first, found.latest, found.points) == (900, 999, 100)
    ref_slope, ref_intercept = np.polyfit(steps[900:], values[900:], 1)
    assert_allclose([found.slope, found.level], [ref_slope, ref_slope * 999 + ref_intercept])
    # Over a wider range shown (the view's), the tenth is wider too.
    wide = forecast("m", steps, values, span=(0, 4000))
    assert wide is not None and wide.first == 599 and wide.points == 401


def test_forecast_takes_at_least_the_last_few_points() -> None:
    steps = [0, 100, 200, 300, 400, 500, 600, 1000]
    values = [float(s) for s in steps]
    found = forecast("m", steps, values)
    assert found is not None and found.points == MIN_POINTS and found.first == 300
    assert forecast("m", [0, 1], [1.0, 3.0]) is not None


@pytest.mark.parametrize(
    ("steps", "values"),
    [([], []), ([5], [1.0]), ([1, 2, 3], [math.nan, 1.0, math.inf])],
)
def test_no_forecast_from_fewer_than_two_finite_points(
    steps: list[int], values: list[float]
) -> None:
    assert forecast("m", steps, values) is None


def test_forecast_skips_non_finite_values() -> None:
    steps = list(range(20))
    values = [float(s) if s % 5 else math.nan for s in steps]
    found = forecast("m", steps, values, fraction=1.0)
    assert found is not None
    assert_allclose([found.slope, found.level], [1.0, 19.0])
    assert found.points == 16


def test_eta_to_the_nearest_threshold_the_line_heads_toward() -> None:
    steps = list(range(0, 1001, 10))
    rising = [1.0 + 0.002 * s for s in steps]  # 3.0 at step 1000, +2 per 1k steps
    found = forecast("m", steps, rising, thresholds=[10.0, 5.0, 2.0, 0.5])
    assert found is not None
    assert found.target == 5.0 and found.eta == pytest.approx(1000.0)
    # The line reaches the threshold: the range shown is 1000 steps, the eta as many.
    assert found.end == 2000
    assert found.value(found.end) == pytest.approx(5.0)
    falling = forecast("m", steps, [-v for v in rising], thresholds=[-5.0, -10.0, 0.0])
    assert falling is not None and (falling.target, falling.eta) == (-5.0, pytest.approx(1000.0))


def test_no_eta_when_the_line_heads_away_or_is_flat() -> None:
    steps = list(range(100))
    away = forecast("m", steps, [10.0 - 0.01 * s for s in steps], thresholds=[20.0])
    assert away is not None and (away.target, away.eta, away.thresholds) == (None, None, 1)
    assert away.end == 99 + 25  # a quarter of the steps shown ahead
    flat = forecast("m", steps, [1.0] * 100, thresholds=[2.0])
    assert flat is not None and flat.eta is None


def test_a_far_threshold_does_not_stretch_the_line() -> None:
    steps = list(range(100))
    found = forecast("m", steps, [0.01 * s for s in steps], thresholds=[100.0])
    assert found is not None and found.eta == pytest.approx(100.0 / 0.01 - 99)
    assert found.end == 99 + 25


def test_texts() -> None:
    assert [approx_steps(s) for s in (0.4, 42.0, 99.6, 3217.4, 1_234_567.0)] == [
        "0",
        "42",
        "100",
        "3,200",
        "1,200,000",
    ]
    assert [value_text(v) for v in (5, 5.0, 0.125, 1e7, -2.0)] == [
        "5.0",
        "5.0",
        "0.125",
        "1e+07",
        "-2.0",
    ]
    steps = list(range(0, 2001, 100))
    found = forecast("grad/norm/total", steps, [1.0 + 0.001 * s for s in steps], thresholds=[5])
    assert found is not None
    assert forecast_text(found) == (
        "forecast of grad/norm/total: +1 per 1k steps over the last 5 points; "
        "reaches 5.0 in ~2,000 steps"
    )
    away = forecast("m", steps, [1.0 - 0.001 * s for s in steps], thresholds=[5])
    assert away is not None and forecast_text(away).endswith("; heading toward no threshold")
    alone = forecast("m", steps, [1.0] * len(steps))
    assert alone is not None and forecast_text(alone) == (
        "forecast of m: +0 per 1k steps over the last 5 points"
    )


def test_fraction_must_be_a_share() -> None:
    with pytest.raises(ValueError, match="fraction must be in"):
        forecast("m", [0, 1], [0.0, 1.0], fraction=0.0)
