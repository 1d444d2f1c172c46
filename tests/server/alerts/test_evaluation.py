"""Alert rule evaluation: exact firing and resolving steps, state round trips, references."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import normwatch
from normwatch.server.alerts.clock import check_stale, stale_due
from normwatch.server.alerts.conditions import (
    ForecastCondition,
    NonFiniteCondition,
    SlopeCondition,
    SpikeCondition,
    StaleCondition,
    StepCondition,
    ThresholdCondition,
    parse_condition,
)
from normwatch.server.alerts.evaluation import (
    RuleState,
    Transition,
    evaluate,
    linear_fit,
    preview,
)
from normwatch.server.alerts.selectors import metric_matches

LLMC_LOG = Path(normwatch.__file__).parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"


START = 77_096  # a restart step seen in the wild: step numbers far from zero


def brief(transitions: list[Transition]) -> list[tuple[str, int]]:
    return [(t.state, t.step) for t in transitions]


def flat_with(n: int, base: float, **at: float) -> tuple[list[int], list[float]]:
    """``n`` steps from START with value ``base``, except ``at={"i12": 5.3}`` at index 12."""
    values = [base] * n
    for key, value in at.items():
        values[int(key[1:])] = value
    return [START + i for i in range(n)], values


# --- threshold -------------------------------------------------------------------------


def test_threshold_fires_and_resolves_at_exact_steps() -> None:
    steps, values = flat_with(30, 1.0, i10=5.31, i11=6.0, i12=5.0, i13=4.99)
    rule = ThresholdCondition(op=">=", value=5.0)
    state, transitions = evaluate(rule, RuleState(), steps, values)
    assert transitions == [
        Transition(
            "firing", START + 10, 5.31, 5.0, 5.31, "5.31 ≥ 5 for 1 step", START + 10, worst=5.31
        ),
        Transition(
            "resolved", START + 13, 4.99, 5.0, 4.99, "4.99 no longer ≥ 5", START + 10, worst=6.0
        ),
    ]
    assert state.status == "ok" and state.streak == 0 and state.fired_at_step is None
    assert state.last_step == START + 29 and state.window == []


@pytest.mark.parametrize(
    ("op", "fire_value", "calm_value"),
    [(">", 5.01, 5.0), (">=", 5.0, 4.99), ("<", 4.99, 5.0), ("<=", 5.0, 5.01)],
)
def test_threshold_operators_at_the_boundary(op: str, fire_value: float, calm_value: float) -> None:
    steps, values = flat_with(6, calm_value, i2=fire_value)
    rule = parse_condition({"kind": "threshold", "op": op, "value": 5.0})
    assert brief(preview(rule, steps, values)) == [("firing", START + 2), ("resolved", START + 3)]


def test_for_steps_needs_consecutive_logged_steps() -> None:
    # Two high steps (not enough), a dip, then four high steps: fires on the third of those.
    values = [1.0, 6.0, 6.0, 1.0, 6.0, 6.0, 6.0, 6.0, 1.0]
    steps = [START + 10 * i for i in range(len(values))]  # logged every 10 steps
    rule = ThresholdCondition(op=">", value=5.0, for_steps=3)
    statuses = []
    state = RuleState()
    for step, value in zip(steps, values, strict=True):
        state, _ = evaluate(rule, state, [step], [value])
        statuses.append(state.status)
    assert statuses == [
        "ok",
        "pending",
        "pending",
        "ok",
        "pending",
        "pending",
        "firing",
        "firing",
        "ok",
    ]
    transitions = preview(rule, steps, values)
    assert brief(transitions) == [("firing", START + 60), ("resolved", START + 80)]
    assert transitions[0].reason == "6 > 5 for 3 steps"


def test_cooldown_delays_the_next_firing() -> None:
    steps, values = flat_with(60, 1.0, i10=9.0, i11=9.0)
    for i in range(15, 50):
        values[i] = 9.0
    no_cooldown = ThresholdCondition(op=">", value=5.0)
    assert brief(preview(no_cooldown, steps, values)) == [
        ("firing", START + 10),
        ("resolved", START + 12),
        ("firing", START + 15),
        ("resolved", START + 50),
    ]
    cooled = ThresholdCondition(op=">", value=5.0, cooldown_steps=20)
    transitions = preview(cooled, steps, values)
    # Resolved at +12, so no firing before +32; the streak kept counting through the wait.
    assert brief(transitions) == [
        ("firing", START + 10),
        ("resolved", START + 12),
        ("firing", START + 32),
        ("resolved", START + 50),
    ]
    assert transitions[2].reason == "9 > 5 for 18 steps"
    state, _ = evaluate(cooled, RuleState(), steps[:20], values[:20])
    assert (state.status, state.cooldown_until_step, state.streak) == ("pending", START + 32, 5)


def test_cooldown_that_expires_during_calm_changes_nothing() -> None:
    steps, values = flat_with(40, 1.0, i5=9.0, i30=9.0)
    rule = ThresholdCondition(op=">", value=5.0, cooldown_steps=10)
    assert brief(preview(rule, steps, values)) == [
        ("firing", START + 5),
        ("resolved", START + 6),
        ("firing", START + 30),
        ("resolved", START + 31),
    ]


def test_nan_breaks_a_pending_streak_but_does_not_resolve() -> None:
    nan = math.nan
    rule = ThresholdCondition(op=">=", value=5.0, for_steps=3)
    values = [6.0, 6.0, nan, 6.0, 6.0, 6.0, nan, nan, 6.0, 4.0]
    steps = [START + i for i in range(len(values))]
    transitions = preview(rule, steps, values)
    assert brief(transitions) == [("firing", START + 5), ("resolved", START + 9)]
    # Firing stays firing through the NaNs at +6, +7.
    state, _ = evaluate(rule, RuleState(), steps[:8], values[:8])
    assert (state.status, state.fired_at_step, state.streak) == ("firing", START + 5, 0)
    assert math.isnan(state.last_value or 0.0)


def test_infinity_compares_as_a_number() -> None:
    steps, values = flat_with(5, 1.0, i1=math.inf, i3=-math.inf)
    assert brief(preview(ThresholdCondition(op=">=", value=5.0), steps, values)) == [
        ("firing", START + 1),
        ("resolved", START + 2),
    ]
    transitions = preview(ThresholdCondition(op="<", value=0.0), steps, values)
    assert brief(transitions) == [("firing", START + 3), ("resolved", START + 4)]
    assert transitions[0].reason == "-Inf < 0 for 1 step"


# --- non_finite ------------------------------------------------------------------------


def test_non_finite_fires_on_nan_or_infinity_and_resolves_on_a_finite_value() -> None:
    values = [0.3, 0.31, math.nan, math.inf, -math.inf, 0.29, 0.3, math.inf, 0.3]
    steps = [START + i for i in range(len(values))]
    transitions = preview(NonFiniteCondition(), steps, values)
    assert brief(transitions) == [
        ("firing", START + 2),
        ("resolved", START + 5),
        ("firing", START + 7),
        ("resolved", START + 8),
    ]
    assert transitions[0].reason == "NaN, not finite, for 1 step"
    assert transitions[0].threshold is None
    assert transitions[1].reason == "0.29, finite again"
    twice = preview(NonFiniteCondition(for_steps=2), steps, values)
    assert brief(twice) == [("firing", START + 3), ("resolved", START + 5)]


# --- spike -----------------------------------------------------------------------------


def spike_reference(
    values: list[float], factor: float, window: int, min_history: int, resolve_steps: int = 5
) -> list[tuple[str, int]]:
    """A straightforward re-implementation with NumPy (finite series, for_steps 1): fire
    above ``factor`` times the median of the previous ``window`` values, the values of a
    firing spike kept out of the window however long it fires, resolve after
    ``resolve_steps`` judged steps in a row back within one noise SD of that median
    (``1.4826 · MAD``, at least a hundredth of the median)."""
    out: list[tuple[str, int]] = []
    pushed: list[float] = []
    firing, held, clear = False, 0, 0
    for i, value in enumerate(values):
        history = pushed[-window:]
        hit = None
        if len(history) >= min_history and np.median(history) > 0:
            median = float(np.median(history))
            if firing:
                mad = float(np.median(np.abs(np.array(history) - median)))
                hit = bool(value > median + max(1.4826 * mad, median / 100))
            else:
                hit = bool(value > factor * median)
        # A spike's values stay out of the window, however long it fires.
        if not firing and not hit:
            pushed.append(value)
        if not firing:
            if hit:
                out.append(("firing", i))
                firing, held, clear = True, 0, 0
            continue
        held += 1
        clear = 0 if hit else clear + (hit is False)
        if clear >= resolve_steps:
            out.append(("resolved", i))
            firing, held, clear = False, 0, 0
    return out


def test_spike_fires_on_the_spike_step_and_resolves_after_five_calm_steps() -> None:
    rng = np.random.default_rng(0)
    values = list(1.0 + 0.1 * rng.random(200))
    values[120] = 3.0
    steps = [START + 2 * i for i in range(200)]  # logged every other step
    rule = SpikeCondition(factor=2.0, window=50)
    transitions = preview(rule, steps, values)
    assert brief(transitions) == [("firing", START + 240), ("resolved", START + 250)]
    median = float(np.median(values[70:120]))
    fired = transitions[0]
    assert fired.threshold == pytest.approx(2.0 * median, rel=1e-15)
    assert fired.measured == 3.0
    assert fired.reason == f"3 > {2 * median:.4g} (2 × median {median:.4g}) for 1 step"
    # While it fires, the spike is judged against the window from before it: back within
    # one noise SD (1.4826 MAD) of its median.
    before = np.array(values[70:120])
    noise = 1.4826 * float(np.median(np.abs(before - median)))
    assert transitions[1].threshold == pytest.approx(median + noise, rel=1e-12)
    assert transitions[1].reason.endswith(" for 5 steps") and transitions[1].worst == 3.0


def test_spike_needs_min_history_and_ignores_non_finite_values() -> None:
    steps, values = flat_with(40, 1.0, i3=5.0, i10=5.0, i20=math.nan, i21=math.inf, i30=5.0)
    rule = SpikeCondition(factor=2.0, window=20)  # min_history 10: step +3 is not judged
    assert rule.history_needed == 10
    assert brief(preview(rule, steps, values)) == [
        ("firing", START + 10),
        ("resolved", START + 15),
        ("firing", START + 21),  # +Inf exceeds any multiple; NaN at +20 is not judged
        ("resolved", START + 26),
        ("firing", START + 30),
        ("resolved", START + 35),
    ]
    state, _ = evaluate(rule, RuleState(), steps, values)
    assert len(state.window) == 20 and all(math.isfinite(v) for _, v in state.window)
    early = SpikeCondition(factor=2.0, window=20, min_history=3)
    assert brief(preview(early, steps, values))[:2] == [
        ("firing", START + 3),
        ("resolved", START + 8),
    ]


@pytest.mark.parametrize("seed", range(4))
def test_spike_matches_a_numpy_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = list(np.exp(rng.normal(0.0, 0.4, size=500)))
    steps = list(range(START, START + 500))
    rule = SpikeCondition(factor=2.0, window=30, min_history=5)
    expected = [(state, START + i) for state, i in spike_reference(values, 2.0, 30, 5)]
    assert len(expected) >= 4
    assert brief(preview(rule, steps, values)) == expected


def test_spike_on_the_real_gpt2_grad_norm() -> None:
    steps, grad_norm = [], []
    for line in LLMC_LOG.read_text().splitlines():
        if match := re.match(r"s:(\d+) trl:\S+ lr:\S+ norm:(\S+)", line):
            steps.append(int(match[1]))
            grad_norm.append(float(match[2]))
    transitions = preview(SpikeCondition(factor=3.0, window=50), steps, grad_norm)
    # The four spikes of that run, each resolved once the norm has been back within a noise
    # SD of its level for 5 steps: 7 to 12 steps after the spike, its recovery included.
    assert brief(transitions) == [
        (state, step + offset)
        for step, back in ((4233, 12), (7435, 12), (9025, 17), (9954, 6))
        for state, offset in (("firing", 0), ("resolved", back))
    ]
    assert [t.value for t in transitions[::2]] == [0.83, 1.44, 2.02, 0.95]


def test_spike_on_one_layer_of_48_selected_by_a_glob() -> None:
    rng = np.random.default_rng(7)
    names = [f"grad/norm/layers.{i}" for i in range(48)]
    names += [f"grad/norm/layers.{i}.mlp.w1" for i in range(48)]
    names += ["grad/norm/total", "params/norm/layers.3", "grad/norm/layers.3/w1"]
    n = 300
    steps = list(range(START, START + n))
    series = {name: list(0.5 + 0.05 * rng.random(n)) for name in names}
    series["grad/norm/layers.17.mlp.w1"][200] = 2.0
    series["params/norm/layers.3"][150] = 50.0  # not selected, so never evaluated
    selected = [name for name in names if metric_matches("grad/norm/layers.*", name)]
    assert len(selected) == 96 and "grad/norm/layers.3/w1" not in selected
    rule = SpikeCondition(factor=2.5, window=64)
    fired = {name: brief(preview(rule, steps, series[name])) for name in selected}
    assert {name: t for name, t in fired.items() if t} == {
        "grad/norm/layers.17.mlp.w1": [("firing", START + 200), ("resolved", START + 205)]
    }


# --- slope and forecast ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_linear_fit_matches_polyfit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    steps = np.sort(rng.choice(100_000, size=n, replace=False)) + 10 ** int(rng.integers(0, 7))
    values = rng.normal(size=n) * 10.0 ** float(rng.integers(-3, 4)) + 1e-4 * steps
    slope, level = linear_fit(steps.tolist(), values.tolist())
    reference = np.polyfit(steps.astype(float), values, 1)
    np.testing.assert_allclose(slope, reference[0], rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(level, np.polyval(reference, steps[-1]), rtol=1e-9, atol=1e-9)


def test_linear_fit_rejects_degenerate_input() -> None:
    with pytest.raises(ValueError, match="at least 2 points"):
        linear_fit([5], [1.0])
    with pytest.raises(ValueError, match="must not all be equal"):
        linear_fit([5, 5], [1.0, 2.0])


def final_norm_like(seed: int, n: int = 1500) -> tuple[list[int], list[float]]:
    """An RMSNorm gain's norm: slow growth, a steeper slope after a config change, noise."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(1, 4, size=n)) + 80_000
    kink = steps[n // 2]
    values = 340.0 + 0.004 * (steps - steps[0]) + 0.03 * np.maximum(steps - kink, 0)
    values = values + rng.normal(0.0, 0.3, size=n)
    values[n * 3 // 4 :] -= 25.0  # weight decay switched on
    return steps.tolist(), values.tolist()


CROSSED = "crossed"


def verdict_machine(
    verdicts: list[bool | str | None], steps: list[int], resolve_steps: int = 1
) -> list[tuple[str, int]]:
    """for_steps 1, no cooldown: fire on a True; resolve after ``resolve_steps`` Falses in a
    row, or at once on ``CROSSED``; None (and ``CROSSED`` while not firing) holds."""
    out: list[tuple[str, int]] = []
    firing, clear = False, 0
    for verdict, step in zip(verdicts, steps, strict=True):
        if not firing:
            if verdict is True:
                out.append(("firing", step))
                firing, clear = True, 0
            continue
        if verdict is True:
            clear = 0
        elif verdict is False:
            clear += 1
        if verdict == CROSSED or clear >= resolve_steps:
            out.append(("resolved", step))
            firing, clear = False, 0
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("op", [">", "<"])
def test_slope_matches_polyfit(seed: int, op: str) -> None:
    steps, values = final_norm_like(seed)
    window, x = 60, 20.0 if op == ">" else -5.0
    verdicts: list[bool | str | None] = [None] * (window - 1)
    slopes = []
    for i in range(window - 1, len(steps)):
        slope = (
            1000 * np.polyfit(steps[i - window + 1 : i + 1], values[i - window + 1 : i + 1], 1)[0]
        )
        slopes.append(slope)
        verdicts.append(bool(slope > x) if op == ">" else bool(slope < x))
    expected = verdict_machine(verdicts, steps)
    assert expected
    rule = parse_condition({"kind": "slope", "op": op, "per_1k_steps": x, "window": window})
    transitions = preview(rule, steps, values)
    assert brief(transitions) == expected
    for t in transitions:
        np.testing.assert_allclose(t.measured, slopes[steps.index(t.step) - window + 1], rtol=1e-7)
        assert t.threshold == x
    assert re.fullmatch(
        rf"slope [+-][\d.e+-]+ per 1k steps {re.escape(op)} {x:.4g} over the last 60 points "
        r"for 1 step",
        transitions[0].reason,
    )


def forecast_machine(
    entries: list[float | str | None],
    steps: list[int],
    within: int,
    window: int,
    resolve_steps: int = 10,
) -> list[tuple[str, int]]:
    """The forecast's states from the projected steps to the crossing (``CROSSED`` once
    crossed, None before a full window): fire under ``within``; resolve after
    ``resolve_steps`` steps in a row projected at ``2 · within`` or more, or at once when
    crossed, and then stay quiet until as many steps in a row, and a whole ``window`` of
    them, are that clear again."""
    out: list[tuple[str, int]] = []
    firing, handed, clear = False, False, 0
    for entry, step in zip(entries, steps, strict=True):
        crossed = entry == CROSSED
        left = None if entry is None or crossed else float(entry)  # type: ignore[arg-type]
        hit = None if left is None else left < within
        calm = hit is False and left is not None and left >= 2 * within
        if firing:
            if hit:
                clear = 0
            elif hit is False:
                clear = clear + 1 if calm else 0
            if crossed or (hit is False and clear >= resolve_steps):
                out.append(("resolved", step))
                firing, handed, clear = False, crossed, 0
        elif handed:
            clear = clear + 1 if calm else 0
            if clear >= max(resolve_steps, window):
                handed, clear = False, 0
        elif hit:
            out.append(("firing", step))
            firing, clear = True, 0
    return out


@pytest.mark.parametrize("seed", range(4))
def test_forecast_matches_polyfit(seed: int) -> None:
    steps, values = final_norm_like(seed)
    window, threshold, within = 80, 372.0, 600
    entries: list[float | str | None] = [None] * (window - 1)
    for i in range(window - 1, len(steps)):
        xs, ys = steps[i - window + 1 : i + 1], values[i - window + 1 : i + 1]
        slope, intercept = np.polyfit(xs, ys, 1)
        if values[i] >= threshold:
            entries.append(CROSSED)
        elif slope <= 0:
            entries.append(math.inf)
        else:
            entries.append((threshold - intercept) / slope - steps[i])
    expected = forecast_machine(entries, steps, within, window)
    assert len(expected) >= 2
    rule = ForecastCondition(value=threshold, within_steps=within, window=window)
    assert brief(preview(rule, steps, values)) == expected


def test_forecast_warns_before_the_crossing_and_hands_over_when_it_crosses() -> None:
    # value = 300 + 0.05 k: 50 per 1k steps; reaches 360.025 at k = 1200.5.
    k = np.arange(1400)
    values = (300.0 + 0.05 * k).tolist()
    values[1300:] = [100.0] * 100  # back down at k = 1300
    steps = (START + k).tolist()
    rule = ForecastCondition(op=">=", value=360.025, within_steps=500, window=50)
    transitions = preview(rule, steps, values)
    # steps left = 1200.5 - k < 500 from k = 701; crossed at k = 1201: handed over, and no
    # new firing while crossed or after (falling away from the threshold).
    assert brief(transitions) == [("firing", START + 701), ("resolved", START + 1201)]
    fired = transitions[0]
    assert fired.threshold == 360.025
    assert fired.measured == pytest.approx(499.5)
    assert fired.reason == (
        "projected to reach ≥ 360 in ~499.5 steps "
        "(slope +50 per 1k steps over the last 50 points) for 1 step"
    )
    assert transitions[1].reason == "crossed: 360.1 ≥ 360 (handed over to the threshold)"
    falling = ForecastCondition(op="<=", value=-360.025, within_steps=500, window=50)
    negated = [-v for v in values[:1300]]
    assert brief(preview(falling, steps[:1300], negated)) == [
        ("firing", START + 701),
        ("resolved", START + 1201),
    ]


def test_slope_and_forecast_wait_for_a_full_window_of_finite_points() -> None:
    steps = list(range(START, START + 12))
    values = [float(i) for i in range(12)]
    values[4] = math.nan
    rule = SlopeCondition(per_1k_steps=500.0, window=5)  # slope is 1000 per 1k steps
    # Finite points 0..3 and 5..: the window first holds five at index 5, not 4.
    assert brief(preview(rule, steps, values)) == [("firing", START + 5)]
    state, _ = evaluate(rule, RuleState(), steps, values)
    assert [s - START for s, _ in state.window] == [7, 8, 9, 10, 11]


# --- stale -----------------------------------------------------------------------------


def test_stale_due_boundary() -> None:
    assert stale_due(1000.0, 1299.9, 300.0) is False
    assert stale_due(1000.0, 1300.0, 300.0) is True


def test_stale_fires_once_per_stall_and_a_new_step_resolves_it() -> None:
    rule = StaleCondition(seconds=300.0)
    state, transitions = evaluate(rule, RuleState(), [5, 6], [0.3, 0.4], now_unix=1000.0)
    assert transitions == [] and (state.last_step, state.last_seen_unix) == (6, 1000.0)
    state, transitions = check_stale(rule, state, 1299.0)
    assert transitions == [] and state.status == "ok"
    state, transitions = check_stale(rule, state, 1312.0)
    assert transitions == [
        Transition("firing", 6, 0.4, 300.0, 312.0, "no new step for 312 s (limit 300 s)", 6)
    ]
    state, transitions = check_stale(rule, state, 1500.0)
    assert transitions == [] and state.status == "firing"
    # A re-sent batch brings no new step: still stale.
    state, transitions = evaluate(rule, state, [5, 6], [0.3, 0.4], now_unix=1600.0)
    assert transitions == [] and state.last_seen_unix == 1000.0
    state, transitions = evaluate(rule, state, [6, 7, 8], [0.4, 0.5, 0.6], now_unix=1700.0)
    assert transitions == [
        Transition("resolved", 7, 0.5, 300.0, 700.0, "new step after 700 s (limit 300 s)", 6)
    ]
    assert (state.status, state.last_step, state.last_seen_unix) == ("ok", 8, 1700.0)


def test_stale_needs_a_first_step_and_arrival_times() -> None:
    rule = StaleCondition(seconds=10.0)
    assert check_stale(rule, RuleState(), 1e12) == (RuleState(), [])
    with pytest.raises(ValueError, match="needs now_unix"):
        evaluate(rule, RuleState(), [1], [1.0])
    with pytest.raises(ValueError, match="arrival times"):
        preview(rule, [1], [1.0])


# --- batches, re-sends and stored state ------------------------------------------------


def test_resent_steps_are_ignored() -> None:
    steps, values = flat_with(20, 1.0, i8=9.0, i9=9.0, i10=9.0)
    rule = ThresholdCondition(op=">", value=5.0, for_steps=2)
    state, first = evaluate(rule, RuleState(), steps[:10], values[:10])
    assert brief(first) == [("firing", START + 9)]
    again, repeated = evaluate(rule, state, steps[:10], values[:10])
    assert repeated == [] and again == state
    # An overlapping batch: only its new steps count (+8, +9 were counted already).
    state, rest = evaluate(rule, state, steps[8:], values[8:])
    assert brief(rest) == [("resolved", START + 11)]


def test_evaluate_does_not_modify_the_given_state() -> None:
    rule = SpikeCondition(window=4)
    state = RuleState(window=[(1, 1.0), (2, 1.0)], last_step=2, last_value=1.0)
    before = state.to_dict()
    evaluate(rule, state, [3, 4, 5], [1.0, 9.0, 1.0])
    assert state.to_dict() == before


def test_rejects_unordered_or_mismatched_batches() -> None:
    rule = ThresholdCondition(op=">", value=1.0)
    with pytest.raises(ValueError, match=r"steps\[2\]: 3 does not follow 4"):
        evaluate(rule, RuleState(), [1, 4, 3], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="differ in length: 2 != 1"):
        evaluate(rule, RuleState(), [1, 2], [0.0])


def noisy_series(seed: int, n: int) -> tuple[list[int], list[float]]:
    rng = np.random.default_rng(seed)
    steps = (np.cumsum(rng.integers(1, 5, size=n)) + START).tolist()
    values = (1.0 + 0.002 * np.arange(n) + 0.2 * rng.normal(size=n)).tolist()
    for i in rng.choice(n, size=n // 25, replace=False):
        values[int(i)] *= float(rng.choice([3.0, -1.0, 6.0]))
    for i in rng.choice(n, size=n // 40, replace=False):
        values[int(i)] = float(rng.choice([math.nan, math.inf, -math.inf]))
    return steps, values


RULES: list[StepCondition] = [
    ThresholdCondition(op=">=", value=1.6, for_steps=2, cooldown_steps=7),
    NonFiniteCondition(cooldown_steps=3),
    SpikeCondition(factor=2.5, window=20, for_steps=1),
    SlopeCondition(op=">", per_1k_steps=1.0, window=15, for_steps=2),
    ForecastCondition(op=">=", value=2.0, within_steps=300, window=25, cooldown_steps=10),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.kind)
def test_state_round_trips_through_json_mid_series(seed: int, rule: StepCondition) -> None:
    steps, values = noisy_series(seed, 600)
    whole_state, whole = evaluate(rule, RuleState(), steps, values)
    assert whole, "the series should make every rule change state"
    rng = np.random.default_rng(1000 + seed)
    cuts = sorted({0, len(steps), *rng.integers(1, len(steps), size=8).tolist()})
    state, pieces = RuleState(), []
    for a, b in zip(cuts, cuts[1:], strict=False):
        resend_from = max(0, a - int(rng.integers(0, 5)))  # overlap: some steps sent twice
        state, transitions = evaluate(rule, state, steps[resend_from:b], values[resend_from:b])
        pieces.extend(transitions)
        stored = json.dumps(state.to_dict(), allow_nan=False)
        state = RuleState.from_dict(json.loads(stored))
    assert [t.to_dict() for t in pieces] == [t.to_dict() for t in whole]
    assert state.to_dict() == whole_state.to_dict()


def test_state_document_shape() -> None:
    state = RuleState(
        status="firing",
        streak=3,
        window=[(10, 1.5), (11, 2.5)],
        last_step=11,
        last_value=math.inf,
        last_seen_unix=1.7e9,
        fired_at_step=11,
        cooldown_until_step=None,
        clear=1,
        held=4,
        repeats=2,
        notified_step=9,
        notified_unix=1.7e9 - 5,
        worst=math.inf,
    )
    doc = state.to_dict()
    assert doc == {
        "version": 3,
        "status": "firing",
        "streak": 3,
        "window": [[10, 1.5], [11, 2.5]],
        "last_step": 11,
        "last_value": "Infinity",
        "last_seen_unix": 1.7e9,
        "fired_at_step": 11,
        "cooldown_until_step": None,
        "clear": 1,
        "held": 4,
        "repeats": 2,
        "notified_step": 9,
        "notified_unix": 1.7e9 - 5,
        "worst": "Infinity",
        "handed_over": False,
    }
    assert RuleState.from_dict(json.loads(json.dumps(doc))) == state
    # A state stored before resolve and repeat bookkeeping reads as having none yet.
    later = ("clear", "held", "repeats", "notified_step", "notified_unix", "worst", "handed_over")
    first = {k: v for k, v in doc.items() if k not in later}
    old = RuleState.from_dict({**first, "version": 1})
    assert (old.clear, old.held, old.repeats, old.notified_step, old.worst) == (0, 0, 0, None, None)
    # One stored before the wall time of notifications was kept reads as not knowing it.
    second = {k: v for k, v in doc.items() if k != "notified_unix"}
    assert RuleState.from_dict({**second, "version": 2}) == replace(state, notified_unix=None)
    nan_state = RuleState.from_dict({**doc, "last_value": "NaN"})
    assert math.isnan(nan_state.last_value or 0.0)


@pytest.mark.parametrize(
    "doc",
    [
        {"status": "burning"},
        {"streak": -1},
        {"window": [[1, "NaN"]]},
        {"window": [[1]]},
        {"version": 4},
        {"clear": -1},
        {"notified_unix": "NaN"},
        {"surprise": True},
    ],
)
def test_malformed_state_documents_are_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RuleState.from_dict({**RuleState().to_dict(), **doc})


def test_transition_document_encodes_non_finite_values() -> None:
    (fired,) = preview(NonFiniteCondition(), [1, 2], [1.0, -math.inf])[:1]
    assert fired.to_dict() == {
        "state": "firing",
        "step": 2,
        "value": "-Infinity",
        "threshold": None,
        "measured": "-Infinity",
        "reason": "-Inf, not finite, for 1 step",
        "fired_at_step": 2,
        "repeat": 0,
        "worst": None,
    }
    json.dumps(fired.to_dict(), allow_nan=False)
