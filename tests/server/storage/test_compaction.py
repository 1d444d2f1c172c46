"""Compaction into chunks and the summary pyramid, on both backends, with committed data."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import text

from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.storage import chunks
from normwatch.server.storage.m4 import m4_select
from normwatch.server.storage.policy import Policy
from tests.helpers.committed import (
    Sessions,
    compact,
    count_rows,
    new_run,
    post,
    resume,
    series,
    stored,
    the_run,
)
from tests.helpers.series import noisy


@pytest.fixture
def sessions(db_url: str) -> Iterator[Sessions]:
    engine = build_engine(db_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


def test_compacted_points_read_back_exactly_and_hot_rows_go(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(20_000)
    values[[100, 7000, 7001]] = [np.nan, np.inf, -np.inf]
    for lo in range(0, 20_000, 5000):
        post(sessions, run, steps[lo : lo + 5000], g=values[lo : lo + 5000])
    compact(sessions, run)
    assert count_rows(sessions, run, "blocks") == 0
    assert count_rows(sessions, run, "chunks") == 5  # 4096 points a chunk
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps)
    assert same(got_values, values)


def test_the_opt_in_float32_setting_rounds_values_to_float32(sessions: Sessions) -> None:
    """``NORMWATCH_COMPACTION_PRECISION=float32`` is lossy, as documented: each value reads
    back as the shortest decimal of its float32, 1/3 as 0.33333334."""
    run = new_run(sessions)
    steps, values = noisy(5000, seed=1)
    values[:3] = [1 / 3, 1e-50, 16.017241]
    post(sessions, run, steps, g=values)
    compact(sessions, run, Policy(precision="float32"))
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps)
    assert same(got_values, chunks.stored_values(values, "float32"))
    assert same(got_values.astype(np.float32), values.astype(np.float32))
    assert got_values[:3].tolist() == [0.33333334, 0.0, 16.01724]


def test_a_float32_tail_grows_in_float64_and_its_points_read_as_before(
    sessions: Sessions,
) -> None:
    """A store compacted under the earlier float32 default, compacted on under the lossless
    one: the unfinished float32 chunk takes the new points as float64, its own points keep
    the values they read as (their shortest float32 decimals), the new ones are exact."""
    run = new_run(sessions)
    steps, values = noisy(3000, seed=7)
    post(sessions, run, steps[:1000], g=values[:1000])
    compact(sessions, run, Policy(precision="float32"))
    before = stored(sessions, run, "g")[1]
    assert same(before, chunks.stored_values(values[:1000], "float32"))
    post(sessions, run, steps[1000:], g=values[1000:])
    compact(sessions, run)
    assert count_rows(sessions, run, "chunks") == 1
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps)
    assert same(got_values[:1000], before) and same(got_values[1000:], values[1000:])
    with session_scope(sessions) as session:
        key = the_run(session, run).key
        data = session.execute(
            text("SELECT data FROM chunks WHERE run_key = :k"), {"k": key}
        ).scalar_one()
    assert not chunks.holds_float32(bytes(data))


def test_float64_chunks_stay_exact_when_compaction_turns_to_float32(sessions: Sessions) -> None:
    """Opting into float32 rounds what is compacted from then on, never what is already
    stored exactly: a float64 chunk that grows (its tail) or takes a late point is packed
    as float64 again; new chunks are float32."""
    run = new_run(sessions)
    steps, values = noisy(10_000, seed=8)
    post(sessions, run, steps[:5000:2], g=values[:5000:2])  # 2,500 points: one tail chunk
    compact(sessions, run)
    late = steps[1:5000:2][:100]  # inside the chunk's range
    post(sessions, run, late, g=values[1:5000:2][:100])
    post(sessions, run, steps[5000:], g=values[5000:])
    compact(sessions, run, Policy(precision="float32"))
    got_steps, got_values = stored(sessions, run, "g")
    want = dict(zip(steps[:5000:2].tolist(), values[:5000:2].tolist(), strict=True))
    want |= dict(zip(late.tolist(), values[1:5000:2][:100].tolist(), strict=True))
    tail_room = 4096 - len(want)  # what the float64 tail chunk takes of the new points
    fresh = slice(5000, 5000 + tail_room)
    want |= dict(zip(steps[fresh].tolist(), values[fresh].tolist(), strict=True))
    rounded = chunks.stored_values(values[5000:][tail_room:], "float32")
    want |= dict(zip(steps[5000:][tail_room:].tolist(), rounded.tolist(), strict=True))
    assert got_steps.tolist() == sorted(want)
    assert got_values.tolist() == [want[s] for s in sorted(want)]
    with session_scope(sessions) as session:
        key = the_run(session, run).key
        heads = session.execute(
            text("SELECT substr(data, 1, 4) FROM chunks WHERE run_key = :k ORDER BY seq"),
            {"k": key},
        ).all()
    assert [chunks.holds_float32(bytes(h)) for (h,) in heads] == [False, True]


def test_zoomed_out_read_equals_m4_over_every_point(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(300_000, seed=2)
    values[123_457] = 50.0  # a one-step spike
    values[200_001] = np.nan
    post(sessions, run, steps, g=values)
    compact(sessions, run)
    assert count_rows(sessions, run, "rollups") == 3  # two level-1 rows, one level-2 row
    for start, end, points in [(None, None, 1000), (None, None, 300), (100_000, 150_000, 500)]:
        s = series(
            sessions,
            run,
            "g",
            points=points,
            **({} if start is None else {"start": start, "end": end}),
        )
        lo, hi = (0, 299_999) if start is None else (start, end)
        inside = (steps >= lo) & (steps <= hi)
        keep = m4_select(steps[inside], values[inside], points, lo, hi)
        assert s.downsampled and s.total_points == int(inside.sum())
        if lo <= 123_457 <= hi:
            assert 123_457 in s.steps.tolist() and 50.0 in s.values.tolist()
        # Every point is a real stored one.
        index = np.searchsorted(steps, s.steps)
        assert same(values[index], s.values)
        # Per pixel, M4's extremes over every point, except where a 64-point summary
        # bucket straddles the pixel's edge: there the bucket's own extreme stands in.
        edges = np.linspace(lo, hi + 1, points + 1)
        ref_s = steps[inside][keep]
        missing = np.setdiff1d(ref_s, s.steps)
        near_edge = np.abs(edges[np.searchsorted(edges, missing).clip(1, points) - 1] - missing)
        near_edge = np.minimum(
            near_edge, np.abs(edges[np.searchsorted(edges, missing).clip(0, points)] - missing)
        )
        assert (near_edge <= chunks.FANOUT).all()


def test_zoomed_in_read_is_every_point(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(50_000, seed=3)
    post(sessions, run, steps, g=values)
    compact(sessions, run)
    s = series(sessions, run, "g", start=20_000, end=20_999, points=1000)
    assert not s.downsampled
    assert s.steps.tolist() == list(range(20_000, 21_000))
    assert same(s.values, values[20_000:21_000])


def test_hot_and_compacted_points_merge(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(10_000, seed=4)
    post(sessions, run, steps[:6000], g=values[:6000])
    compact(sessions, run)
    post(sessions, run, steps[6000:], g=values[6000:])  # still hot
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps)
    assert same(got_values[:6000], values[:6000]) and same(got_values[6000:], values[6000:])
    s = series(sessions, run, "g", points=100)
    assert s.total_points == 10_000 and s.steps[0] == 0 and s.steps[-1] == 9999


def test_compaction_is_idempotent_and_resends_are_stored_once(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(9000, seed=5)
    post(sessions, run, steps, g=values)
    compact(sessions, run)
    before = count_rows(sessions, run, "chunks")
    compact(sessions, run)  # nothing to do
    assert count_rows(sessions, run, "chunks") == before
    resent = post(sessions, run, steps[100:200], g=values[100:200] + 1.0)  # changed values
    assert (resent.points, resent.ignored) == (0, {"g": 100}), "counted, not stored"
    assert count_rows(sessions, run, "blocks") == 0
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps)  # no step twice, even before compaction
    assert same(got_values, values)  # the stored values win
    compact(sessions, run)
    assert count_rows(sessions, run, "blocks") == 0
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps) and same(got_values, values)
    with session_scope(sessions) as session:
        key = the_run(session, run).key
        points = session.execute(
            text("SELECT sum(points) FROM series WHERE run_key = :k"), {"k": key}
        ).scalar_one()
    assert points == 9000


def test_late_points_merge_into_their_chunk_and_tails_fill_up(sessions: Sessions) -> None:
    run = new_run(sessions)
    even = np.arange(0, 2000, 2, dtype=np.int64)
    post(sessions, run, even, g=even * 1.0)
    compact(sessions, run)
    assert count_rows(sessions, run, "chunks") == 1
    odd = np.arange(1, 200, 2, dtype=np.int64)
    post(sessions, run, odd, g=odd * 1.0)  # late: inside the compacted range
    more = np.arange(2000, 3000, dtype=np.int64)
    post(sessions, run, more, g=more * 1.0)
    compact(sessions, run)
    assert count_rows(sessions, run, "chunks") == 1  # the partial chunk grew
    got_steps, got_values = stored(sessions, run, "g")
    expected = np.unique(np.concatenate([even, odd, more]))
    assert same(got_steps, expected) and same(got_values, expected * 1.0)
    s = series(sessions, run, "g", points=10)
    assert s.total_points == len(expected)


def test_restart_segments_compact_and_read_by_lineage(sessions: Sessions) -> None:
    run = new_run(sessions, start_step=0)
    steps, values = noisy(10_000, seed=6)
    post(sessions, run, steps, g=values)
    resume(sessions, run, 8000)  # a restart from an earlier checkpoint
    later = np.arange(8000, 12_000, dtype=np.int64)
    post(sessions, run, later, g=np.full(len(later), 7.0))
    compact(sessions, run)
    assert count_rows(sessions, run, "blocks") == 0
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, np.arange(12_000))
    assert same(got_values[:8000], values[:8000]) and (got_values[8000:] == 7.0).all()
    s = series(sessions, run, "g", points=50)
    assert s.total_points == 12_000 and s.steps[-1] == 11_999


def test_statements_keep_a_few_shapes_whatever_the_number_of_series(db_url: str) -> None:
    """SQLAlchemy caches each statement text it compiles (psycopg prepares them too): a text
    for every number of series would keep hundreds of large statements in a long-running
    compactor. Runs of 1 to 40 series, compacted twice (tails and rollups read back), must
    use the same few shapes."""
    engine = build_engine(db_url, pool_size=2)
    sessions = session_factory(engine)
    try:
        policy = Policy(chunk_points=64)
        for width in range(1, 41):
            run = new_run(sessions, name=f"w{width}")
            names = [f"m{i}" for i in range(width)]
            for lo in (0, 100):
                steps = np.arange(lo, lo + 100, dtype=np.int64)
                post(sessions, run, steps, **{n: steps * 0.5 for n in names})
                compact(sessions, run, policy)
            assert stored(sessions, run, names[-1])[0].tolist() == list(range(200))
        cache = engine._compiled_cache
        assert cache is not None
        assert len(cache) <= 60, len(cache)
    finally:
        engine.dispose()
