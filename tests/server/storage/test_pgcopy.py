"""The binary COPY stream and the array encoder, against an independent decoder written from
the format's description, and by a real round trip through Postgres.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlalchemy import make_url

from normwatch.server.storage import pgcopy
from tests.helpers.floats import same_float

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
AWKWARD_VALUES = [1.5, math.nan, math.inf, -math.inf, 1.7976931348623157e308, 5e-324, -0.0]


Row = tuple[int, int, int, int, float | None]


def decode_reference(payload: bytes) -> list[Row]:
    """Rows of a binary COPY stream, read field by field with ``struct`` (NULL → None)."""
    assert payload[:11] == b"PGCOPY\n\xff\r\n\x00"
    flags, extension = struct.unpack_from(">ii", payload, 11)
    assert (flags, extension) == (0, 0)
    at = 19
    rows: list[Row] = []
    while True:
        (fields,) = struct.unpack_from(">h", payload, at)
        at += 2
        if fields == -1:
            assert at == len(payload), "nothing may follow the trailer"
            return rows
        assert fields == 5
        row: list[Any] = []
        for kind in ("q", "q", "h", "q", "d"):
            (length,) = struct.unpack_from(">i", payload, at)
            at += 4
            if length == -1:
                row.append(None)
                continue
            assert length == struct.calcsize(kind)
            row.append(struct.unpack_from(">" + kind, payload, at)[0])
            at += length
        rows.append((row[0], row[1], row[2], row[3], row[4]))


def test_encode_points_matches_the_reference_decoder() -> None:
    mids = np.array([1, 2, INT64_MAX, 7, 8, 9, 10], dtype=np.int64)
    steps = np.array([0, -1, INT64_MAX, INT64_MIN, 5, 6, 7], dtype=np.int64)
    values = np.array(AWKWARD_VALUES, dtype=np.float64)
    for run_key, segment in ((42, 1), (INT64_MAX, 32767), (1, -32768)):
        rows = decode_reference(pgcopy.encode_points(run_key, segment, mids, steps, values))
        assert [r[:4] for r in rows] == [
            (run_key, int(m), segment, int(s)) for m, s in zip(mids, steps, strict=True)
        ]
        expected = [None if math.isnan(v) else v for v in AWKWARD_VALUES]
        assert all(same_float(r[4], v) for r, v in zip(rows, expected, strict=True))


def test_encode_points_all_null_and_empty() -> None:
    nan = np.full(3, math.nan)
    rows = decode_reference(pgcopy.encode_points(3, 2, np.arange(3), np.arange(3), nan))
    assert rows == [(3, 0, 2, 0, None), (3, 1, 2, 1, None), (3, 2, 2, 2, None)]
    empty = np.empty(0, dtype=np.int64)
    payload = pgcopy.encode_points(3, 2, empty, empty, np.empty(0))
    assert payload == pgcopy.HEADER + pgcopy.TRAILER


def test_encode_points_rejects_bad_input() -> None:
    one = np.ones(1, dtype=np.int64)
    with pytest.raises(ValueError, match="one length"):
        pgcopy.encode_points(1, 1, one, np.ones(2, dtype=np.int64), np.ones(1))
    with pytest.raises(ValueError, match="smallint"):
        pgcopy.encode_points(1, 2**15, one, one, np.ones(1))


def test_copy_stream_round_trips_through_postgres(pg_url: str) -> None:
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    rng = np.random.default_rng(7)
    count = 10_000
    mids = rng.integers(INT64_MIN, INT64_MAX, size=count, dtype=np.int64)
    steps = rng.integers(INT64_MIN, INT64_MAX, size=count, dtype=np.int64)
    values = rng.normal(size=count)
    values[: len(AWKWARD_VALUES)] = AWKWARD_VALUES
    values[rng.random(count) < 0.1] = math.nan
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE TEMP TABLE points (run_key bigint, metric_id bigint, segment smallint, "
            "step bigint, value float8, seq serial)"
        )
        with conn.cursor() as cur, cur.copy(pgcopy.COPY_POINTS) as copy:
            copy.write(pgcopy.encode_points(INT64_MAX, 3, mids, steps, values))
        stored = conn.execute(
            "SELECT run_key, metric_id, segment, step, value FROM points ORDER BY seq"
        ).fetchall()
    assert len(stored) == count
    assert {(r[0], r[2]) for r in stored} == {(INT64_MAX, 3)}
    assert [r[1] for r in stored] == mids.tolist()
    assert [r[3] for r in stored] == steps.tolist()
    expected = [None if math.isnan(v) else v for v in values.tolist()]
    assert all(same_float(r[4], v) for r, v in zip(stored, expected, strict=True))


def decode_array_reference(payload: bytes) -> list[int | float | None]:
    """A one-dimensional binary ``bigint[]``/``float8[]``, read with ``struct``."""
    ndim, has_null, oid = struct.unpack_from(">iii", payload)
    if ndim == 0:
        assert len(payload) == 12
        return []
    count, lower = struct.unpack_from(">ii", payload, 12)
    assert (ndim, lower, oid in (20, 701)) == (1, 1, True)
    at = 20
    out: list[int | float | None] = []
    for _ in range(count):
        (length,) = struct.unpack_from(">i", payload, at)
        at += 4
        if length == -1:
            out.append(None)
            continue
        out.append(struct.unpack_from(">q" if oid == 20 else ">d", payload, at)[0])
        at += 8
    assert at == len(payload) and has_null == (None in out)
    return out


def test_encode_array_matches_the_reference_and_postgres(pg_url: str) -> None:
    ints = np.array([0, -1, INT64_MIN, INT64_MAX, 42], dtype=np.int64)
    floats = np.array(AWKWARD_VALUES + [math.nan], dtype=np.float64)
    expected_floats = [None if math.isnan(v) else v for v in floats.tolist()]
    assert decode_array_reference(pgcopy.encode_array(ints)) == ints.tolist()
    decoded = decode_array_reference(pgcopy.encode_array(floats))
    assert all(same_float(a, b) for a, b in zip(decoded, expected_floats, strict=True))
    assert decode_array_reference(pgcopy.encode_array(np.empty(0))) == []
    with pytest.raises(ValueError, match="1-D int64 or float64"):
        pgcopy.encode_array(np.ones((2, 2)))
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        for values, oid, sql_type in (
            (ints, pgcopy.INT8_ARRAY_OID, "bigint[]"),
            (floats, pgcopy.FLOAT8_ARRAY_OID, "float8[]"),
            (np.empty(0, dtype=np.int64), pgcopy.INT8_ARRAY_OID, "bigint[]"),
        ):
            # Sent in binary by libpq itself, read back as Postgres prints it.
            result = conn.pgconn.exec_params(
                b"SELECT $1::text", [pgcopy.encode_array(values)], [oid], [1]
            )
            assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
            text_form = result.get_value(0, 0)
            assert text_form is not None
            stored = conn.execute(f"SELECT %s::{sql_type}", [text_form.decode()]).fetchone()
            assert stored is not None
            want = [None if isinstance(v, float) and math.isnan(v) else v for v in values.tolist()]
            assert all(same_float(a, b) for a, b in zip(stored[0], want, strict=True))
