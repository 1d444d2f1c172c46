"""The batch parser over generated documents and bodies, against a reference from the API.

`judge` says, from the contract alone, whether a document is a batch and what it holds, or
which places in it are wrong. The parser must agree: a batch comes back exactly as sent
(steps in their order, names, values, NaN and not-logged where null, non-finite kept; a
step sent twice is one step, each metric keeping its first value there);
anything else is refused with a `BatchError` whose message names one of the wrong places.
Raw bodies through `loads` may only raise `BodyNotJson` or `BatchError`.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from normwatch.server.batch import loads, parse_batch
from normwatch.server.errors import BatchError, BatchTooLarge, BodyNotJson

INT64_MAX = 2**63 - 1
MAX_NAME = 512
SEGMENT_MAX = 2**15 - 1
"""Segments are stored as smallint: the server never opens one past this."""
NAMED_VALUES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
FIELDS = frozenset({"steps", "metrics", "segment"})
NO_LIMIT = 10**12
WRONG = object()
"""A value that is not a number, null or one of the three names."""

PROPERTY_SETTINGS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Accepted:
    steps: list[int]
    names: list[str]
    columns: list[list[float | None]]
    """Per metric, per step: the value, or None where it was not logged."""
    segment: int | None
    repeats: dict[str, int]
    """Per metric, values given again for a step that already had one (not stored)."""
    size: int
    """Steps × metrics as sent: what the limit on a batch's values counts."""


@dataclass(frozen=True)
class Refused:
    wrong: frozenset[str]
    """The wrong places, spelled as the parser's messages spell them."""


def is_step(raw: object) -> bool:
    return type(raw) is int and 0 <= raw <= INT64_MAX


def is_name(raw: object) -> bool:
    """1 to 512 characters, no C0 control character, and storable as UTF-8 text (a lone
    surrogate is not)."""
    if type(raw) is not str or not 1 <= len(raw) <= MAX_NAME:
        return False
    if any(ord(c) < 0x20 for c in raw):
        return False
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def value_of(raw: object) -> object:
    """The float a cell stands for, None for null, `WRONG` for anything else."""
    if type(raw) is float:
        return raw
    if type(raw) is int:
        try:
            return float(raw)
        except OverflowError:
            return WRONG
    if raw is None:
        return None
    if type(raw) is str and raw in NAMED_VALUES:
        return NAMED_VALUES[raw]
    return WRONG


def judge(doc: object) -> Accepted | Refused:
    """What the contract says of ``doc``: the batch it is, or every place that is wrong."""
    if not isinstance(doc, dict):
        return Refused(frozenset({"body"}))
    wrong: set[str] = set()
    if set(doc) - FIELDS:
        wrong.add("unknown")
    steps = doc.get("steps")
    if not isinstance(steps, list):
        wrong.add("steps")
    else:
        wrong.update(f"steps[{i}]" for i, s in enumerate(steps) if not is_step(s))
    metrics = doc.get("metrics")
    columns: list[list[float | None]] = []
    if not isinstance(metrics, dict):
        wrong.add("metrics")
    else:
        for name, raw in metrics.items():
            if not is_name(name):
                wrong.add(f"name {name!r}")
            where = f"metrics[{name!r}]"
            if not isinstance(raw, list) or (isinstance(steps, list) and len(raw) != len(steps)):
                wrong.add(where)
                continue
            column: list[float | None] = []
            for i, cell in enumerate(raw):
                value = value_of(cell)
                if value is WRONG:
                    wrong.add(f"{where}[{i}]")
                else:
                    assert value is None or isinstance(value, float)
                    column.append(value)
            columns.append(column)
    segment = doc.get("segment")
    if segment is not None and not (type(segment) is int and 1 <= segment <= SEGMENT_MAX):
        wrong.add("segment")
    if wrong:
        return Refused(frozenset(wrong))
    assert isinstance(steps, list) and isinstance(metrics, dict)
    distinct = list(dict.fromkeys(steps))
    merged: list[list[float | None]] = []
    repeats: dict[str, int] = {}
    for name, column in zip(metrics, columns, strict=True):
        first: dict[int, float] = {}
        for step, cell in zip(steps, column, strict=True):
            if cell is None:
                continue
            if step in first:
                repeats[name] = repeats.get(name, 0) + 1
            else:
                first[step] = cell
        merged.append([first.get(step) for step in distinct])
    return Accepted(distinct, list(metrics), merged, segment, repeats, len(steps) * len(metrics))


