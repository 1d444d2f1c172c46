"""Reads across many series: chunk outlines, and `across.read` against the chart read's
exact points and a brute-force column maximum, on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import text

from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.services.layers import layer_grid
from normwatch.server.storage import across, chunks, outline, pyramid
from normwatch.server.storage.chunks import Points
from normwatch.server.storage.metric_ids import metric_ids_by_name
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of
from tests.helpers.committed import Sessions, compact, new_run, post, the_run

NAMES = ["grad/norm/embed", "grad/norm/layers.0", "grad/norm/layers.1", "grad/norm/lm_head"]
SMALL = Policy(chunk_points=256)
SMALL32 = Policy(chunk_points=256, precision="float32")
"""The opt-in lossy precision: float32 chunks, with the outlines of their own kinds."""


@pytest.fixture
def sessions(db_url: str) -> Iterator[Sessions]:
    engine = build_engine(db_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def test_outline_holds_each_buckets_first_and_largest_point() -> None:
    rng = np.random.default_rng(1)
    values = rng.lognormal(size=1000)
    values[[5, 300, 301]] = np.nan
    values[640:704] = np.nan  # one bucket all NaN: its largest is its first, valued NaN
    steps = 10 + 3 * np.arange(1000)
    buckets = chunks.summarize(Points(steps, values))
    both = outline.decode(outline.encode(buckets), int(steps[0]), int(steps[-1]), len(steps))
    assert both["first"].steps.tolist() == buckets["first_step"].tolist()
    np.testing.assert_array_equal(both["first"].values, buckets["first"])
    has_max = buckets["max_step"] != chunks.NO_STEP
    assert not has_max[10] and has_max.sum() == len(buckets) - 1
    assert both["max"].steps[has_max].tolist() == buckets["max_step"][has_max].tolist()
    assert both["max"].steps[10] == buckets["first_step"][10] and np.isnan(both["max"].values[10])
    np.testing.assert_array_equal(both["max"].values[has_max], buckets["max"][has_max])


def test_outline_of_a_chunk_spanning_more_than_two_to_the_32_steps() -> None:
    steps = np.array([0, 1, 2, 10**12, 10**12 + 5], dtype=np.int64)
    values = np.array([1.0, 5.0, 2.0, 9.0, 3.0])
    buckets = chunks.summarize(Points(steps, values), size=2)
    blob = outline.encode(buckets)
    assert blob[0] == 1  # wide: int64 steps (float64 values)
    # A read asks for the whole of a wide outline (see part_sql) and picks from it.
    # Three buckets of two points; a read passes the chunk's count, FANOUT points a bucket.
    counts = [len(buckets) * chunks.FANOUT]
    got = outline.decode_parts([blob], [0], [10**12 + 5], counts, "max")
    assert got.steps.tolist() == [1, 10**12, 10**12 + 5]
    assert got.values.tolist() == [5.0, 9.0, 3.0]
    with pytest.raises(chunks.ChunkFormatError):
        outline.decode_parts([blob[:-3]], [0], [10**12 + 5], counts, "max")


@pytest.mark.parametrize(
    ("steps", "kind", "bytes_a_bucket"),
    [
        (7 + 10 * np.arange(1000), 3, 9),  # even steps: places in the bucket, float32
        (np.array([42]), 3, 9),  # one point
        (np.cumsum(np.arange(1, 1001)), 2, 16),  # uneven steps: offsets, float32
    ],
)
def test_float32_outlines_are_smaller_and_read_as_the_summary(
    steps: np.ndarray, kind: int, bytes_a_bucket: int
) -> None:
    rng = np.random.default_rng(2)
    values = rng.lognormal(size=len(steps))
    if len(steps) > 200:
        values[[5, 300]] = np.nan
        values[128:192] = np.nan  # one bucket all NaN
    _, buckets = chunks.pack(Points(steps.astype(np.int64), values), "float32")
    blob = outline.encode(buckets)
    assert blob[0] == kind and len(blob) == 1 + bytes_a_bucket * len(buckets)
    first, last, count = int(steps[0]), int(steps[-1]), len(steps)
    both = outline.decode(blob, first, last, count)
    has_max = buckets["max_step"] != chunks.NO_STEP
    assert both["first"].steps.tolist() == buckets["first_step"].tolist()
    np.testing.assert_array_equal(both["first"].values, buckets["first"])
    assert both["max"].steps[has_max].tolist() == buckets["max_step"][has_max].tolist()
    np.testing.assert_array_equal(both["max"].values[has_max], buckets["max"][has_max])
    # What a read asks for (part_sql's half), decoded beside a float64 chunk's outline.
    other = chunks.summarize(Points(np.arange(64, dtype=np.int64), rng.lognormal(size=64)))
    other_blob = outline.encode(other)
    assert other_blob[0] == 0
    n = len(buckets)
    for pick in ("max", "first"):
        part_size = {3: {"max": 5, "first": 4}, 2: {"max": 8, "first": 8}}[kind][pick]
        start = 1 if pick == "max" else 1 + (bytes_a_bucket - part_size) * n
        part = blob[start : start + part_size * n]
        got = outline.decode_parts(
            [part, other_blob[1:13] if pick == "max" else other_blob[13:]],
            [first, 0],
            [last, 63],
            [count, 64],
            pick,
        )
        assert got.narrow.tolist() == [True] * n + [False]
        assert got.steps[:n].tolist() == both[pick].steps.tolist()
        mine = chunks.readable(got.values[:n].astype(np.float32))
        np.testing.assert_array_equal(mine, both[pick].values)


def _run_with_hot_tail(sessions: Sessions) -> tuple[str, dict[str, np.ndarray]]:
    """Four series over steps 0..2,999: compacted up to 2,499 (256-point chunks), hot after;
    ``layers.1`` logged every 7th step only; a re-sent value for a compacted step."""
    run_id = new_run(sessions)
    rng = np.random.default_rng(7)
    steps = np.arange(3000)
    posted = {name: rng.lognormal(size=3000) for name in NAMES}
    sparse = steps % 7 == 0
    for lo, hi in ((0, 2500), (2500, 3000)):
        part = slice(lo, hi)
        dense = {n: v[part] for n, v in posted.items() if n != NAMES[2]}
        post(sessions, run_id, steps[part], **dense)
        keep = sparse[part]
        post(sessions, run_id, steps[part][keep], **{NAMES[2]: posted[NAMES[2]][part][keep]})
        if lo == 0:
            compact(sessions, run_id, SMALL)
    post(sessions, run_id, np.array([1234]), **{NAMES[0]: np.array([1e6])})  # waits, hot
    return run_id, posted


def _ids(sessions: Sessions, run_id: str):  # type: ignore[no-untyped-def]
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        lineage = lineage_of(segments_of(session, run.key))
        ids = metric_ids_by_name(session, run.key, NAMES)
        return run.key, lineage, [ids[n] for n in NAMES]


@pytest.mark.parametrize("bounds", [(None, None), (1000, 2700), (2600, 2999)])
def test_every_point_read_across_equals_the_chart_reads_points(
    sessions: Sessions, bounds: tuple[int | None, int | None]
) -> None:
    run_id, _ = _run_with_hot_tail(sessions)
    key, lineage, ids = _ids(sessions, run_id)
    with session_scope(sessions) as session:
        got = across.read(session, key, ids, lineage, *bounds, 0.0, "max")
        assert got.exact
        for mid, points, narrow in zip(ids, got.series, got.narrow, strict=True):
            want = pyramid.read_all(session, key, mid, lineage, *bounds)
            assert points.steps.tolist() == want.steps.tolist()
            values = points.values.copy()
            if narrow is not None:
                values[narrow] = chunks.readable(values[narrow].astype(np.float32))
            np.testing.assert_array_equal(values, want.values)


def test_outlines_stand_for_buckets_narrower_than_a_column(sessions: Sessions) -> None:
    run_id, _ = _run_with_hot_tail(sessions)
    key, lineage, ids = _ids(sessions, run_id)
    with session_scope(sessions) as session:
        wide = across.read(session, key, ids, lineage, 0, 2999, 200.0, "first")
        exact = across.read(session, key, ids, lineage, 0, 2999, 0.0, "first")
    assert not wide.exact
    dense = wide.series[0]
    # Compacted part: one point a 64-point bucket (each bucket's first); hot part whole.
    assert dense.steps[dense.steps < 2500].tolist() == list(range(0, 2500, 64))
    assert dense.steps[dense.steps >= 2500].tolist() == list(range(2500, 3000))
    # layers.1's buckets span 448 steps, wider than a column: its chunks come whole.
    assert wide.series[2].steps.tolist() == exact.series[2].steps.tolist()


@pytest.mark.parametrize("policy", [SMALL, SMALL32], ids=["float64", "float32"])
def test_layer_grid_cells_are_column_maxima_where_buckets_fit_columns(
    sessions: Sessions, policy: Policy
) -> None:
    """Each cell is the largest value logged in its steps, exactly as logged (float64, the
    default) or as the float32 chunk reads it (its shortest decimal)."""
    run_id = new_run(sessions)
    rng = np.random.default_rng(3)
    steps = np.arange(64 * 64)
    posted = {name: rng.lognormal(size=len(steps)) for name in NAMES}
    posted[NAMES[1]][1000] = 1000.0  # a one-step spike keeps its colour
    post(sessions, run_id, steps, **posted)
    compact(sessions, run_id, policy)
    with session_scope(sessions) as session:
        grid = layer_grid(session, the_run(session, run_id), "grad/norm", points=32)
    assert grid.bucketed and grid.steps == list(range(0, 64 * 64, 128))
    for name, row in zip(grid.layers, grid.values, strict=True):
        stored = chunks.stored_values(posted[f"grad/norm/{name}"], policy.precision)
        want = stored.reshape(32, 128).max(axis=1)
        np.testing.assert_array_equal(np.array(row), want)
    assert max(grid.values[grid.layers.index("layers.0")]) == 1000.0


def test_extent_of_many_series_is_the_union_of_their_extents(sessions: Sessions) -> None:
    run_id, _ = _run_with_hot_tail(sessions)
    post(sessions, run_id, np.array([3500]), **{NAMES[3]: np.array([1.0])})
    key, lineage, ids = _ids(sessions, run_id)
    with session_scope(sessions) as session:
        each = [pyramid.extent(session, key, mid, lineage) for mid in ids]
        assert across.extent(session, key, ids, lineage) == (0, 3500)
        assert across.extent(session, key, ids[1:3], lineage) == (
            min(e[0] for e in each[1:3] if e),
            max(e[1] for e in each[1:3] if e),
        )
        assert across.extent(session, key, [], lineage) is None


def test_outlines_of_every_kind_read_together(sessions: Sessions) -> None:
    """Series compacted at float64 (the default; one of them of values a float32 holds
    exactly, as a JAX trainer logs them, once with even and once with uneven steps), one at
    float32 with even steps and one at float32 with uneven steps hold outlines of five kinds
    (24, 11, 18, 9 and 16 bytes a bucket); one read picks from all of them through the same
    SQL, each value as the chunk gives it back."""
    run_id = new_run(sessions)
    rng = np.random.default_rng(11)
    even = np.arange(1280)
    uneven = np.cumsum(1 + even % 3)
    values = rng.lognormal(size=(5, len(even)))  # no value survives float32...
    values[3:] = values[3:].astype(np.float32)  # ... but these are float32s
    names = [*NAMES, "grad/norm/layers.2"]
    post(sessions, run_id, even, **{names[0]: values[0], names[3]: values[3]})
    post(sessions, run_id, uneven, **{names[4]: values[4]})
    compact(sessions, run_id, SMALL)
    post(sessions, run_id, even, **{names[1]: values[1]})
    post(sessions, run_id, uneven, **{names[2]: values[2]})
    compact(sessions, run_id, SMALL32)
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        key, lineage = run.key, lineage_of(segments_of(session, run.key))
        by_name = metric_ids_by_name(session, key, names)
        ids = [by_name[n] for n in names]
        rows = session.execute(
            text("SELECT metric_id, outline FROM chunks WHERE run_key = :k"), {"k": key}
        ).all()
        lengths = {mid: {len(bytes(blob)) for m, blob in rows if m == mid} for mid in ids}
        # 256-point chunks: four buckets each.
        assert [lengths[mid] for mid in ids] == [
            {1 + 24 * 4},
            {1 + 9 * 4},
            {1 + 16 * 4},
            {1 + 11 * 4},
            {1 + 18 * 4},
        ]
        got = across.read(session, key, ids, lineage, None, None, 200.0, "max")
    assert not got.exact
    stored = [values[0], *(chunks.readable(v.astype(np.float32)) for v in values[1:3])]
    stored += [values[3], values[4]]
    assert [n is not None and bool(n.any()) for n in got.narrow] == [
        False,
        True,
        True,
        False,
        False,
    ]
    assert all(n is not None and n.all() for n in got.narrow[1:3])
    for series, narrow, steps, want in zip(
        got.series, got.narrow, (even, even, uneven, even, uneven), stored, strict=True
    ):
        assert series.steps.tolist() == [
            int(steps[64 * b + int(np.argmax(want[64 * b : 64 * (b + 1)]))]) for b in range(20)
        ]
        values_read = series.values.copy()
        if narrow is not None:
            values_read[narrow] = chunks.readable(values_read[narrow].astype(np.float32))
        assert values_read.tobytes() == want.reshape(20, 64).max(axis=1).tobytes()
