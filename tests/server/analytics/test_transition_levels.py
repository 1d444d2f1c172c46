"""Transitions' level change: the difference of the metric's local levels either side of
the step, so that a smooth curve through the step reads ≈ 0 and a real jump reads its size.

Each test knows the truth (the curve is built, or the simulator's trend is continuous at
its event) and checks the level change against it within a tolerance scaled by the noise;
the levels themselves are checked against scipy's Theil–Sen line on independently chosen
points. The long least-squares lines, evaluated at the step, are shown to miss by far on
the same data: what the level change used to be.
"""

from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from scipy import stats
from sqlalchemy.orm import Session

from normwatch.server.analytics.fit import fit_line
from normwatch.server.analytics.levels import LEVEL_MAX_POINTS, LEVEL_MIN_POINTS, LEVEL_SHARE
from normwatch.server.analytics.transitions import Fit, fit_transition, transitions
from normwatch.server.batch import parse_batch
from normwatch.server.schemas import EventCreate, RunCreate
from normwatch.server.services import ingest, runs
from normwatch.server.services.transitions import run_transitions
from normwatch.simulate import SimulatedRun, grad_norm_trends
from normwatch.simulate import final_norm_gain as gain_of
from tests.helpers.principals import principal

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

STEPS = np.arange(10_000, dtype=np.int64)
AT = 5_000
SIGMA = 0.05


def change(fit: Fit | None) -> float:
    assert fit is not None
    return fit.level_after - fit.level_before


def points_used(steps: IntArray, at: int, window: int) -> int:
    """About how many points a side's level is measured on: those within an eighth of the
    window after the step, at least 16 and at most 128 (the side before has as many, or
    one fewer)."""
    close = int(np.sum((steps >= at) & (steps - at <= window / LEVEL_SHARE)))
    return min(max(close, LEVEL_MIN_POINTS), LEVEL_MAX_POINTS)


def tolerance(sigma: float, points: int) -> float:
    """Six standard deviations of a level change on ``points`` a side: a line's value at
    the end of its points has twice the SD of their mean, and Theil–Sen gives up ~10 % of
    least squares' efficiency on Gaussian noise."""
    return 6.0 * math.sqrt(2.0) * 2.0 * sigma / math.sqrt(points) / 0.9


def long_lines(steps: IntArray, values: FloatArray, at: int, window: int) -> float:
    """The level change as it was: the two window-long lines' values at the step."""
    before = (steps >= at - window) & (steps < at)
    after = (steps >= at) & (steps <= at + window)
    line_after = fit_line(steps[after], values[after], origin=at)
    line_before = fit_line(steps[before], values[before], origin=at)
    assert line_after is not None and line_before is not None
    return line_after.level - line_before.level


def reference_change(steps: IntArray, values: FloatArray, at: int, window: int) -> float:
    """scipy's Theil–Sen line at the step on each side, through the ``k`` points nearest
    it (`points_used`), intercepts as the median of ``y - slope · x``."""
    levels = []
    for side in ((steps < at) & (steps >= at - window), (steps >= at) & (steps <= at + window)):
        s, v = steps[side], values[side]
        close = int(np.sum(np.abs(s - at) <= window / LEVEL_SHARE))
        k = min(len(s), max(close, LEVEL_MIN_POINTS), LEVEL_MAX_POINTS)
        chosen = np.argsort(np.abs(s - at), kind="stable")[:k]
        x = (s[chosen] - at).astype(np.float64)
        levels.append(stats.theilslopes(v[chosen], x, method="joint").intercept)
    return float(levels[1] - levels[0])


CURVES = {
    # Accelerating through the step: e^(t/2000) from 1 to 148 over the run.
    "exponential": lambda t: np.exp(t / 2000.0),
    # Flat before the step, bending up after it, as the demo's grad norm at 81k.
    "flat, then quadratic": lambda t: 1.0 + np.where(t < AT, 0.0, ((t - AT) / 1000.0) ** 2),
    "cubic": lambda t: (t / 2000.0) ** 3,
    "concave": lambda t: 3.0 * np.sqrt(t / 1000.0 + 1.0),
}


