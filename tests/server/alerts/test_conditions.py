"""Alert conditions: the contract's documents parsed, bad ones refused with the field named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from normwatch.server.alerts.conditions import (
    ForecastCondition,
    NonFiniteCondition,
    SlopeCondition,
    SpikeCondition,
    StaleCondition,
    ThresholdCondition,
    parse_condition,
)


def test_parses_the_contract_example_and_every_kind() -> None:
    rule = parse_condition({"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 1})
    assert rule == ThresholdCondition(op=">=", value=5.0, for_steps=1, cooldown_steps=0)
    assert parse_condition({"kind": "non_finite"}) == NonFiniteCondition()
    spike = parse_condition({"kind": "spike", "factor": 3, "window": 50})
    assert isinstance(spike, SpikeCondition) and spike.history_needed == 25
    slope = parse_condition({"kind": "slope", "per_1k_steps": 2.5})
    assert slope == SlopeCondition(op=">", per_1k_steps=2.5, window=100)
    forecast = parse_condition({"kind": "forecast", "value": 5, "within_steps": 2000})
    assert forecast == ForecastCondition(op=">=", value=5.0, within_steps=2000, window=100)
    assert parse_condition({"kind": "stale", "seconds": 600}) == StaleCondition(seconds=600.0)
    assert parse_condition(forecast.model_dump()) == forecast


THRESHOLD = {"kind": "threshold", "op": ">", "value": 1}


GE = "greater than or equal to"


@pytest.mark.parametrize(
    ("doc", "loc", "message"),
    [
        ({"op": ">", "value": 1}, (), "Unable to extract tag using discriminator 'kind'"),
        ({"kind": "median", "value": 1}, (), "'median' found using 'kind' does not match"),
        ({"kind": "threshold", "value": 1}, ("threshold", "op"), "Field required"),
        ({**THRESHOLD, "op": "=="}, ("threshold", "op"), "'>', '>=', '<' or '<='"),
        ({**THRESHOLD, "value": "NaN"}, ("threshold", "value"), "finite number"),
        ({**THRESHOLD, "for_steps": 0}, ("threshold", "for_steps"), f"{GE} 1"),
        ({**THRESHOLD, "for_step": 2}, ("threshold", "for_step"), "Extra inputs"),
        ({"kind": "non_finite", "cooldown_steps": -1}, ("non_finite", "cooldown_steps"), f"{GE} 0"),
        ({"kind": "spike", "factor": 1.0}, ("spike", "factor"), "greater than 1"),
        ({"kind": "spike", "window": 10, "min_history": 11}, ("spike",), "exceed window (10)"),
        ({"kind": "slope", "per_1k_steps": 1, "window": 1}, ("slope", "window"), f"{GE} 2"),
        ({"kind": "slope", "per_1k_steps": 1, "window": 10**6}, ("slope", "window"), "2000"),
        ({"kind": "forecast", "value": 5}, ("forecast", "within_steps"), "Field required"),
        ({"kind": "stale", "seconds": 0}, ("stale", "seconds"), "greater than 0"),
        ({"kind": "stale", "seconds": 5, "for_steps": 1}, ("stale", "for_steps"), "Extra inputs"),
    ],
)
def test_bad_conditions_are_refused_with_the_field_named(
    doc: dict[str, Any], loc: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError) as err:  # what the API's callers catch
        parse_condition(doc)
    assert isinstance(err.value, ValidationError)
    assert message in str(err.value)
    errors = err.value.errors()
    assert len(errors) == 1 and tuple(errors[0]["loc"]) == loc