def place_named(message: str, doc: Any) -> str:
    """The place a refusal's message names, spelled as in `Refused.wrong`."""
    if message.startswith("body"):
        return "body"
    if message.startswith("unknown field(s): "):
        return "unknown"
    if found := re.match(r"steps\[(\d+)\]: ", message):
        return f"steps[{found[1]}]"
    if message.startswith("steps: "):
        return "steps"
    if message.startswith("segment: "):
        return "segment"
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    for name in metrics if isinstance(metrics, dict) else ():
        if message.startswith(f"metrics: name {name!r} "):
            return f"name {name!r}"
        # A name past the length limit is quoted cut short: its first characters, then ...'
        cut = re.match(r"metrics: name (.*)\.\.\.' must be", message)
        if cut and len(name) > MAX_NAME and repr(name).startswith(cut[1]):
            return f"name {name!r}"
        column = f"metrics[{name!r}]"
        if message.startswith(column):
            rest = message[len(column) :]
            if found := re.match(r"\[(\d+)\]: ", rest):
                return f"{column}[{found[1]}]"
            if rest.startswith(": "):
                return column
    if message.startswith("metrics: "):
        return "metrics"
    raise AssertionError(f"the message names no field: {message!r}")


def same_float(got: float, want: float) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN."""
    if math.isnan(want):
        return math.isnan(got)
    return struct.pack("<d", got) == struct.pack("<d", want)


def check(doc: Any, *, max_points: int = NO_LIMIT) -> None:
    """Parse ``doc`` and hold the outcome against `judge`."""
    verdict = judge(doc)
    try:
        batch = parse_batch(doc, max_points=max_points)
    except BatchTooLarge as err:
        assert isinstance(verdict, Accepted), f"refused as too large, but {verdict}: {err}"
        assert verdict.size > max_points
        return
    except BatchError as err:
        assert isinstance(verdict, Refused), f"refused a valid batch: {err}"
        place = place_named(str(err), doc)
        steps_wrong = any(w.startswith("steps") for w in verdict.wrong)
        assert place in verdict.wrong or (place == "steps" and steps_wrong), (
            f"{str(err)!r} names {place}, but what is wrong is {sorted(verdict.wrong)}"
        )
        return
    assert isinstance(verdict, Accepted), f"accepted, but wrong: {sorted(verdict.wrong)}"
    assert verdict.size <= max_points
    assert batch.repeats == verdict.repeats
    assert batch.steps.dtype.name == "int64" and batch.steps.tolist() == verdict.steps
    assert batch.names == verdict.names
    assert batch.segment == verdict.segment
    shape = (len(verdict.names), len(verdict.steps))
    assert batch.values.shape == shape and batch.logged.shape == shape
    for row, column in enumerate(verdict.columns):
        for col, want in enumerate(column):
            got = float(batch.values[row, col])
            if want is None:
                assert not batch.logged[row, col] and math.isnan(got)
            else:
                assert batch.logged[row, col] and same_float(got, want), (row, col, got, want)
    assert batch.point_count == sum(v is not None for column in verdict.columns for v in column)


class Sample:
    """A generated document or body whose repr stays short and finite (hypothesis prints
    failing examples, and a 5000-deep list or a 5000-digit integer has no repr)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Sample({short(self.value)})"


def short(value: Any, depth: int = 0) -> str:
    if depth > 4:
        levels = 0
        while isinstance(value, list) and len(value) == 1:
            value, levels = value[0], levels + 1
        return f"<{levels} more levels of list around {short(value, 0)}>" if levels else "..."
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() < 128 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, str | bytes):
        text = repr(value[:40])
        return text if len(value) <= 40 else f"{text}+<{len(value) - 40} more>"
    if isinstance(value, list):
        items = [short(v, depth + 1) for v in value[:8]]
        return "[" + ", ".join(items) + (", ..." if len(value) > 8 else "") + "]"
    if isinstance(value, dict):
        pairs = [
            f"{short(k, depth + 1)}: {short(v, depth + 1)}" for k, v in list(value.items())[:8]
        ]
        return "{" + ", ".join(pairs) + (", ..." if len(value) > 8 else "") + "}"
    return repr(value)