@pytest.mark.parametrize("curve", list(CURVES))
@pytest.mark.parametrize("window", [500, 1000, 2500])
@pytest.mark.parametrize("seed", range(3))
def test_a_smooth_curve_through_the_step_reads_no_level_change(
    curve: str, window: int, seed: int
) -> None:
    values = CURVES[curve](STEPS.astype(np.float64))
    values = values + SIGMA * np.random.default_rng(seed).normal(size=len(STEPS))
    got = change(fit_transition(STEPS, values, AT, window))
    assert abs(got) <= tolerance(SIGMA, points_used(STEPS, AT, window))
    assert got == pytest.approx(reference_change(STEPS, values, AT, window), abs=1e-12)


@pytest.mark.parametrize("curve", list(CURVES))
@pytest.mark.parametrize("window", [500, 1000, 2500])
@pytest.mark.parametrize("seed", range(3))
def test_a_real_jump_on_a_curved_trend_reads_its_size(curve: str, window: int, seed: int) -> None:
    t = STEPS.astype(np.float64)
    values = CURVES[curve](t) + 0.5 * (t >= AT)
    values = values + SIGMA * np.random.default_rng(seed).normal(size=len(STEPS))
    got = change(fit_transition(STEPS, values, AT, window))
    assert got == pytest.approx(0.5, abs=tolerance(SIGMA, points_used(STEPS, AT, window)))


def test_the_long_lines_read_a_jump_that_is_not_there() -> None:
    """What the level change was: on the exponential, window 2,500, the two lines at the
    step read -1.71 with no jump and -1.21 with a jump of +0.5; the levels read ≈ 0 and
    ≈ +0.5."""
    t = STEPS.astype(np.float64)
    noise = SIGMA * np.random.default_rng(0).normal(size=len(STEPS))
    smooth = CURVES["exponential"](t) + noise
    jumped = smooth + 0.5 * (t >= AT)
    assert long_lines(STEPS, smooth, AT, 2500) == pytest.approx(-1.71, abs=0.005)
    assert long_lines(STEPS, jumped, AT, 2500) == pytest.approx(-1.21, abs=0.005)
    assert abs(change(fit_transition(STEPS, smooth, AT, 2500))) < 0.01
    assert change(fit_transition(STEPS, jumped, AT, 2500)) == pytest.approx(0.5, abs=0.01)


# -- the demo's 81k event ----------------------------------------------------------------------

EVENT = 81_000


def demo_grad_norm(start: int = 60_000, stop: int = 100_000) -> tuple[IntArray, FloatArray]:
    steps, metrics = SimulatedRun(seed=0).block(start, stop, layer_every=10)
    return steps, metrics["grad/norm/total"]


def test_the_demo_grad_norm_has_no_level_change_at_81k() -> None:
    """The simulator's grad norm is continuous at 81k (flat before, curving up after):
    on the page's window (2,375 steps, a 40th of a 95k-step run) the long lines read a
    drop of 0.408 where the levels read ≈ 0, and the API's default window likewise."""
    steps, values = demo_grad_norm()
    t = np.array([EVENT - 1, EVENT], dtype=np.float64)
    trend = np.sqrt(np.sum(grad_norm_trends(t, gain_of(t, EVENT), EVENT, 48) ** 2, axis=0))
    assert abs(trend[1] - trend[0]) < 1e-4  # the truth: no jump
    # The noise around the trend, from successive differences away from the event.
    before = values[(steps >= EVENT - 3000) & (steps < EVENT)]
    sigma = float(np.std(np.diff(before)) / math.sqrt(2.0))
    assert sigma == pytest.approx(0.054, abs=0.002)
    for window in (2375, 5000):
        assert long_lines(steps, values, EVENT, window) < -0.4
        rows = transitions(steps, values, [(EVENT, "near-dropless EP routing")], window)
        (row,) = [r for r in rows if r.source == "event"]
        got = change(row.fit)
        assert abs(got) <= tolerance(sigma, points_used(steps, EVENT, window))
        assert got == pytest.approx(reference_change(steps, values, EVENT, window), abs=1e-12)
    assert long_lines(steps, values, EVENT, 2375) == pytest.approx(-0.408, abs=0.0005)


