"""Reads across many series: chunk outlines, and `across.read` against the chart read's
exact points and a brute-force column maximum, on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.services.layers import layer_grid
from normwatch.server.storage import across, chunks, outline, pyramid
from normwatch.server.storage.chunks import Points
from normwatch.server.storage.metric_ids import metric_ids_by_name
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of
from sqlalchemy import text

from tests.helpers.committed import Sessions, compact, new_run, post, the_run

NAMES = ["grad/norm/embed", "grad/norm/layers.0", "grad/norm/layers.1", "grad/norm/lm_head"]
SMALL = Policy(chunk_points=256)


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
    both = outline.decode(outline.encode(buckets), int(steps[0]))
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
    got = outline.decode_parts([blob], [0], [len(buckets)], "max")
    assert got.steps.tolist() == [1, 10**12, 10**12 + 5]
    assert got.values.tolist() == [5.0, 9.0, 3.0]
    with pytest.raises(chunks.ChunkFormatError):
        outline.decode_parts([blob[:-3]], [0], [len(buckets)], "max")


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


def test_layer_grid_cells_are_column_maxima_where_buckets_fit_columns(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    rng = np.random.default_rng(3)
    steps = np.arange(64 * 64)
    posted = {name: rng.lognormal(size=len(steps)) for name in NAMES}
    posted[NAMES[1]][1000] = 1000.0  # a one-step spike keeps its colour
    post(sessions, run_id, steps, **posted)
    compact(sessions, run_id, SMALL)
    with session_scope(sessions) as session:
        grid = layer_grid(session, the_run(session, run_id), "grad/norm", points=32)
    assert grid.bucketed and grid.steps == list(range(0, 64 * 64, 128))
    for name, row in zip(grid.layers, grid.values, strict=True):
        stored = posted[f"grad/norm/{name}"].astype(np.float32)
        want = chunks.readable(stored.reshape(32, 128).max(axis=1))
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


def test_float32_and_float64_outlines_read_together(sessions: Sessions) -> None:
    """A series compacted at float64 and one at float32 hold outlines of both kinds (24 and
    16 bytes a bucket); one read picks from both through the same SQL."""
    run_id = new_run(sessions)
    rng = np.random.default_rng(11)
    steps = np.arange(1280)
    values = rng.lognormal(size=(2, len(steps)))  # no value survives float32
    post(sessions, run_id, steps, **{NAMES[0]: values[0]})
    compact(sessions, run_id, Policy(chunk_points=256, precision="float64"))
    post(sessions, run_id, steps, **{NAMES[1]: values[1]})
    compact(sessions, run_id, SMALL)
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        key, lineage = run.key, lineage_of(segments_of(session, run.key))
        by_name = metric_ids_by_name(session, key, NAMES[:2])
        ids = [by_name[n] for n in NAMES[:2]]
        rows = session.execute(
            text("SELECT metric_id, outline FROM chunks WHERE run_key = :k"), {"k": key}
        ).all()
        lengths = {mid: {len(bytes(blob)) for m, blob in rows if m == mid} for mid in ids}
        assert lengths == {ids[0]: {1 + 24 * 4}, ids[1]: {1 + 16 * 4}}  # four buckets
        got = across.read(session, key, ids, lineage, 0, 1279, 200.0, "max")
    assert not got.exact
    stored = [values[0], chunks.readable(values[1].astype(np.float32))]
    assert got.narrow[0] is None or not got.narrow[0].any()
    assert got.narrow[1] is not None and got.narrow[1].all()
    for series, narrow, want in zip(got.series, got.narrow, stored, strict=True):
        assert series.steps.tolist() == [
            64 * b + int(np.argmax(want[64 * b : 64 * (b + 1)])) for b in range(20)
        ]
        values = series.values.copy()
        if narrow is not None:
            values[narrow] = chunks.readable(values[narrow].astype(np.float32))
        np.testing.assert_array_equal(values, want.reshape(20, 64).max(axis=1))
