"""Hot blocks: encoding against a reference, and both COPY encoders through Postgres."""

from __future__ import annotations

import math
import struct

import numpy as np
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import make_url

from normwatch.server.batch import parse_batch
from normwatch.server.storage import blocks, pgcopy

AWKWARD = [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308, 15.37]


def same(a: float, b: float) -> bool:
    return struct.pack(">d", a) == struct.pack(">d", b)


@pytest.mark.parametrize(
    "steps",
    [[7], [3, 9], [0, 5, 10, 15], [1, 2, 4, 8], [10, 11, 13], [-(2**63), 0, 2**63 - 1]],
)
def test_blocks_round_trip_and_elide_evenly_spaced_steps(steps: list[int]) -> None:
    at = np.array(steps, dtype=np.int64)
    values = np.array((AWKWARD * 3)[: len(steps)], dtype=np.float64)
    block = blocks.encode(at, values, metric_id=4)
    diffs = np.diff(at.astype(object)).tolist()
    even = len(steps) <= 2 or len(set(diffs)) == 1
    assert (block.steps is None) == even
    assert (block.metric_id, block.first_step, block.last_step, block.count) == (
        4,
        steps[0],
        steps[-1],
        len(steps),
    )
    assert same(block.last_value, values[-1])
    back = blocks.decode(block.first_step, block.last_step, block.count, block.steps, block.data)
    assert back.steps.tolist() == steps
    assert all(same(a, b) for a, b in zip(back.values.tolist(), values.tolist(), strict=True))
    assert block.data == b"".join(struct.pack(">d", v) for v in values.tolist())


def test_encode_rejects_an_empty_block() -> None:
    with pytest.raises(ValueError, match="at least one"):
        blocks.encode(np.empty(0, dtype=np.int64), np.empty(0))


def test_blocks_of_a_batch_with_gaps_and_a_keep_mask() -> None:
    batch = parse_batch(
        {"steps": [5, 3, 4], "metrics": {"b": [1.0, 2.0, None], "a": [None, None, None]}},
        max_points=100,
    )
    ids = {"a": 1, "b": 2}
    [only] = blocks.of_batch(batch, ids)
    assert only.metric_id == 2
    pts = blocks.decode(only.first_step, only.last_step, only.count, only.steps, only.data)
    assert (pts.steps.tolist(), pts.values.tolist()) == ([3, 5], [2.0, 1.0])
    keep = np.array([[False, True, True], [True, True, True]])
    [kept] = blocks.of_batch(batch, ids, keep)
    assert (kept.first_step, kept.count) == (3, 1)
    assert blocks.decode_many(
        [(9, 9, 1, None, struct.pack(">d", 3.0)), (2, 4, 2, None, struct.pack(">dd", 1.0, 2.0))]
    ).steps.tolist() == [2, 4, 9]


def test_both_copy_encoders_store_the_same_rows(pg_url: str) -> None:
    """The vectorised stream of a full batch and the row-by-row one, through Postgres."""
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    rng = np.random.default_rng(3)
    ids = np.array([5, 9, 2**40], dtype=np.int64)
    for steps in (np.array([4, 6, 8]), np.array([1, 2, 7]), np.array([11])):
        values = rng.normal(size=(len(ids), len(steps)))
        values[0, -1] = math.nan
        values[1, 0] = -math.inf
        by_row = [blocks.encode(steps, values[i], int(m)) for i, m in enumerate(ids)]
        shared = blocks.encode(steps, values[0]).steps
        streams = {
            "rows": pgcopy.encode_blocks(2**62, 3, by_row),
            "full": pgcopy.encode_full_blocks(2**62, 3, ids, steps, values, shared),
        }
        stored = {}
        with psycopg.connect(dsn) as conn:
            for name, payload in streams.items():
                conn.execute(
                    "CREATE TEMP TABLE blocks (run_key bigint, metric_id bigint, "
                    "segment smallint, first_step bigint, last_step bigint, count int, "
                    "last_value float8, steps bytea, data bytea)"
                )
                with conn.cursor() as cur, cur.copy(pgcopy.COPY_BLOCKS) as copy:
                    copy.write(payload)
                stored[name] = conn.execute(
                    "SELECT run_key, metric_id, segment, first_step, last_step, count, "
                    "coalesce(last_value, 'NaN'), steps, data FROM blocks ORDER BY metric_id"
                ).fetchall()
                conn.execute("DROP TABLE blocks")
        assert len(stored["rows"]) == len(ids)
        for a, b in zip(stored["rows"], stored["full"], strict=True):
            assert a[:6] == b[:6] and same(a[6], b[6]) and a[7:] == b[7:]
        for row, i in zip(stored["full"], range(len(ids)), strict=True):
            pts = blocks.decode(row[3], row[4], row[5], row[7], row[8])
            assert pts.steps.tolist() == steps.tolist()
            assert all(same(x, y) for x, y in zip(pts.values, values[i], strict=True))


@st.composite
def block_rows(draw: st.DrawFn) -> list[tuple[int, int, int, int, bytes | None, bytes]]:
    """Blocks of a few metrics: evenly spaced steps or not, one point or many."""
    rows = []
    for mid in range(draw(st.integers(1, 3))):
        start = draw(st.integers(-(10**6), 10**6))
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                stride, count = draw(st.integers(1, 7)), draw(st.integers(1, 40))
                at = start + stride * np.arange(count, dtype=np.int64)
            else:
                gaps = draw(st.lists(st.integers(1, 9), min_size=1, max_size=40))
                at = start + np.cumsum(gaps).astype(np.int64)
            block = blocks.encode(at, np.arange(len(at), dtype=np.float64) + mid, mid)
            rows.append(
                (mid, block.first_step, block.last_step, block.count, block.steps, block.data)
            )
            start = int(at[-1]) + draw(st.integers(1, 20))
    return rows


@given(block_rows(), st.integers(-(10**6), 2 * 10**6), st.integers(0, 500))
def test_rows_cut_to_a_range_are_the_rows_points_in_it(
    rows: list[tuple[int, int, int, int, bytes | None, bytes]], a: int, width: int
) -> None:
    b = a + width
    mids, points = blocks.decode_rows(rows)
    inside = (points.steps >= a) & (points.steps <= b)
    cut_mids, cut = blocks.decode_rows(rows, between=(a, b))
    assert cut_mids.tolist() == mids[inside].tolist()
    assert cut.steps.tolist() == points.steps[inside].tolist()
    assert cut.values.tolist() == points.values[inside].tolist()