def nested(depth: int, leaf: object = 1.0) -> object:
    """``leaf`` inside ``depth`` lists (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_json(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


# --- strategies -------------------------------------------------------------------------

steps_valid = st.integers(0, INT64_MAX) | st.sampled_from([0, 1, 2**53 + 1, INT64_MAX])
name_chars = st.characters(exclude_categories=("Cc", "Cs"))
names_valid = st.text(name_chars, min_size=1, max_size=24) | st.text(
    name_chars, min_size=MAX_NAME - 4, max_size=MAX_NAME
)
cells_valid = (
    st.floats()
    | st.integers(-(2**1023), 2**1023)
    | st.none()
    | st.sampled_from(sorted(NAMED_VALUES))
)
huge_ints = st.sampled_from([INT64_MAX + 1, 2**64, -(2**63) - 1, 10**400, 2**1024, 10**4299])
nasty_strings = st.sampled_from(
    ["", "nan", "inf", "NaN\x00", "\x00", "a\x1fb", "\ud800", "a\udc00b", "\x7f", "x" * 513]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | huge_ints
    | st.floats()
    | st.text(max_size=12)
    | st.text(st.characters(categories=("Cs", "Cc")), max_size=4)
    | nasty_strings
    | st.sampled_from(sorted(NAMED_VALUES))
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
deep_values = st.builds(nested, st.sampled_from([2, 900, 1100, 5000]), scalars)
junk_values = json_values | deep_values


@st.composite
def valid_docs(draw: st.DrawFn) -> dict[str, Any]:
    steps = draw(st.lists(steps_valid, unique=True, max_size=20))
    if steps and draw(st.booleans()):  # a step sent again, as two log calls of one step
        for _ in range(draw(st.integers(1, 3))):
            steps.insert(draw(st.integers(0, len(steps))), draw(st.sampled_from(steps)))
    names = draw(st.lists(names_valid, unique=True, max_size=5))
    metrics = {
        name: draw(st.lists(cells_valid, min_size=len(steps), max_size=len(steps)))
        for name in names
    }
    doc: dict[str, Any] = {"metrics": metrics, "steps": steps}
    segment = draw(st.sampled_from(["absent", "null", "number"]))
    if segment == "null":
        doc["segment"] = None
    elif segment == "number":
        doc["segment"] = draw(st.integers(1, SEGMENT_MAX))
    order = draw(st.permutations(list(doc)))
    return {key: doc[key] for key in order}


@st.composite
def broken_docs(draw: st.DrawFn) -> Any:
    """A valid batch with one thing broken, a loose mix of the fields, or any JSON value."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "fields", "any"]))
    if kind == "any":
        return draw(junk_values)
    if kind == "fields":
        keys = draw(
            st.lists(st.sampled_from(["steps", "metrics", "segment", "extra"]), unique=True)
        )
        return {key: draw(junk_values) for key in keys}
    doc = draw(valid_docs())
    steps: list[Any] = doc["steps"]
    metrics: dict[str, Any] = doc["metrics"]
    how = draw(
        st.sampled_from(
            [
                "step",
                "steps",
                "name",
                "column",
                "length",
                "cell",
                "unknown",
                "segment",
                "metrics",
            ]
        )
    )
    if how == "step" and steps:
        bad = st.sampled_from([-1, INT64_MAX + 1, 1.0, True, "3", None]) | huge_ints | junk_values
        steps[draw(st.integers(0, len(steps) - 1))] = draw(bad)
    elif how == "steps":
        doc["steps"] = draw(junk_values)
    elif how == "name":
        bad_name = draw(nasty_strings | st.text(st.characters(categories=("Cs", "Cc")), min_size=1))
        metrics[bad_name] = [None] * len(steps)
    elif how == "column" and metrics:
        metrics[draw(st.sampled_from(list(metrics)))] = draw(junk_values)
    elif how == "length" and metrics:
        column = metrics[draw(st.sampled_from(list(metrics)))]
        if column and draw(st.booleans()):
            column.pop()
        else:
            column.append(1.0)
    elif how == "cell" and metrics and steps:
        column = metrics[draw(st.sampled_from(list(metrics)))]
        column[draw(st.integers(0, len(steps) - 1))] = draw(junk_values)
    elif how == "unknown":
        doc[draw(st.text(max_size=8).filter(lambda k: k not in FIELDS))] = draw(junk_values)
    elif how == "segment":
        doc["segment"] = draw(junk_values)
    elif how == "metrics":
        doc["metrics"] = draw(junk_values)
    return doc


