"""Turning queued ``(step, metrics)`` records into the columnar wire format.

Everything here runs on the background sender thread, never on the training thread: that is
where device scalars (NumPy, JAX) are converted to Python floats, so the trainer never waits
for a device-to-host copy.

Wire format of one batch (``POST /api/v1/runs/{id}/metrics``)::

    {"steps": [81000, 81001],
     "metrics": {"grad/norm/total": [0.31, "NaN"], "params/norm/x": [341.2, null]},
     "segment": 2}

Every column has the length of ``steps``; ``null`` means "not logged at that step" and the
non-finite floats travel as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import sys
from collections.abc import Mapping
from operator import itemgetter
from types import ModuleType
from typing import Any, NamedTuple

from ._packed import PackedMetrics

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is optional for the client
    orjson = None  # type: ignore[assignment]

WireValue = float | str
"""A finite float, or one of ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""

_REJECTED_KINDS = frozenset("OSUaMmc")
"""NumPy dtype kinds that are not real numbers: object, text, datetime, complex."""


class BadValue(TypeError):
    """A logged value that is not a real scalar (a string, ``None``, a vector...)."""


@functools.cache
def _numpy() -> ModuleType | None:
    """NumPy if it is installed; imported on first use so the client does not need it."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - exercised only without numpy
        return None
    return numpy


def _builtin_float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except Exception as exc:  # an int beyond float range, a foreign __float__ failing
        raise BadValue(f"cannot convert {type(value).__name__} to float: {exc}") from exc


def to_float(value: object) -> float:
    """Convert one logged value to a Python float.

    Accepts ints, floats, NumPy scalars, and size-1 arrays of any real dtype (JAX arrays,
    bfloat16 included). Raises `BadValue` for anything else, strings included, so that
    ``"1.5"`` logged by mistake is reported rather than silently parsed.
    """
    if isinstance(value, float | int):
        return _builtin_float(value)
    if isinstance(value, str | bytes) or value is None:
        raise BadValue(f"expected a number, got {type(value).__name__}")
    np = _numpy()
    if np is None:
        return _builtin_float(value)
    try:
        array = np.asarray(value)
        if array.size != 1 or array.dtype.kind in _REJECTED_KINDS:
            raise BadValue(
                f"expected a real scalar, got {type(value).__name__} "
                f"of shape {array.shape} and dtype {array.dtype}"
            )
        return float(array.reshape(()).astype(np.float64))
    except BadValue:
        raise
    except Exception as exc:
        raise BadValue(f"cannot convert {type(value).__name__} to float: {exc}") from exc


def to_wire(value: float) -> WireValue:
    """Encode a float for JSON, spelling non-finite values out as strings."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


_HOST_TYPES = frozenset({float, int, bool})
"""Values that are already on the host: nothing to fetch."""

PACKED = object()
"""Where `fetch_from_device` fetched a whole `PackedMetrics`."""


def fetch_from_device(records: list[tuple[int, Mapping[Any, object]]]) -> None:
    """Copy the device arrays of all records to the host in one transfer, in place.

    Only acts when JAX is already imported by the trainer; converting each scalar on its
    own would cost one device round trip per value. Python numbers are passed over (handing
    them to JAX would cost more than all the rest of the writer's work), and a record with
    nothing on a device is left as it is; one with device values is replaced by a copy.
    """
    jax = sys.modules.get("jax")
    if jax is None:
        return
    places: list[tuple[int, object]] = []  # (record index, name; PACKED for a whole record)
    values: list[object] = []
    for index, (_, metrics) in enumerate(records):
        if type(metrics) is PackedMetrics:
            places.append((index, PACKED))
            values.append(metrics)  # a pytree: fetched as a PackedMetrics of a host vector
            continue
        for name, value in metrics.items():
            if type(value) not in _HOST_TYPES:
                places.append((index, name))
                values.append(value)
    if not values:
        return
    try:
        fetched = jax.device_get(values)
    except Exception:
        return  # fall back to converting value by value
    copies: dict[int, dict[Any, object]] = {}
    for (index, name), value in zip(places, fetched, strict=True):
        step = records[index][0]
        if name is PACKED:
            records[index] = (step, value)
            continue
        copy = copies.get(index)
        if copy is None:
            copy = copies[index] = dict(records[index][1])
            records[index] = (step, copy)
        copy[name] = value


class Merged(NamedTuple):
    """`merge_records` result: the wire document, plus the values that could not be converted."""

    document: dict[str, Any]
    """``{"steps": [...], "metrics": {name: column}}``, steps ascending, columns null padded."""
    points: int
    """Number of (step, metric) values in ``document``."""
    rejected: dict[str, str]
    """Reason per metric name (non-string names under their ``repr``)."""
    rejected_points: int
    repeated: dict[str, tuple[int, int]] = {}
    """Per metric logged again at a step it already had a value at: how many later values
    were left out (the first one stands), and the first such step."""

    @property
    def repeated_points(self) -> int:
        return sum(count for count, _ in self.repeated.values())


