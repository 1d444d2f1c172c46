"""Batch validation: exact messages naming the field and index."""

from __future__ import annotations

import math

import pytest

from normwatch.server.batch import loads, parse_batch
from normwatch.server.errors import BatchError, BatchTooLarge, BodyNotJson


def test_parses_columns_nulls_and_non_finite() -> None:
    batch = parse_batch(
        {"steps": [5, 6], "metrics": {"a": [1, None], "b": ["NaN", "-Infinity"]}}, max_points=10
    )
    a, b = batch.columns
    assert batch.steps.tolist() == [5, 6]
    assert a.values[0] == 1.0 and a.logged.tolist() == [True, False]
    assert math.isnan(b.values[0]) and b.values[1] == -math.inf
    assert batch.point_count == 3


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"steps": [1, True], "metrics": {}}, "steps[1]: must be an integer, got True"),
        ({"steps": [1], "metrics": {"a": ["inf"]}}, "metrics['a'][0]: must be a number"),
        ({"steps": [1], "metrics": {"a": [[1]]}}, "metrics['a'][0]"),
        ({"steps": [1], "metrics": {"": [1]}}, "metrics: name ''"),
        ({"steps": [1], "metrics": {"a": 1}}, "metrics['a']: must be an array"),
        ({"steps": 1, "metrics": {}}, "steps: must be an array"),
        ({"steps": [1], "metrics": {"a": [10**400]}}, "out of float range"),
    ],
)
def test_rejections_name_field_and_index(doc: dict, message: str) -> None:
    with pytest.raises(BatchError) as err:
        parse_batch(doc, max_points=100)
    assert message in str(err.value)


def test_a_step_sent_twice_is_one_step_keeping_each_metrics_first_value() -> None:
    batch = parse_batch(
        {
            "steps": [7, 3, 7, 7],
            "metrics": {"a": [None, 1.0, 2.0, 3.0], "b": ["NaN", None, 5.0, None]},
        },
        max_points=100,
    )
    assert batch.steps.tolist() == [7, 3]  # in the order first sent
    assert batch.values[0].tolist() == [2.0, 1.0] and batch.logged[0].all()
    assert math.isnan(batch.values[1, 0]) and batch.logged[1].tolist() == [True, False]
    assert batch.repeats == {"a": 1, "b": 1} and batch.point_count == 3


def test_too_large() -> None:
    with pytest.raises(BatchTooLarge):
        parse_batch(
            {"steps": list(range(10)), "metrics": {"a": [0] * 10, "b": [0] * 10}}, max_points=19
        )


def test_loads_accepts_bare_non_finite_tokens() -> None:
    doc = loads(b'{"v": [NaN, Infinity, -Infinity]}')
    assert math.isnan(doc["v"][0]) and doc["v"][1:] == [math.inf, -math.inf]
    with pytest.raises(BodyNotJson):
        loads(b"{nope")
