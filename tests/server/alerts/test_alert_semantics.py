"""What an on-call person gets from a rule: one alert through a noisy excursion
(``resolve_steps``, ``resolve_value``), repeats while it lasts, a cooldown that never hides
a condition still true, a forecast that hands over once crossed, one alert a spike."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from normwatch.server.alerts.conditions import (
    ForecastCondition,
    SpikeCondition,
    ThresholdCondition,
    parse_condition,
)
from normwatch.server.alerts.evaluation import RuleState, Transition, evaluate, preview

START = 83_000


def brief(transitions: list[Transition]) -> list[tuple[str, int, int]]:
    return [(t.state, t.step, t.repeat) for t in transitions]


def excursion(seed: int = 0) -> tuple[list[int], list[float]]:
    """The demo's grad norm after 83.7k: about 1.5, then 2,000 steps mostly at 5-8.5 with
    one-to-three-step dips under 5 (about 150 of them), then calm again."""
    rng = np.random.default_rng(seed)
    calm = 1.5 + 0.1 * rng.random(300)
    high = 5.0 + 3.5 * rng.random(2000)
    dips = rng.choice(2000 - 3, size=60, replace=False)
    for at in dips:
        high[at : at + int(rng.integers(1, 4))] = 4.0 + 0.9 * rng.random()
    values = np.concatenate([calm, high, calm])
    return list(range(START, START + len(values))), values.tolist()


def test_without_hysteresis_the_excursion_flaps_and_with_it_alerts_once() -> None:
    steps, values = excursion()
    flapping = preview(ThresholdCondition(op=">=", value=5.0), steps, values)
    assert len(flapping) > 50
    rule = ThresholdCondition(op=">=", value=5.0, resolve_steps=10)
    once = preview(rule, steps, values)
    high = [i for i, v in enumerate(values) if v >= 5.0]
    assert brief(once) == [("firing", START + high[0], 0), ("resolved", START + high[-1] + 10, 0)]
    assert once[1].reason.endswith("no longer ≥ 5 for 10 steps")
    assert once[1].worst == max(values)


def test_resolve_value_keeps_a_value_between_the_two_lines_firing() -> None:
    rule = ThresholdCondition(op=">=", value=5.0, resolve_value=4.0)
    values = [1.0, 6.0, 4.5, 4.9, 4.5, 3.9, 4.5, 1.0]
    steps = list(range(START, START + len(values)))
    assert brief(preview(rule, steps, values)) == [
        ("firing", START + 1, 0),
        ("resolved", START + 5, 0),
    ]
    both = ThresholdCondition(op="<", value=0.1, resolve_value=0.2, resolve_steps=2)
    low = [1.0, 0.05, 0.15, 0.25, 0.05, 0.3, 0.3, 0.3]
    assert brief(preview(both, steps, low)) == [
        ("firing", START + 1, 0),
        ("resolved", START + 6, 0),
    ]


@pytest.mark.parametrize(("op", "resolve"), [(">=", 6.0), (">", 5.5), ("<", 4.0), ("<=", 4.9)])
def test_a_resolve_value_on_the_firing_side_is_refused(op: str, resolve: float) -> None:
    with pytest.raises(ValidationError, match="resolve_value"):
        parse_condition({"kind": "threshold", "op": op, "value": 5.0, "resolve_value": resolve})


def test_a_firing_alert_repeats_with_the_worst_value_so_far() -> None:
    values = [1.0] * 10 + [5.0 + (i % 7) for i in range(250)] + [1.0] * 10
    steps = list(range(START, START + len(values)))
    rule = ThresholdCondition(op=">=", value=5.0)
    got = preview(rule, steps, values, repeat_every_steps=100)
    assert brief(got) == [
        ("firing", START + 10, 0),
        ("firing", START + 110, 1),
        ("firing", START + 210, 2),
        ("resolved", START + 260, 0),
    ]
    assert [t.worst for t in got] == [5.0, 11.0, 11.0, 11.0]
    assert got[1].fired_at_step == START + 10 and got[1].value == values[110]
    assert got[1].reason == f"still firing since step {START + 10:,}: now 7, worst 11"
    # Repeats follow the logged steps, and a batch boundary changes nothing.
    state, first = evaluate(rule, RuleState(), steps[:150], values[:150], repeat_every_steps=100)
    _, rest = evaluate(rule, state, steps[150:], values[150:], repeat_every_steps=100)
    assert brief(first + rest) == brief(got)


def test_a_cooldown_never_hides_a_condition_still_true_when_it_ends() -> None:
    rule = ThresholdCondition(op=">=", value=5.0, cooldown_steps=100)
    values = [6.0, 1.0] + [6.0] * 200
    steps = list(range(START, START + len(values)))
    assert brief(preview(rule, steps, values)) == [
        ("firing", START, 0),
        ("resolved", START + 1, 0),
        ("firing", START + 101, 0),  # the cooldown's end, the condition having held since
    ]


def test_a_noisy_forecast_fires_once_and_hands_over_when_crossed() -> None:
    # A noisy rise: a 50-point trend wobbles around the horizon for hundreds of steps, and
    # the value crosses back and forth around the threshold.
    rng = np.random.default_rng(2)
    k = np.arange(3000)
    values = 300.0 + 0.02 * k + rng.normal(0.0, 0.3, size=3000)
    steps = (START + k).tolist()
    threshold = 352.0
    above = values >= threshold
    assert np.count_nonzero(above[1:] != above[:-1]) > 10  # crossed back and forth
    got = preview(ForecastCondition(value=threshold, within_steps=1000, window=50), steps, values)
    assert [t.state for t in got] == ["firing", "resolved"]
    assert got[1].step == START + int(np.argmax(values >= threshold))
    assert got[1].reason.startswith("crossed: ") and "handed over" in got[1].reason


def test_a_forecast_that_handed_over_stays_quiet_through_a_short_level_stretch() -> None:
    # A rise that levels off just under the line for a dozen steps (a flat fit, no
    # crossing projected), then rises again: one warning, one hand-over, nothing more.
    rng = np.random.default_rng(8)
    k = np.arange(800)
    values = np.minimum(1.0 + 0.01 * k, 5.0) + np.maximum(0, k - 600) * 0.01
    values = values + rng.normal(0.0, 0.15, size=800)
    steps = (START + k).tolist()
    condition = ForecastCondition(value=5.0, within_steps=100, window=50)
    got = preview(condition, steps, values)
    assert [t.state for t in got] == ["firing", "resolved"]
    assert "handed over" in got[1].reason
    # After a whole window of calm steps it warns again.
    back = np.concatenate([values[:400], np.full(200, 3.0), 3.0 + 0.01 * np.arange(200)])
    again = preview(condition, steps, back)
    assert [t.state for t in again][:3] == ["firing", "resolved", "firing"]


def test_one_alert_a_spike_through_its_ragged_recovery() -> None:
    rng = np.random.default_rng(4)
    values = 1.0 + 0.05 * rng.random(400)
    # A spike at 200 whose recovery crosses twice the median back and forth for 30 steps.
    values[200:230] = np.where(np.arange(30) % 3 == 0, 1.5, 2.6)
    steps = list(range(START, START + 400))
    rule = SpikeCondition(factor=2.0, window=50)
    assert [(t.state, t.step - START) for t in preview(rule, steps, values.tolist())] == [
        ("firing", 201),
        ("resolved", 234),
    ]
    # Even resolving on one calm step it stays one alert: 1.5 is no spike by the firing
    # limit (2 x 1.025) but is far from back within the noise (1.025 + 0.02).
    raw = SpikeCondition(factor=2.0, window=50, resolve_steps=1)
    assert [(t.state, t.step - START) for t in preview(raw, steps, values.tolist())] == [
        ("firing", 201),
        ("resolved", 230),
    ]


def test_a_spike_fires_until_it_is_back_however_long_that_takes() -> None:
    """The contract's spike extent: a slow recovery is one alert until the value is back
    within a noise SD of the level before it, and a lasting step up has not recovered."""
    stepped = [1.0] * 100 + [3.0] * 200
    steps = list(range(START, START + len(stepped)))
    got = preview(SpikeCondition(factor=2.0, window=50), steps, stepped)
    assert [(t.state, t.step - START) for t in got] == [("firing", 100)]
    # Back to 1.0 after the long stretch: resolved against the level from before it.
    back = stepped + [1.0] * 20
    got = preview(SpikeCondition(factor=2.0, window=50), list(range(START, START + 320)), back)
    assert [(t.state, t.step - START) for t in got] == [("firing", 100), ("resolved", 304)]
    assert math.isclose(got[1].threshold or 0.0, 1.01)
    # A 5x spike decaying with tau = 40 steps over a level of 1.005 with a little noise:
    # resolved once the excess is within the noise (here its floor, a hundredth of the
    # level), 40 ln(4 / 0.01) = 240 steps on, and 5 calm steps after (a window of 50 that
    # took the recovery in as the new level resolved it after 80).
    rng = np.random.default_rng(1)
    t = np.arange(600)
    slow = 1.0 + 0.01 * rng.random(600)
    slow[200:] += 4 * np.exp(-(t[200:] - 200) / 40)
    got = preview(SpikeCondition(factor=2.0, window=50), list(range(START, START + 600)), slow)
    assert [t.state for t in got] == ["firing", "resolved"]
    assert 235 <= got[1].step - got[0].step <= 275, got
