"""Postgres binary formats built by NumPy in one pass: ``COPY`` streams of hot blocks (what
ingest sends) and of points (one row a point, what the benchmarks' baselines send), and
array parameters.

The binary format (PostgreSQL manual, *COPY*, "Binary Format") is a fixed header, one
tuple per row and a trailer, every integer big-endian:

- header: the 11-byte signature ``PGCOPY\\n\\377\\r\\n\\0``, a 32-bit flags field (0) and a
  32-bit header-extension length (0);
- tuple: a 16-bit field count, then per field a 32-bit byte length followed by that many
  bytes of the type's binary send format, or the length -1 and no bytes for NULL;
- trailer: the 16-bit field count -1.

A ``points`` row ``(run_key int8, metric_id int8, segment int2, step int8, value float8)``
is therefore 56 bytes, and 48 when ``value`` is NULL. NaN is stored as NULL, as everywhere
in the service (SQLite cannot hold a NaN, and "not logged" is never stored); ±Infinity
are stored as float8 infinities. The rows of a batch are laid out as one structured
array (`POINT_ROW`), so encoding 50,000 points is a handful of vectorised copies.

An array parameter (`encode_array`) is sent the same way: Postgres' binary array format
(``array_recv``) is a header (dimensions 1, a has-NULL flag, the element type's oid, then
the length and lower bound 1) followed by the elements, each a 32-bit length (-1 for NULL)
and its bytes. psycopg would otherwise adapt a list element by element in Python.

>>> import numpy as np
>>> payload = encode_points(7, 1, np.array([3]), np.array([10]), np.array([0.5]))
>>> len(payload) == len(HEADER) + POINT_ROW.itemsize + len(TRAILER)
True
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .blocks import Block

__all__ = [
    "COPY_BLOCKS",
    "COPY_POINTS",
    "FLOAT8_ARRAY_OID",
    "HEADER",
    "INT8_ARRAY_OID",
    "POINT_ROW",
    "TRAILER",
    "encode_array",
    "encode_blocks",
    "encode_full_blocks",
    "encode_points",
]

COPY_POINTS = "COPY points (run_key, metric_id, segment, step, value) FROM STDIN (FORMAT BINARY)"
"""The statement that reads what `encode_points` writes."""

COPY_BLOCKS = (
    "COPY blocks (run_key, metric_id, segment, first_step, last_step, count, last_value, "
    "steps, data) FROM STDIN (FORMAT BINARY)"
)
"""The statement that reads what `encode_blocks` writes."""

HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
TRAILER = (-1).to_bytes(2, "big", signed=True)

POINT_ROW = np.dtype(
    [
        ("fields", ">i2"),
        ("run_key_len", ">i4"),
        ("run_key", ">i8"),
        ("metric_id_len", ">i4"),
        ("metric_id", ">i8"),
        ("segment_len", ">i4"),
        ("segment", ">i2"),
        ("step_len", ">i4"),
        ("step", ">i8"),
        ("value_len", ">i4"),
        ("value", ">f8"),
    ]
)
"""One tuple of the stream with a non-NULL value: packed, big-endian, 56 bytes."""

INT8_ARRAY_OID = 1016
"""``bigint[]``, the type of what `encode_array` makes of int64 values."""
FLOAT8_ARRAY_OID = 1022
"""``float8[]``, the type of what `encode_array` makes of float64 values."""

_VALUE_BYTES = 8
_SMALLINT = (-(2**15), 2**15 - 1)
_ELEMENT_OIDS = {"i": 20, "f": 701}  # int8, float8


def _template(run_key: int, segment: int) -> npt.NDArray[np.void]:
    """A row whose lengths and per-batch constants are filled in."""
    row = np.zeros(1, dtype=POINT_ROW)
    row["fields"] = 5
    row["run_key_len"] = row["metric_id_len"] = row["step_len"] = row["value_len"] = 8
    row["segment_len"] = 2
    row["run_key"] = run_key
    row["segment"] = segment
    return row


def encode_points(
    run_key: int,
    segment: int,
    metric_ids: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
) -> bytes:
    """The whole ``COPY ... (FORMAT BINARY)`` stream for one run's points of one segment.

    ``metric_ids``, ``steps`` and ``values`` are parallel 1-D arrays, one entry a row, in
    the order the rows are to be inserted. NaN values become NULL fields; every other
    float (±Infinity included) goes as its IEEE 754 bits. Raises ``ValueError`` when the
    arrays differ in length or ``segment`` does not fit a ``smallint``.
    """
    count = len(steps)
    if not len(metric_ids) == count == len(values):
        raise ValueError(
            f"metric_ids, steps and values must have one length, got "
            f"{len(metric_ids)}, {count} and {len(values)}"
        )
    if not _SMALLINT[0] <= segment <= _SMALLINT[1]:
        raise ValueError(f"segment must fit a smallint, got {segment}")
    rows = np.empty(count, dtype=POINT_ROW)
    rows[:] = _template(run_key, segment)
    rows["metric_id"] = metric_ids
    rows["step"] = steps
    rows["value"] = values
    return b"".join((HEADER, _with_nulls(rows, np.isnan(values), "value_len"), TRAILER))


def encode_array(values: npt.NDArray[np.int64] | npt.NDArray[np.float64]) -> bytes:
    """The binary form of a one-dimensional ``bigint[]`` (int64 ``values``) or ``float8[]``
    (float64 ``values``, NaN as NULL), to send as a parameter of type `INT8_ARRAY_OID` or
    `FLOAT8_ARRAY_OID`.

    >>> import numpy as np
    >>> encode_array(np.array([7])).hex(" ", 4)
    '00000001 00000000 00000014 00000001 00000001 00000008 00000000 00000007'
    """
    kind = values.dtype.kind
    if values.ndim != 1 or kind not in _ELEMENT_OIDS:
        raise ValueError(f"need a 1-D int64 or float64 array, got {values.dtype} {values.shape}")
    count = len(values)
    null = np.isnan(values) if kind == "f" else np.zeros(count, dtype=np.bool_)
    has_null = bool(null.any())
    oid = _ELEMENT_OIDS[kind]
    if count == 0:
        return struct.pack(">iii", 0, 0, oid)
    items = np.empty(count, dtype=[("len", ">i4"), ("value", ">i8" if kind == "i" else ">f8")])
    items["len"] = _VALUE_BYTES
    items["value"] = values
    header = struct.pack(">iiiii", 1, int(has_null), oid, count, 1)
    return header + _with_nulls(items, null, "len")


def _with_nulls(rows: npt.NDArray[np.void], null: npt.NDArray[np.bool_], length: str) -> bytes:
    """The bytes of ``rows``, whose last field is an 8-byte value and ``length`` its length
    field, with the rows marked ``null`` turned into NULLs: the length -1 alone."""
    if not null.any():
        return rows.tobytes()
    rows[length][null] = -1
    size = rows.dtype.itemsize
    keep = np.ones((len(rows), size), dtype=np.bool_)
    keep[null, -_VALUE_BYTES:] = False
    return rows.view(np.uint8).reshape(len(rows), size)[keep].tobytes()


_BLOCK_KEY = struct.Struct(">hiqiqihiqiqii")
"""A ``blocks`` tuple up to its ``count``: 9 fields, then each field's length and value."""
_NULL = struct.pack(">i", -1)