def merge_records(records: list[tuple[int, Mapping[Any, object]]]) -> Merged:
    """Convert and merge records. Records of one step merge; where two give the same
    metric a value at that step, the first one stands (as it would on the server had they
    come in two batches) and the later one is counted in `Merged.repeated`."""
    plain = _merge_plain(records)
    if plain is not None:
        return plain
    rows: dict[int, dict[str, WireValue]] = {}
    rejected: dict[str, str] = {}
    rejected_points = 0
    repeated: dict[str, tuple[int, int]] = {}
    for step, metrics in records:
        row = rows.setdefault(step, {})
        try:
            items = list(metrics.items())
        except Exception as exc:  # a mapping that cannot be read (a vector of the wrong size)
            reason = f"cannot read the logged {type(metrics).__name__}: {exc}"
            rejected[f"<{type(metrics).__name__} at step {step}>"] = reason
            rejected_points += len(metrics)
            continue
        for name, value in items:
            if not isinstance(name, str):
                rejected[repr(name)] = f"metric names must be str, got {type(name).__name__}"
                rejected_points += 1
                continue
            if name in row:
                count, first_step = repeated.get(name, (0, step))
                repeated[name] = (count + 1, first_step)
                continue
            if type(value) is float and value - value == 0.0:  # finite: the common case
                row[name] = value
                continue
            try:
                row[name] = to_wire(to_float(value))
            except BadValue as exc:
                rejected[name] = str(exc)
                rejected_points += 1
    steps = sorted(step for step, row in rows.items() if row)
    names: dict[str, None] = {}
    for step in steps:
        names.update(dict.fromkeys(rows[step]))
    ordered = [rows[step] for step in steps]
    columns = {name: [row.get(name) for row in ordered] for name in names}
    points = sum(len(row) for row in ordered)
    return Merged({"steps": steps, "metrics": columns}, points, rejected, rejected_points, repeated)


_ONLY_FLOAT = frozenset({float})
_ONLY_STR = frozenset({str})


def _merge_plain(records: list[tuple[int, Mapping[Any, object]]]) -> Merged | None:
    """`merge_records` for the usual batch, with the per-value work done in C: every value a
    finite Python float, every name a str, no step twice. Records that share their names
    (the usual trainer logs the same dict every step) are transposed into columns together.
    None when the batch is not of that kind (the general loop then does it).
    """
    steps = [step for step, _ in records]
    if len(set(steps)) != len(steps):
        return None  # same-step logs to merge
    groups: list[tuple[tuple[str, ...], list[tuple[int, list[float]]]]] = []
    for step, metrics in records:
        if type(metrics) is dict:
            names: tuple[Any, ...] = tuple(metrics)
            values: list[Any] = list(metrics.values())
        elif type(metrics) is PackedMetrics:
            names, values = metrics.names[: metrics.count], metrics.host_values()
        else:
            return None
        if not names:
            continue
        if len(values) != len(names):
            return None
        # sum() of finite floats is finite unless it overflows (then the general loop decides);
        # a NaN or an infinity anywhere makes it non-finite.
        if not _ONLY_FLOAT.issuperset(map(type, values)) or not math.isfinite(sum(values)):
            return None
        for group_names, rows in groups:
            if group_names == names:
                rows.append((step, values))
                break
        else:
            if not _ONLY_STR.issuperset(map(type, names)):
                return None
            groups.append((names, [(step, values)]))
    all_steps = sorted(step for _, rows in groups for step, _ in rows)
    columns: dict[str, list[float | None]] = {}
    points = 0
    if len(groups) == 1:
        names, rows = groups[0]
        rows.sort(key=itemgetter(0))
        transposed = zip(*(values for _, values in rows), strict=True)
        columns = dict(zip(names, map(list, transposed), strict=True))
        points = len(names) * len(rows)
    else:
        position = {step: index for index, step in enumerate(all_steps)}
        for names, rows in groups:
            places = [position[step] for step, _ in rows]
            points += len(names) * len(rows)
            transposed = zip(*(values for _, values in rows), strict=True)
            for name, column in zip(names, transposed, strict=True):
                target = columns.get(name)
                if target is None:
                    target = columns[name] = [None] * len(all_steps)
                for place, value in zip(places, column, strict=True):
                    target[place] = value
    return Merged({"steps": all_steps, "metrics": columns}, points, {}, 0)


def dumps(document: object) -> bytes:
    """Serialise JSON strictly: non-finite floats must already be encoded as strings."""
    if orjson is not None:
        return orjson.dumps(document)
    return json.dumps(document, allow_nan=False, separators=(",", ":")).encode()


def gzip_json(document: object) -> bytes:
    """JSON then gzip; level 1 because the sender should stay cheap on CPU."""
    return gzip_bytes(dumps(document))


def gzip_bytes(raw: bytes) -> bytes:
    """gzip at level 1, without a timestamp (the same input gives the same bytes)."""
    return gzip.compress(raw, compresslevel=1, mtime=0)


def split_document(
    document: Mapping[str, Any],
) -> tuple[tuple[dict[str, Any], int], tuple[dict[str, Any], int]] | None:
    """Cut a wire batch in two halves by step, each with its point count; None when it
    holds a single step and cannot be cut. Columns that are all null in a half are left out.
    """
    steps = document["steps"]
    if len(steps) < 2:
        return None
    middle = len(steps) // 2
    halves: list[tuple[dict[str, Any], int]] = []
    for part in (slice(0, middle), slice(middle, None)):
        columns = {name: column[part] for name, column in document["metrics"].items()}
        kept = {
            name: column for name, column in columns.items() if column.count(None) < len(column)
        }
        points = sum(len(column) - column.count(None) for column in kept.values())
        halves.append(({"steps": steps[part], "metrics": kept}, points))
    return halves[0], halves[1]


def jsonable(value: object, depth: int = 0) -> object:
    """A JSON-safe copy of a user's run config: non-finite floats spelled out, odd objects
    (arrays, paths, dtypes) as their ``str``, nesting capped so cycles cannot recurse forever.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return to_wire(value)
    if depth >= 32:
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item, depth + 1) for item in value]
    try:
        return to_wire(to_float(value))
    except BadValue:
        return str(value)
