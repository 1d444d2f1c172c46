"""Parsing and validation of columnar metric batches.

A batch is rejected whole, with a message naming the field and index, or accepted
whole: nothing of a bad batch reaches storage.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
MAX_METRIC_NAME = 512
INT64_MAX = 2**63 - 1


class BatchError(ValueError):
    """A batch that cannot be stored; ``str()`` says which field and index, and why."""


class BodyNotJson(BatchError):
    """The body does not decode as JSON at all."""


@dataclass(frozen=True)
class MetricColumn:
    """One metric's values, with ``logged`` False where the trainer sent null."""

    name: str
    values: npt.NDArray[np.float64]
    logged: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class MetricBatch:
    steps: npt.NDArray[np.int64]
    columns: list[MetricColumn]
    segment: int | None

    @property
    def point_count(self) -> int:
        return int(sum(int(c.logged.sum()) for c in self.columns))


def loads(body: bytes) -> Any:
    """Decode JSON, accepting the bare ``NaN``/``Infinity`` tokens some encoders emit."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as fast_err:
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise BodyNotJson(f"body is not valid JSON: {fast_err}") from None


def parse_batch(doc: Any, *, max_points: int) -> MetricBatch:
    """Validate a decoded batch document and return it as arrays.

    Raises ``BatchError`` for a malformed batch and ``BatchTooLarge`` for one carrying
    more than ``max_points`` values.
    """
    if not isinstance(doc, dict):
        raise BatchError("body must be a JSON object with 'steps' and 'metrics'")
    unknown = set(doc) - {"steps", "metrics", "segment"}
    if unknown:
        raise BatchError(f"unknown field(s): {', '.join(sorted(unknown))}")
    steps = _parse_steps(doc.get("steps"))
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        raise BatchError("metrics: must be an object mapping metric name to an array of values")
    if len(steps) * len(metrics) > max_points:
        raise BatchTooLarge(
            f"batch carries {len(steps) * len(metrics)} values, above the limit of {max_points}; "
            "send smaller batches"
        )
    columns = [_parse_column(name, vals, len(steps)) for name, vals in metrics.items()]
    segment = doc.get("segment")
    if segment is not None and (type(segment) is not int or segment < 1):
        raise BatchError(f"segment: must be a positive integer, got {segment!r}")
    return MetricBatch(steps=steps, columns=columns, segment=segment)


class BatchTooLarge(BatchError):
    """The batch is well-formed but over the configured size."""


def _parse_steps(raw: Any) -> npt.NDArray[np.int64]:
    if not isinstance(raw, list):
        raise BatchError("steps: must be an array of integer steps")
    for i, step in enumerate(raw):
        if type(step) is not int:
            raise BatchError(f"steps[{i}]: must be an integer, got {step!r}")
        if step < 0 or step > INT64_MAX:
            raise BatchError(f"steps[{i}]: must be between 0 and {INT64_MAX}, got {step}")
    steps = np.array(raw, dtype=np.int64)
    if len(steps) > 1:
        order = np.argsort(steps, kind="stable")
        dup = np.flatnonzero(steps[order][1:] == steps[order][:-1])
        if len(dup):
            i = int(order[dup[0] + 1])
            raise BatchError(f"steps[{i}]: step {int(steps[i])} appears more than once")
    return steps


def _parse_column(name: Any, raw: Any, length: int) -> MetricColumn:
    if not isinstance(name, str) or not name or len(name) > MAX_METRIC_NAME:
        raise BatchError(f"metrics: name {name!r} must be 1 to {MAX_METRIC_NAME} characters")
    if any(ord(c) < 32 for c in name):
        raise BatchError(f"metrics: name {name!r} contains a control character")
    if not isinstance(raw, list):
        raise BatchError(f"metrics[{name!r}]: must be an array of values")
    if len(raw) != length:
        raise BatchError(
            f"metrics[{name!r}]: has {len(raw)} values but steps has {length}; "
            "every array must have the length of steps"
        )
    kinds = set(map(type, raw))
    if kinds <= {float, int} and int not in kinds:
        values = np.array(raw, dtype=np.float64)
        return MetricColumn(name, values, np.ones(length, dtype=np.bool_))
    values = np.empty(length, dtype=np.float64)
    logged = np.ones(length, dtype=np.bool_)
    for i, v in enumerate(raw):
        kind = type(v)
        if kind is float:
            values[i] = v
        elif kind is int:
            try:
                values[i] = float(v)
            except OverflowError:
                raise BatchError(f"metrics[{name!r}][{i}]: {v} is out of float range") from None
        elif v is None:
            logged[i] = False
            values[i] = math.nan
        elif kind is str and v in NON_FINITE:
            values[i] = NON_FINITE[v]
        else:
            raise BatchError(
                f'metrics[{name!r}][{i}]: must be a number, null, "NaN", "Infinity" or '
                f'"-Infinity", got {v!r}'
            )
    return MetricColumn(name, values, logged)
