"""The writer's merge of queued records into one wire document: the fast columnar path for
the usual batch gives exactly what the general per-value loop gives, and a float32 goes on
the wire as its exact float64."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import numpy as np
import orjson
from hypothesis import given
from hypothesis import strategies as st

from normwatch.client import PackedMetrics
from normwatch.client._batch import dumps, merge_records

NAMES = ["grad/norm/total", "params/norm/total", "grad/norm/layers.0", "train/loss"]
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(min_value=-1e3, max_value=1e3),
    st.integers(min_value=-5, max_value=5),
)
record = st.tuples(
    st.integers(min_value=0, max_value=12),
    st.dictionaries(st.sampled_from(NAMES), values, max_size=len(NAMES)),
)


def general(records: list[tuple[int, Any]]) -> Any:
    # A mapping that is not a dict always takes the general loop.
    return merge_records([(step, MappingProxyType(metrics)) for step, metrics in records])


def same(left: Any, right: Any) -> None:
    assert left.document["steps"] == right.document["steps"]
    assert left.document["metrics"] == right.document["metrics"]
    assert (left.points, left.rejected_points) == (right.points, right.rejected_points)


@given(st.lists(record, max_size=12))
def test_fast_path_matches_the_general_loop(records: list[tuple[int, dict[str, Any]]]) -> None:
    same(merge_records([(step, dict(metrics)) for step, metrics in records]), general(records))


def test_shared_names_transpose_into_columns() -> None:
    every_step = {"grad/norm/total": 1.0, "train/loss": 2.0}
    records: list[tuple[int, Any]] = [(step, dict(every_step)) for step in (3, 1, 2)]
    records.append((4, {**every_step, "grad/norm/layers.0": 0.5}))
    merged = merge_records(records)
    assert merged.document == {
        "steps": [1, 2, 3, 4],
        "metrics": {
            "grad/norm/total": [1.0, 1.0, 1.0, 1.0],
            "train/loss": [2.0, 2.0, 2.0, 2.0],
            "grad/norm/layers.0": [None, None, None, 0.5],
        },
    }
    assert merged.points == 9
    same(merged, general(records))


def test_non_finite_values_and_repeated_steps_take_the_general_loop() -> None:
    merged = merge_records([(1, {"a": float("nan")}), (2, {"a": 1.0}), (2, {"a": 3.0})])
    assert merged.document == {"steps": [1, 2], "metrics": {"a": ["NaN", 1.0]}}


def test_a_metric_logged_twice_at_a_step_keeps_its_first_value_and_counts_the_rest() -> None:
    merged = merge_records(
        [
            (7, {"loss": 2.0}),
            (7, {"grad/norm": 0.5, "loss": 9.0}),  # another metric of the step merges
            (8, {"loss": 1.5}),
            (7, {"loss": float("nan"), "lr": 1e-3}),
            (8, {"loss": 4.0}),
        ]
    )
    assert merged.document == {
        "steps": [7, 8],
        "metrics": {"loss": [2.0, 1.5], "grad/norm": [0.5, None], "lr": [1e-3, None]},
    }
    assert (merged.points, merged.repeated, merged.repeated_points) == (4, {"loss": (3, 7)}, 3)


def test_packed_metrics_of_the_wrong_size_are_rejected_not_raised() -> None:
    packed = PackedMetrics(["a", "b", "c"], [1.0, 2.0])
    merged = merge_records([(1, packed), (2, {"a": 1.0})])
    assert merged.document == {"steps": [2], "metrics": {"a": [1.0]}}
    assert merged.rejected_points == 3
    assert any("PackedMetrics" in reason for reason in merged.rejected.values())


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1))
def test_float32s_go_on_the_wire_as_their_exact_float64(drawn: list[float]) -> None:
    narrow = np.array(drawn, np.float32)
    exact = [float(v) for v in narrow.astype(np.float64)]
    records: list[tuple[int, Any]] = [
        (step, {"np": value, "vector": narrow[step : step + 1]})
        for step, value in enumerate(narrow)
    ]
    records += [
        (len(narrow) + step, PackedMetrics(["packed"], narrow[step : step + 1]))
        for step in range(len(narrow))
    ]
    wire = orjson.loads(dumps(merge_records(records).document))
    # Never the float32's own shortest digits (2.999939 for 2.99993896484375): another float64.
    assert wire["metrics"]["np"][: len(narrow)] == exact
    assert wire["metrics"]["vector"][: len(narrow)] == exact
    assert wire["metrics"]["packed"][len(narrow) :] == exact
    assert (
        json.loads(json.dumps(merge_records(records).document))["metrics"]["np"][: len(narrow)]
        == exact
    )
