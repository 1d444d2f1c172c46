"""Parsing and validation of columnar metric batches.

A batch is rejected whole, with a message naming the field and index, or accepted
whole: nothing of a bad batch reaches storage.

A step may appear more than once in ``steps`` (two log calls of one step, sent as they
came): its columns are merged, each metric keeping the first value the batch gives it
there. A later value for the same point is not stored and is counted in
`MetricBatch.repeats` (the ingest answer's ``ignored``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
import orjson

from .errors import BatchError, BatchTooLarge, BodyNotJson

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
MAX_METRIC_NAME = 512
INT64_MAX = 2**63 - 1
SEGMENT_MAX = 2**15 - 1
TIME_MAX = 2.0**35
"""The latest ``time`` a batch may give, in unix seconds (the year 3058)."""
_CONTROL = re.compile(r"[\x00-\x1f]")
_INT: frozenset[type] = frozenset({int})
_FLOAT: frozenset[type] = frozenset({float})
_NUMBER: frozenset[type] = frozenset({float, int})


@dataclass(frozen=True)
class MetricColumn:
    """One metric's values, with ``logged`` False where the trainer sent null."""

    name: str
    values: npt.NDArray[np.float64]
    logged: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class MetricBatch:
    """A validated batch as arrays: one row per metric, one column per step.

    ``values[i, j]`` is metric ``names[i]`` at ``steps[j]``; where the trainer sent null,
    ``logged[i, j]`` is False (and ``values[i, j]`` NaN). Steps are distinct, in the order
    they were first sent (a step sent twice is merged, its first value of each metric kept).
    """

    steps: npt.NDArray[np.int64]
    names: list[str]
    values: npt.NDArray[np.float64]
    logged: npt.NDArray[np.bool_]
    segment: int | None
    time: float | None = None
    """When the batch's last step was logged, in unix seconds (the trainer's clock), if the
    batch says; else the server takes the time it arrived."""
    repeats: dict[str, int] = field(default_factory=dict)
    """Per metric, the values the batch gave again for a step it had already given that
    metric a value at (not stored: the first one stands). Empty for the usual batch."""

    @cached_property
    def all_logged(self) -> bool:
        """Every metric has a value at every step (the usual trainer batch)."""
        return bool(self.logged.all())

    @cached_property
    def columns(self) -> list[MetricColumn]:
        """The batch metric by metric (row views, no copies)."""
        return [
            MetricColumn(name, self.values[i], self.logged[i]) for i, name in enumerate(self.names)
        ]

    @cached_property
    def logged_names(self) -> list[str]:
        """Names of the metrics logged at least once in the batch, in batch order."""
        if self.all_logged:
            return list(self.names)
        return [self.names[i] for i in np.flatnonzero(self.logged.any(axis=1)).tolist()]

    @property
    def point_count(self) -> int:
        return int(self.logged.sum())