def encode_blocks(run_key: int, segment: int, blocks: Sequence[Block]) -> bytes:
    """The whole ``COPY ... (FORMAT BINARY)`` stream of one run's blocks of one segment.

    A NaN ``last_value`` becomes NULL, as every NaN in a column does; a block without
    ``steps`` (evenly spaced) sends NULL there.
    """
    if not _SMALLINT[0] <= segment <= _SMALLINT[1]:
        raise ValueError(f"segment must fit a smallint, got {segment}")
    parts = [HEADER]
    key = _BLOCK_KEY.pack
    for b in blocks:
        parts.append(
            key(
                9,
                8,
                run_key,
                8,
                b.metric_id,
                2,
                segment,
                8,
                b.first_step,
                8,
                b.last_step,
                4,
                b.count,
            )
        )
        parts.append(_NULL if b.last_value != b.last_value else struct.pack(">id", 8, b.last_value))
        if b.steps is None:
            parts.append(_NULL)
        else:
            parts.append(struct.pack(">i", len(b.steps)))
            parts.append(b.steps)
        parts.append(struct.pack(">i", len(b.data)))
        parts.append(b.data)
    parts.append(TRAILER)
    return b"".join(parts)


def encode_full_blocks(
    run_key: int,
    segment: int,
    metric_ids: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    steps_blob: bytes | None,
) -> bytes:
    """The ``COPY`` stream of a batch that logged every metric at every step, vectorised.

    ``values[i]`` are metric ``metric_ids[i]``'s values at the ascending ``steps``, and
    ``steps_blob`` the blocks' shared ``steps`` field (None: evenly spaced). Every row then
    has one layout, so the rows are one structured array; ``last_value`` goes as the float8
    it is, NaN included (what `encode_blocks` sends as NULL).
    """
    if not _SMALLINT[0] <= segment <= _SMALLINT[1]:
        raise ValueError(f"segment must fit a smallint, got {segment}")
    count = len(steps)
    fields: list[tuple[str, str] | tuple[str, str, tuple[int]]] = [
        ("fields", ">i2"),
        ("run_key_len", ">i4"),
        ("run_key", ">i8"),
        ("metric_id_len", ">i4"),
        ("metric_id", ">i8"),
        ("segment_len", ">i4"),
        ("segment", ">i2"),
        ("first_len", ">i4"),
        ("first", ">i8"),
        ("last_len", ">i4"),
        ("last", ">i8"),
        ("count_len", ">i4"),
        ("count", ">i4"),
        ("last_value_len", ">i4"),
        ("last_value", ">f8"),
        ("steps_len", ">i4"),
    ]
    if steps_blob is not None:
        fields.append(("steps", "V" + str(len(steps_blob))))
    fields += [("data_len", ">i4"), ("data", ">f8", (count,))]
    rows = np.empty(len(metric_ids), dtype=np.dtype(fields))
    rows["fields"] = 9
    rows["run_key_len"] = rows["metric_id_len"] = rows["first_len"] = rows["last_len"] = 8
    rows["last_value_len"] = 8
    rows["segment_len"] = 2
    rows["count_len"] = 4
    rows["run_key"] = run_key
    rows["metric_id"] = metric_ids
    rows["segment"] = segment
    rows["first"] = steps[0]
    rows["last"] = steps[-1]
    rows["count"] = count
    rows["last_value"] = values[:, -1]
    if steps_blob is None:
        rows["steps_len"] = -1
    else:
        rows["steps_len"] = len(steps_blob)
        rows["steps"] = np.frombuffer(steps_blob, dtype="V" + str(len(steps_blob)))[0]
    rows["data_len"] = 8 * count
    rows["data"] = values
    return b"".join((HEADER, rows.tobytes(), TRAILER))