# --- properties -------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(valid_docs().map(Sample), st.sampled_from([NO_LIMIT, 0, 1, 7, 60]))
@example(Sample({"steps": [INT64_MAX, 0], "metrics": {"a": [-0.0, 5e-324]}}), NO_LIMIT)
@example(Sample({"steps": [3, 1], "metrics": {"a": [2**1023, None], "b": ["NaN", "-Infinity"]}}), 9)
@example(Sample({"steps": [1], "metrics": {"x" * MAX_NAME: [math.inf]}, "segment": SEGMENT_MAX}), 1)
@example(Sample({"steps": [1, 2], "metrics": {"a": [1.0, 2.0], "b": [3.0, 4.0]}}), 3)
@example(Sample({"steps": [1, 1], "metrics": {}}), NO_LIMIT)
@example(
    Sample({"steps": [2, 1, 2], "metrics": {"a": [None, 1.0, 5e-324], "b": [3.0, 0.0, 4.0]}}), 6
)
def test_valid_batches_come_back_exactly(doc: Sample, max_points: int) -> None:
    check(doc.value, max_points=max_points)


@PROPERTY_SETTINGS
@given(valid_docs().map(Sample))
def test_valid_batches_survive_the_wire(doc: Sample) -> None:
    """Sent as JSON text (bare NaN/Infinity tokens, escapes, big integers), decoded by
    `loads`, the batch is the one the document holds."""
    check(loads(json.dumps(doc.value, allow_nan=True).encode()))


@PROPERTY_SETTINGS
@given(broken_docs().map(Sample))
@example(Sample({"steps": [1], "metrics": {"a\ud800": [1.0]}}))  # lone surrogate: not storable
@example(Sample({"steps": [1], "metrics": {"\udc00": [None]}}))
@example(Sample({"steps": [nested(5000)], "metrics": {}}))  # the message's repr() recurses
@example(Sample({"steps": [1], "metrics": {"a": [nested(1100)]}}))
@example(Sample({"steps": [1], "metrics": {}, "segment": nested(5000)}))
@example(Sample({"steps": [10**5000], "metrics": {}}))  # str() past 4300 digits
@example(Sample({"steps": [1], "metrics": {"a": [-(10**5000)]}}))
@example(Sample({"steps": [1], "metrics": {}, "segment": 10**5000}))
@example(Sample({"steps": [1], "metrics": {}, "segment": SEGMENT_MAX + 1}))
@example(Sample({"steps": [1], "metrics": {}, "segment": True}))
@example(Sample({"steps": [0, -1], "metrics": {}}))
@example(Sample({"steps": [INT64_MAX + 1], "metrics": {}}))
@example(Sample({"steps": [1], "metrics": {"a": [10**400]}}))
@example(Sample({"steps": [1], "metrics": {"a\x00": [1.0]}}))
@example(Sample({"steps": [1], "metrics": {"x" * (MAX_NAME + 1): [1.0]}}))
@example(Sample({"steps": [1], "metrics": {"a": [True]}}))
@example(Sample({"steps": [], "metrics": {}, "extra": 1}))
@example(Sample(nested(5000)))
def test_anything_else_is_refused_naming_a_wrong_field(doc: Sample) -> None:
    check(doc.value)


def as_body(doc: Any) -> bytes:
    """``doc`` as JSON text (lone surrogates as escapes, bare NaN/Infinity tokens)."""
    try:
        return json.dumps(doc, allow_nan=True).encode()
    except RecursionError:  # json cannot write what is nested this deep: write it here
        return b'{"steps": [1], "metrics": {"a": [' + nested_json(5000) + b"]}}"


bodies = (
    st.binary(max_size=300)
    | broken_docs().map(as_body)
    | st.builds(nested_json, st.sampled_from([1000, 1100, 5000, 100_000]))
    | st.sampled_from([b'"\\ud800"', b'{"steps": [1], "metrics": {"\\ud800": [1]}}'])
)


@PROPERTY_SETTINGS
@given(bodies.map(Sample))
@example(Sample(nested_json(5000)))  # json.loads, after orjson's depth limit, recurses
@example(Sample(b'{"steps": [1], "metrics": {"a": [' + nested_json(5000) + b"]}}"))
@example(Sample(b'{"steps": [1], "metrics": {"a": [' + nested_json(1000) + b"]}}"))
@example(Sample(b'{"steps": [1], "metrics": {"\\ud800": [1.0]}}'))
@example(Sample(b'{"steps": [1], "metrics": {"a": ["\\udc00"]}}'))
@example(Sample(b'{"steps": [' + b"9" * 5000 + b'], "metrics": {}}'))
@example(Sample(b'{"steps": [1], "metrics": {"a": [' + b"9" * 4000 + b"]}}"))
@example(Sample(b"\xff\xfe{"))
@example(Sample(b""))
def test_raw_bodies_raise_only_batch_errors(body: Sample) -> None:
    try:
        doc = loads(body.value)
    except BodyNotJson:
        return
    check(doc)