def loads(body: bytes) -> Any:
    """Decode JSON, accepting the bare ``NaN``/``Infinity`` tokens some encoders emit."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as fast_err:
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            # orjson refuses what json would also refuse, and JSON nested deeper than
            # orjson's 1024 levels, which json would take as deep as the stack allows.
            raise BodyNotJson(f"body is not valid JSON: {fast_err}") from None


def parse_batch(doc: Any, *, max_points: int, max_metrics: int | None = None) -> MetricBatch:
    """Validate a decoded batch document and return it as arrays.

    Raises ``BatchError`` for a malformed batch and ``BatchTooLarge`` for one carrying
    more than ``max_points`` values or more than ``max_metrics`` metric names. Errors name
    the first bad field in document order.
    """
    if not isinstance(doc, dict):
        raise BatchError("body must be a JSON object with 'steps' and 'metrics'")
    unknown = set(doc) - {"steps", "metrics", "segment", "time"}
    if unknown:
        raise BatchError(f"unknown field(s): {', '.join(sorted(unknown))}")
    steps = _parse_steps(doc.get("steps"))
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        raise BatchError("metrics: must be an object mapping metric name to an array of values")
    if max_metrics is not None and len(metrics) > max_metrics:
        raise BatchTooLarge(
            f"metrics: batch carries {len(metrics)} metrics, above the limit of {max_metrics} "
            "a batch; send them in several batches"
        )
    if len(steps) * len(metrics) > max_points:
        raise BatchTooLarge(
            f"batch carries {len(steps) * len(metrics)} values, above the limit of {max_points}; "
            "send smaller batches"
        )
    names, values, logged = _parse_metrics(metrics, len(steps))
    repeats: dict[str, int] = {}
    if len(steps) > 1 and not bool(np.all(steps[1:] > steps[:-1])):
        steps, values, logged, repeats = _merge_repeated_steps(steps, names, values, logged)
    segment = doc.get("segment")
    if segment is not None and (type(segment) is not int or not 1 <= segment <= SEGMENT_MAX):
        raise BatchError(
            f"segment: must be an integer from 1 to {SEGMENT_MAX}, got {_shown(segment)}"
        )
    time = doc.get("time")
    if time is not None and (
        type(time) not in _NUMBER or not math.isfinite(time) or not 0 <= time <= TIME_MAX
    ):
        raise BatchError(
            f"time: must be the unix time in seconds the batch's last step was logged, "
            f"from 0 to {TIME_MAX:.0f}, got {_shown(time)}"
        )
    return MetricBatch(
        steps=steps,
        names=names,
        values=values,
        logged=logged,
        segment=segment,
        time=None if time is None else float(time),
        repeats=repeats,
    )


def _parse_steps(raw: Any) -> npt.NDArray[np.int64]:
    if not isinstance(raw, list):
        raise BatchError("steps: must be an array of integer steps")
    steps: npt.NDArray[np.int64] | None = None
    if set(map(type, raw)) <= _INT:
        try:
            steps = np.array(raw, dtype=np.int64)
        except OverflowError:
            pass  # past int64: named below
    if steps is None or (len(steps) > 0 and int(steps.min()) < 0):
        _reject_steps(raw)
    return steps


def _merge_repeated_steps(
    steps: npt.NDArray[np.int64],
    names: list[str],
    values: npt.NDArray[np.float64],
    logged: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.bool_], dict[str, int]]:
    """Columns of a step sent more than once merged into one, in the order the steps were
    first sent: each metric keeps the first value logged for it at that step (document
    order). Returns the steps, values and logged mask, and per metric how many later values
    were left out. Steps that are all distinct come back as they are."""
    order = np.argsort(steps, kind="stable")
    ordered = steps[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    if len(starts) == len(steps):
        return steps, values, logged, {}
    width = len(steps)
    # Per metric and distinct step, the first column (in document order) that logged it:
    # within a group of equal steps the stable sort keeps document order.
    place = np.where(logged[:, order], np.arange(width), width)
    first = np.minimum.reduceat(place, starts, axis=1) if len(names) else place[:, starts]
    # Distinct steps in the order they first appear.
    by_appearance = np.argsort(order[starts], kind="stable")
    first = first[:, by_appearance]
    merged_steps = ordered[starts][by_appearance]
    merged_logged = first < width
    columns = order[np.minimum(first, width - 1)]
    merged_values = np.where(merged_logged, np.take_along_axis(values, columns, axis=1), np.nan)
    dropped = logged.sum(axis=1) - merged_logged.sum(axis=1)
    repeats = {names[i]: int(dropped[i]) for i in np.flatnonzero(dropped).tolist()}
    return merged_steps, merged_values, merged_logged, repeats


def _reject_steps(raw: list[Any]) -> NoReturn:
    """Raise naming the first step that is not an integer in ``[0, INT64_MAX]``."""
    for i, step in enumerate(raw):
        if type(step) is not int:
            raise BatchError(f"steps[{i}]: must be an integer, got {_shown(step)}")
        if step < 0 or step > INT64_MAX:
            raise BatchError(f"steps[{i}]: must be between 0 and {INT64_MAX}, got {_shown(step)}")
    raise BatchError(f"steps: must be integers between 0 and {INT64_MAX}")


def _parse_metrics(
    metrics: dict[Any, Any], length: int
) -> tuple[list[str], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Names, values and logged mask of every metric, checked in document order.

    The usual batch (names within the limits, every column ``length`` plain floats) is
    checked in bulk and converted in one pass. Otherwise columns are checked
    one by one, plain-float ones still converted together at the end, the others value by
    value, where a bad value is named.
    """
    names = list(metrics)
    count = len(names)
    rows = list(metrics.values())
    if _all_plain(names, rows, length):
        flat = np.fromiter(chain.from_iterable(rows), dtype=np.float64, count=count * length)
        return names, flat.reshape(count, length), np.ones((count, length), dtype=np.bool_)
    values = np.empty((count, length), dtype=np.float64)
    logged = np.ones((count, length), dtype=np.bool_)
    plain: list[int] = []
    plain_rows: list[list[float]] = []
    for i, (name, raw) in enumerate(metrics.items()):
        if not isinstance(name, str) or not name or len(name) > MAX_METRIC_NAME:
            raise BatchError(
                f"metrics: name {_shown_name(name)} must be 1 to {MAX_METRIC_NAME} characters"
            )
        if _CONTROL.search(name):
            raise BatchError(f"metrics: name {_shown_name(name)} contains a control character")
        if not _encodable(name):
            raise BatchError(
                f"metrics: name {_shown_name(name)} holds a lone surrogate (not valid Unicode)"
            )
        if not isinstance(raw, list):
            raise BatchError(f"metrics[{_shown_name(name)}]: must be an array of values")
        if len(raw) != length:
            raise BatchError(
                f"metrics[{_shown_name(name)}]: has {len(raw)} values but steps has {length}; "
                "every array must have the length of steps"
            )
        kinds = set(map(type, raw))
        if kinds <= _FLOAT:
            plain.append(i)
            plain_rows.append(raw)
            continue
        if kinds <= _NUMBER:
            try:
                values[i] = np.array(raw, dtype=np.float64)
                continue
            except OverflowError:
                pass  # the loop below names the value
        _parse_values(name, raw, values[i], logged[i])
    if len(plain) == count:
        values = np.array(plain_rows, dtype=np.float64).reshape(count, length)
    elif plain:
        values[plain] = np.array(plain_rows, dtype=np.float64).reshape(len(plain), length)
    return names, values, logged