def test_the_service_answers_the_demo_event_with_its_local_levels(db_session: Session) -> None:
    """The transitions endpoint's service, on both backends, on the demo's grad norm
    around 81k and its event."""
    steps, values = demo_grad_norm(76_000, 86_000)
    who = principal(db_session, "ingest")
    made = runs.create_or_resume(db_session, who, RunCreate(name="demo-81k"))
    body = {"steps": steps.tolist(), "metrics": {"grad/norm/total": values.tolist()}}
    ingest.ingest_batch(db_session, made.id, parse_batch(body, max_points=100_000))
    found = runs.get_run(db_session, made.id)
    assert found is not None
    run = found[0]
    ingest.add_event(db_session, run, EventCreate(step=EVENT, text="near-dropless EP routing"))
    answer = run_transitions(db_session, run, ["grad/norm/total"], window=2375).to_json()
    (event,) = [t for t in answer["transitions"] if t["source"] == "event"]
    fit = event["metrics"]["grad/norm/total"]
    level_change = fit["level_after"] - fit["level_before"]
    assert level_change == pytest.approx(reference_change(steps, values, EVENT, 2375), abs=1e-12)
    assert abs(level_change) < 0.03
    assert fit["level_before"] == pytest.approx(0.925, abs=0.02)  # the trend: 0.9255
    # The line after is drawn from the first point after the step on.
    assert fit["after_segment"][0][0] == EVENT
    assert fit["before_segment"][1][0] == EVENT - 1


# -- noise and outliers --------------------------------------------------------------------------

PROPERTIES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def curved_runs(draw: st.DrawFn) -> tuple[IntArray, FloatArray, int, int, float]:
    """A smooth curve (an exponential of random growth plus a random line, at a random
    scale), a jump of random size (often none) at a random step, and a window."""
    n = draw(st.integers(400, 6000))
    every = draw(st.sampled_from([1, 1, 3, 10]))
    steps = every * np.arange(n, dtype=np.int64) + draw(st.sampled_from([0, 77_096, 10**9]))
    span = float(steps[-1] - steps[0])
    u = (steps - steps[0]).astype(np.float64) / span
    scale = draw(st.sampled_from([1e-3, 1.0, 340.0]))
    growth = draw(st.floats(-3.0, 3.0))
    values = scale * (np.exp(growth * u) + draw(st.floats(-2.0, 2.0)) * u)
    at = int(steps[draw(st.integers(n // 4, 3 * n // 4))])
    jump = draw(st.sampled_from([0.0, 0.0, 0.3, -1.0])) * scale
    values = values + jump * (steps >= at)
    window = draw(st.integers(50 * every, n * every // 4))
    return steps, values, at, window, scale


@PROPERTIES
@given(curved_runs(), st.sampled_from([0.01, 0.05]), st.integers(0, 2**32 - 1))
def test_noise_moves_the_level_change_by_its_own_noise_only(
    run: tuple[IntArray, FloatArray, int, int, float], relative: float, seed: int
) -> None:
    """Gaussian noise of SD σ moves the level change (from the noise-free curve's) by less
    than six of its standard deviations, whatever the curve, scale, spacing and window."""
    steps, values, at, window, scale = run
    sigma = relative * scale
    noisy = values + sigma * np.random.default_rng(seed).normal(size=len(values))
    clean, got = (
        change(fit_transition(steps, values, at, window)),
        change(fit_transition(steps, noisy, at, window)),
    )
    assert abs(got - clean) <= tolerance(sigma, points_used(steps, at, window))


@PROPERTIES
@given(curved_runs(), st.integers(0, 2**32 - 1), st.sampled_from([10.0, 1e3, 1e6]))
def test_a_spike_next_to_the_step_does_not_move_the_levels(
    run: tuple[IntArray, FloatArray, int, int, float], seed: int, height: float
) -> None:
    """A spike over the first tenth of the points a level is measured on after the step
    (a loss spike right at a config change), however tall, moves the level change by
    less than the noise itself (σ) plus its six standard deviations; a least-squares
    line through the same points moves with the spike's height."""
    steps, values, at, window, scale = run
    sigma = 0.02 * scale
    noisy = values + sigma * np.random.default_rng(seed).normal(size=len(values))
    first = int(np.searchsorted(steps, at))
    k = points_used(steps, at, window)
    spiked = noisy.copy()
    spiked[first : first + max(1, k // 10)] += height * scale
    moved = change(fit_transition(steps, spiked, at, window)) - change(
        fit_transition(steps, noisy, at, window)
    )
    assert abs(moved) <= sigma + tolerance(sigma, k)
