"""Spike detection over generated series: the invariants of its output, agreement with the
plain-Python reference, and what scaling the values or shifting the steps must not change.

Series come from `make_series` (a shape, bumps, NaN/±inf) with hypothesis-drawn values
written over some points; options cover small blocks and windows, gaps and thresholds.
"""

from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, example, given, settings

from normwatch.server.analytics.spikes import Spike, find_spikes, fraction_in_spikes, lead_lag
from tests.helpers.spike_reference import (
    SHAPES,
    make_series,
    reference_fraction,
    reference_spikes,
)

Series = tuple[np.ndarray, np.ndarray]
Options = dict[str, float]

SPIKE_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# Magnitudes from 1e-6 to 1e6 keep every value, times 2**±40, clear of subnormals and
# overflow, where scaling by a power of two stops being exact.
plain_values = st.builds(
    lambda sign, size: sign * size,
    st.sampled_from([1.0, -1.0]),
    st.floats(1e-6, 1e6),
) | st.just(0.0)


@st.composite
def series(draw: st.DrawFn) -> Series:
    n = draw(st.integers(0, 400) | st.sampled_from([0, 1, 2, 3, 16, 33, 64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    steps, values = make_series(
        draw(st.sampled_from(SHAPES)),
        n,
        rng,
        spikes=draw(st.integers(0, 6)),
        non_finite=draw(st.sampled_from([0.0, 0.02, 0.3, 1.0])),
    )
    if n:
        special = st.sampled_from([math.nan, math.inf, -math.inf])
        written = st.tuples(st.integers(0, n - 1), plain_values | special)
        for i, value in draw(st.lists(written, max_size=5)):
            values[i] = value
    return steps, values


options = st.fixed_dictionaries(
    {},
    optional={
        "threshold": st.sampled_from([1.0, 2.0, 4.0, 10.0]),
        "min_relative_rise": st.sampled_from([0.0, 0.05, 0.5]),
        "max_gap": st.integers(0, 4),
        "block_size": st.integers(1, 16),
        "window_blocks": st.integers(1, 9),
    },
)


def explicit(values: list[float]) -> Series:
    return np.arange(len(values), dtype=np.int64), np.array(values, dtype=np.float64)


@SPIKE_SETTINGS
@given(series(), options)
@example(explicit([]), {})
@example(explicit([1.0] * 40 + [5.0] + [math.nan] * 3), {"block_size": 4})
@example(explicit([1.0, 1.1] * 20 + [3.0, 1.0, 3.0, 1.0, 1.0, 1.0]), {"block_size": 4})
def test_spikes_are_ordered_disjoint_and_match_the_reference(s: Series, opts: Options) -> None:
    steps, values = s
    found = find_spikes(steps, values, **opts)  # type: ignore[arg-type]
    assert found == reference_spikes(steps.tolist(), values.tolist(), **opts)  # type: ignore[arg-type]

    finite = np.isfinite(values)
    for spike in found:
        assert spike.start <= spike.peak <= spike.end
        inside = (steps >= spike.start) & (steps <= spike.end) & finite
        assert spike.peak_value == values[inside].max()
        assert values[steps == spike.peak][0] == spike.peak_value
        assert spike.recovered or spike.end == steps[-1]
    for before, after in zip(found, found[1:], strict=False):
        assert before.end < after.start

    for start, end in ((None, None), (None, 50), (20, 200), (300, 300)):
        share = fraction_in_spikes(steps, found, start, end)
        assert 0.0 <= share <= 1.0
        assert math.isclose(
            share, reference_fraction(steps.tolist(), found, start, end), abs_tol=1e-15
        )


def positions(found: list[Spike]) -> list[tuple[int, int, int, bool]]:
    return [(s.start, s.peak, s.end, s.recovered) for s in found]


@SPIKE_SETTINGS
@given(series(), options, st.integers(-40, 40))
def test_scaling_the_values_by_a_power_of_two_keeps_the_spikes(
    s: Series, opts: Options, exponent: int
) -> None:
    # Any c > 0 scales every statistic by c; a power of two does it without rounding, so
    # no comparison can flip.
    steps, values = s
    factor = 2.0**exponent
    found = find_spikes(steps, values, **opts)  # type: ignore[arg-type]
    scaled = find_spikes(steps, values * factor, **opts)  # type: ignore[arg-type]
    assert positions(scaled) == positions(found)
    assert [s.magnitude for s in scaled] == [s.magnitude for s in found]
    assert [s.baseline for s in scaled] == [s.baseline * factor for s in found]


@SPIKE_SETTINGS
@given(series(), options, st.integers(-(2**40), 2**40))
def test_shifting_the_steps_shifts_the_spikes(s: Series, opts: Options, shift: int) -> None:
    steps, values = s
    found = find_spikes(steps, values, **opts)  # type: ignore[arg-type]
    moved = find_spikes(steps + shift, values, **opts)  # type: ignore[arg-type]
    assert positions(moved) == [
        (a + shift, p + shift, e + shift, r) for a, p, e, r in positions(found)
    ]


@SPIKE_SETTINGS
@given(
    st.integers(100, 600),
    st.integers(0, 2**32 - 1),
    st.floats(0.0, 0.05),
    st.floats(1e-3, 1e3),
    st.floats(0.0, 1.0),
    st.integers(1, 5),
)
def test_a_10x_spike_on_a_flat_noisy_series_is_found(
    n: int, seed: int, noise: float, level: float, where: float, length: int
) -> None:
    rng = np.random.default_rng(seed)
    values = level * (1 + noise * rng.normal(size=n))
    at = 32 + int(where * (n - 32 - length))  # after the two blocks with too little history
    values[at : at + length] = 10 * level
    steps = np.arange(n, dtype=np.int64) * 3
    (spike,) = (s for s in find_spikes(steps, values) if s.start <= steps[at] <= s.end)
    assert (spike.start, spike.peak) == (steps[at], steps[at])
    # Over at the first point after the pulse that is back within a noise SD (and whose
    # next few are too): on Gaussian noise, within a few points.
    if at + length < n - 10:
        assert steps[at + length] <= spike.end <= steps[at + length + 10]
        assert spike.recovered
    assert math.isclose(spike.magnitude, 10, rel_tol=0.1)


def starts_at(starts: list[int]) -> list[Spike]:
    return [Spike(s, s, 2.0, s + 1, 2.0, 1.0, True) for s in starts]


@SPIKE_SETTINGS
@given(
    st.lists(st.integers(0, 500), max_size=20, unique=True),
    st.lists(st.integers(0, 500), max_size=20, unique=True),
    st.integers(1, 60),
)
def test_lead_lag_pairs_each_leader_with_the_next_follower(
    leads: list[int], follows: list[int], max_lag: int
) -> None:
    result = lead_lag(
        "a", starts_at(sorted(leads)), "b", starts_at(sorted(follows)), max_lag=max_lag
    )
    lags = []
    for lead in leads:
        after = [f - lead for f in follows if f > lead]
        if after and min(after) <= max_lag:
            lags.append(min(after))
    assert (result.matched, result.unmatched_leader) == (len(lags), len(leads) - len(lags))
    if lags:
        assert result.lag_steps is not None
        assert math.isclose(result.lag_steps, float(np.median(lags)))
    else:
        assert result.lag_steps is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.floats(25.0, 45.0),
    st.floats(3.0, 12.0),
    st.integers(0, 2**32 - 1),
    st.integers(0, 60),
)
def test_an_exponential_recovery_counts_in_its_spike(
    tau: float, height: float, seed: int, bump_at: int
) -> None:
    """A spike of ``height`` times a level of 1 that decays back with time constant τ, on
    1 % noise, with a second bump ``bump_at`` steps into the recovery: one spike, whose
    share of the steps is within 25 % of the true time to come back within one noise SD,
    ``τ · ln(height / 0.01)``."""
    rng = np.random.default_rng(seed)
    n, at = 3000, 1000
    t = np.arange(n)
    values = 1 + 0.01 * rng.normal(size=n)
    values[at:] += (height - 1) * np.exp(-(t[at:] - at) / tau)
    values[at + 1 + bump_at] += 0.5 * (height - 1)
    spikes = [s for s in find_spikes(t, values) if s.end >= at and s.start <= at + 1 + bump_at]
    assert len(spikes) == 1, spikes
    (spike,) = spikes
    assert spike.start == at and spike.recovered
    true_steps = tau * math.log((height - 1) / 0.01)
    got = fraction_in_spikes(t, [spike]) * n
    assert abs(got - true_steps) <= 0.25 * true_steps, (got, true_steps)