def _all_plain(names: list[Any], rows: list[Any], length: int) -> bool:
    """Every name a valid metric name and every column a list of ``length`` floats,
    checked with a few passes in C (per-column checks cost more than the values for the
    short columns of a live trainer's batches)."""
    if not names:
        return True
    return (
        set(map(type, names)) == _STR
        and min(lengths := list(map(len, names))) >= 1
        and max(lengths) <= MAX_METRIC_NAME
        and not _CONTROL.search(joined := "".join(names))
        and _encodable(joined)
        and set(map(type, rows)) == _LIST
        and set(map(len, rows)) == {length}
        and set(map(type, chain.from_iterable(rows))) <= _FLOAT
    )


_STR, _LIST = {str}, {list}


def _shown(value: Any) -> str:
    """``value`` as an error message quotes it: short, and safe for any decoded JSON (a
    repr of an array nested 5,000 deep, or of an integer of 5,000 digits, would raise)."""
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() <= 128:
            return str(value)
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, list):
        return f"an array of {len(value)} item(s)"
    if isinstance(value, dict):
        return f"an object of {len(value)} field(s)"
    return type(value).__name__


_SHOWN = 80
"""Characters of a string quoted in an error message."""


def _shown_name(name: Any) -> str:
    """A metric name as a message quotes it: whole when within the limit on names."""
    if isinstance(name, str) and len(name) <= MAX_METRIC_NAME:
        return repr(name)
    return _shown(name)


def _encodable(text: str) -> bool:
    """True unless ``text`` holds a lone surrogate, which no text column can store."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_values(
    name: str, raw: list[Any], values: npt.NDArray[np.float64], logged: npt.NDArray[np.bool_]
) -> None:
    """One column value by value, into the given rows; raises naming the first bad value."""
    for i, v in enumerate(raw):
        kind = type(v)
        if kind is float:
            values[i] = v
        elif kind is int:
            try:
                values[i] = float(v)
            except OverflowError:
                raise BatchError(
                    f"metrics[{_shown_name(name)}][{i}]: {_shown(v)} is out of float range"
                ) from None
        elif v is None:
            logged[i] = False
            values[i] = math.nan
        elif kind is str and v in NON_FINITE:
            values[i] = NON_FINITE[v]
        else:
            raise BatchError(
                f'metrics[{_shown_name(name)}][{i}]: must be a number, null, "NaN", "Infinity" or '
                f'"-Infinity", got {_shown(v)}'
            )
