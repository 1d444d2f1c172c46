"""Compaction into chunks and the summary pyramid, on both backends, with committed data."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from normwatch.server.auth import authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.models import Run, utcnow
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, query, runs
from normwatch.server.storage import chunks, compaction, pyramid, schedule, vacuum
from normwatch.server.storage.m4 import m4_select
from normwatch.server.storage.metric_ids import metric_ids_by_name
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of
from normwatch.server.storage.sql import padded
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

Sessions = sessionmaker[Session]


@pytest.fixture
def sessions(db_url: str) -> Iterator[Sessions]:
    engine = build_engine(db_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def new_run(sessions: Sessions, start_step: int | None = None, name: str = "r") -> str:
    with session_scope(sessions) as session:
        secret, _ = create_token(session, f"c-{uuid.uuid4().hex[:10]}", "admin")
        who = authenticate(session, secret)
        assert who is not None
        return runs.create_or_resume(session, who, RunCreate(name=name, start_step=start_step)).id


def resume(sessions: Sessions, run_id: str, start_step: int) -> None:
    with session_scope(sessions) as session:
        found = runs.get_run(session, run_id)
        assert found is not None
        run, project = found
        secret, _ = create_token(session, project, "admin")
        who = authenticate(session, secret)
        assert who is not None
        runs.create_or_resume(session, who, RunCreate(name=run.name, start_step=start_step))


def the_run(session: Session, run_id: str) -> Run:
    found = runs.get_run(session, run_id)
    assert found is not None
    return found[0]


def post(sessions: Sessions, run_id: str, steps: np.ndarray, **metrics: np.ndarray) -> None:
    def enc(v: float) -> object:
        if np.isnan(v):
            return "NaN"
        return {np.inf: "Infinity", -np.inf: "-Infinity"}.get(v, v)

    body = {
        "steps": [int(s) for s in steps],
        "metrics": {k: [enc(float(x)) for x in v] for k, v in metrics.items()},
    }
    with session_scope(sessions) as session:
        ingest.ingest_batch(session, run_id, parse_batch(body, max_points=10_000_000))


def stored(sessions: Sessions, run_id: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        lineage = lineage_of(segments_of(session, run.key))
        mid = metric_ids_by_name(session, run.key, [metric])[metric]
        pts = pyramid.read_all(session, run.key, mid, lineage, None, None)
        return pts.steps, pts.values


def series(sessions: Sessions, run_id: str, metric: str, **kw: int) -> query.Series:
    with session_scope(sessions) as session:
        [s] = query.read_series(session, the_run(session, run_id), [metric], **kw)
        return s


def compact(sessions: Sessions, run_id: str, policy: Policy | None = None) -> None:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        key, segment = run.key, run.segment
    for seg in range(1, segment + 1):
        compaction.compact_run(sessions, policy or Policy(), key, seg, 2**62)


def count_rows(sessions: Sessions, run_id: str, table: str) -> int:
    with session_scope(sessions) as session:
        key = the_run(session, run_id).key
        return int(
            session.execute(
                text(f"SELECT count(*) FROM {table} WHERE run_key = :k"), {"k": key}
            ).scalar_one()
        )


def noisy(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.int64)
    values = 2.0 + rng.normal(size=n) * 0.05
    return steps, values


def f32(values: np.ndarray) -> np.ndarray:
    return chunks.stored_values(values, "float32")


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
    assert same(got_values, f32(values))


def test_float64_setting_is_lossless(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(5000, seed=1)
    post(sessions, run, steps, g=values)
    compact(sessions, run, Policy(precision="float64"))
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps) and same(got_values, values)


def test_zoomed_out_read_equals_m4_over_every_point(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(300_000, seed=2)
    values[123_457] = 50.0  # a one-step spike
    values[200_001] = np.nan
    post(sessions, run, steps, g=values)
    compact(sessions, run)
    assert count_rows(sessions, run, "rollups") == 3  # two level-1 rows, one level-2 row
    values = f32(values)
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
    assert same(s.values, f32(values[20_000:21_000]))


def test_hot_and_compacted_points_merge(sessions: Sessions) -> None:
    run = new_run(sessions)
    steps, values = noisy(10_000, seed=4)
    post(sessions, run, steps[:6000], g=values[:6000])
    compact(sessions, run)
    post(sessions, run, steps[6000:], g=values[6000:])  # still hot
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps)
    assert same(got_values[:6000], f32(values[:6000])) and same(got_values[6000:], values[6000:])
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
    post(sessions, run, steps[100:200], g=values[100:200] + 1.0)  # a re-send, changed values
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps)  # no step twice, even before compaction
    assert same(got_values, f32(values))  # the stored values win
    compact(sessions, run)
    assert count_rows(sessions, run, "blocks") == 0
    got_steps, got_values = stored(sessions, run, "g")
    assert same(got_steps, steps) and same(got_values, f32(values))
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
    assert same(got_values[:8000], f32(values[:8000])) and (got_values[8000:] == 7.0).all()
    s = series(sessions, run, "g", points=50)
    assert s.total_points == 12_000 and s.steps[-1] == 11_999


def test_the_pass_follows_the_policy(fresh_pg_url: str) -> None:
    engine = build_engine(fresh_pg_url, pool_size=2)
    sessions = session_factory(engine)
    try:
        run = new_run(sessions)
        steps, values = noisy(1000, seed=7)
        post(sessions, run, steps, g=values)
        policy = Policy(chunk_points=4096, max_age_s=3600, idle_s=3600)
        report = schedule.compact_pass(sessions, policy)
        assert report.points == 0  # young, near and busy: left hot
        report = schedule.compact_pass(sessions, policy, utcnow() + timedelta(hours=2))
        assert report.points == 1000 and report.runs == 1
        assert count_rows(sessions, run, "blocks") == 0
        post(sessions, run, np.arange(1000, 6000), g=np.ones(5000))
        report = schedule.compact_pass(sessions, policy)
        assert report.points == 5000  # far enough past the last cut
        assert schedule.compact_pass(sessions, policy).points == 0
    finally:
        engine.dispose()


def test_the_pass_rests_between_routine_runs_only(fresh_pg_url: str) -> None:
    """Runs due by their clock are spread out by the pause; runs that piled up points are
    taken back to back; a pause that says stop ends the pass."""
    engine = build_engine(fresh_pg_url, pool_size=2)
    sessions = session_factory(engine)
    try:
        policy = Policy(chunk_points=4096, max_age_s=3600, idle_s=3600)
        quiet = [new_run(sessions, name=f"quiet{i}") for i in range(3)]
        for run in quiet:
            post(sessions, run, np.arange(100), g=np.ones(100))
        rests: list[float] = []

        def rest(took: float) -> bool:
            rests.append(took)
            return True

        later = utcnow() + timedelta(hours=2)  # every run is idle by then
        report = schedule.compact_pass(sessions, policy, later, pause=rest)
        assert report.runs == 3 and report.points == 300
        assert len(rests) == 2 and all(t > 0 for t in rests)  # between runs, not after the last

        busy = [new_run(sessions, name=f"busy{i}") for i in range(3)]
        for run in busy:
            post(sessions, run, np.arange(5000), g=np.ones(5000))  # a chunk's worth and more
        rests.clear()
        report = schedule.compact_pass(sessions, policy, pause=rest)
        assert report.runs == 3 and report.points == 15_000 and rests == []

        for run in quiet:
            post(sessions, run, np.arange(100, 200), g=np.ones(100))
        report = schedule.compact_pass(
            sessions, policy, later + timedelta(hours=2), pause=lambda took: False
        )
        assert report.runs == 1 and report.points == 100
        assert sum(count_rows(sessions, run, "blocks") for run in quiet) == 2
    finally:
        engine.dispose()


def test_runs_compacted_together_come_due_one_after_another() -> None:
    """Runs compacted in the same pass come due again spread over the next period, each at
    its own time, then keep a period between compactions; none waits longer than that."""
    period = 300.0
    t0 = datetime(2026, 3, 1, 12, 0, 7, tzinfo=UTC)

    def due_after(key: int, since: datetime) -> float:
        return next(
            s / 10
            for s in range(1, 10 * int(period) + 20)
            if schedule._crossed_slot(key, since, since + timedelta(seconds=s / 10), period)
        )

    firsts = [due_after(key, t0) for key in range(1, 101)]
    assert all(0 < w <= period for w in firsts)
    per_window = np.histogram(firsts, bins=30, range=(0, period))[0]
    assert per_window.max() <= 6, per_window  # 100 runs over 30 windows of 10 s: no burst
    for key, first in zip(range(1, 101), firsts, strict=True):
        since = t0 + timedelta(seconds=first)
        assert abs(due_after(key, since) - period) <= 0.2


def test_the_compactor_vacuums_the_hot_table_once_its_dead_rows_pile_up(
    fresh_pg_url: str,
) -> None:
    """On a Postgres whose autovacuum does not keep up (here it is off), the dead rows that
    compaction leaves in ``blocks`` are vacuumed once they pass autovacuum's own trigger."""
    engine = build_engine(fresh_pg_url, pool_size=2)
    sessions = session_factory(engine)

    def dead_rows() -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'blocks'")
                ).scalar_one()
            )

    try:
        n = vacuum.VACUUM_THRESHOLD + 10_000
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO blocks (run_key, metric_id, segment, first_step, last_step, "
                    "count, last_value, steps, data) SELECT 1, g, 1, 0, 0, 1, 0, NULL, "
                    "'\\x3ff0000000000000'::bytea FROM generate_series(1, :n) g"
                ),
                {"n": n},
            )
        assert vacuum.vacuum_hot_table(sessions) is None  # nothing dead yet
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM blocks WHERE metric_id > 5000"))
        deadline = time.monotonic() + 10
        while dead_rows() < n - 5000:  # statistics reach the shared counters within a second
            assert time.monotonic() < deadline, dead_rows()
            time.sleep(0.1)
        vacuumed = vacuum.vacuum_hot_table(sessions)
        assert vacuumed is not None and vacuumed[0] >= n - 5000
        assert dead_rows() == 0
        assert vacuum.vacuum_hot_table(sessions) is None
    finally:
        engine.dispose()


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


@pytest.mark.parametrize("count", [1, 2, 3, 5, 100, 511, 512, 513])
def test_padded_rows_repeat_the_last_up_to_a_power_of_two(count: int) -> None:
    rows = [(i,) for i in range(count)]
    out = padded(rows)
    size = len(out)
    assert size >= count and size & (size - 1) == 0 and size < 2 * count + 1
    assert list(out[:count]) == rows and set(out[count:]) <= {rows[-1]}
