"""A runs table's metric columns: `run_stats` (last value, minimum, maximum over the whole
run, from the summaries and the hot blocks) against every stored point the chart read
gives, on both backends: compacted and hot points, NaN, a restart that hides part of a
segment, a series of NaN only, a name a run never logged."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import event

from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.run_stats import SeriesStats, run_stats
from tests.helpers.committed import Sessions, compact, new_run, post, resume, stored, the_run

SMALL = Policy(chunk_points=256)


@pytest.fixture
def sessions(db_url: str) -> Iterator[Sessions]:
    engine = build_engine(db_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def reference(sessions: Sessions, run_id: str, metric: str) -> tuple[float, float]:
    """The extremes of every point a chart shows, NaN left out."""
    _, values = stored(sessions, run_id, metric)
    return float(np.nanmin(values)), float(np.nanmax(values))


def stats_of(
    sessions: Sessions, run_ids: list[str], names: list[str]
) -> dict[tuple[str, str], SeriesStats]:
    with session_scope(sessions) as session:
        runs = {the_run(session, r).key: r for r in run_ids}
        keys = [(key, the_run(session, r).segment) for key, r in runs.items()]
        got = run_stats(session, keys, names)
    return {(runs[key], name): s for (key, name), s in got.items()}


def test_extremes_over_compacted_and_hot_points_and_a_restart(sessions: Sessions) -> None:
    rng = np.random.default_rng(7)
    compacted = new_run(sessions, name="compacted")
    loss = rng.lognormal(size=3000)
    loss[[10, 2000]] = np.nan
    post(sessions, compacted, np.arange(3000), loss=loss, lr=np.full(3000, 3e-4))
    compact(sessions, compacted, SMALL)
    # Hot points after the compaction: a new minimum among them, the last logged as NaN.
    tail = np.array([5.0, 1e-9, np.nan])
    post(sessions, compacted, np.arange(3000, 3003), loss=tail)

    restarted = new_run(sessions, name="restarted")
    first = rng.normal(size=2000)
    first[1500] = 1e6  # hidden by the restart from step 1200: no longer the maximum
    post(sessions, restarted, np.arange(2000), loss=first)
    compact(sessions, restarted, SMALL)
    resume(sessions, restarted, 1200)
    post(sessions, restarted, np.arange(1200, 1300), loss=np.linspace(-3.0, 3.0, 100))

    nan_only = new_run(sessions, name="nan-only")
    post(sessions, nan_only, np.arange(5), loss=np.full(5, np.nan))

    got = stats_of(sessions, [compacted, restarted, nan_only], ["loss", "lr", "never"])
    assert set(got) == {
        (compacted, "loss"),
        (compacted, "lr"),
        (restarted, "loss"),
        (nan_only, "loss"),
    }
    lo, hi = reference(sessions, compacted, "loss")
    assert lo == 1e-9
    c = got[(compacted, "loss")]
    assert (c.last_step, c.min, c.max) == (3002, lo, hi)
    assert c.last is not None and math.isnan(c.last)
    assert got[(compacted, "lr")] == SeriesStats(2999, 3e-4, 3e-4, 3e-4)
    lo, hi = reference(sessions, restarted, "loss")
    assert hi < 1e6
    r = got[(restarted, "loss")]
    assert (r.last_step, r.last, r.min, r.max) == (1299, 3.0, lo, hi)
    n = got[(nan_only, "loss")]
    assert (n.last_step, n.min, n.max) == (4, None, None)
    assert n.last is not None and math.isnan(n.last)


def test_nothing_asked_reads_nothing(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    post(sessions, run_id, np.arange(3), loss=np.ones(3))
    assert stats_of(sessions, [run_id], []) == {}
    with session_scope(sessions) as session:
        assert run_stats(session, [], ["loss"]) == {}


def test_a_page_of_runs_costs_the_same_statements_as_one_run(sessions: Sessions) -> None:
    """The read is per page, not per run: ten times the runs, the same statements."""
    made = []
    for i in range(30):
        run_id = new_run(sessions, name=f"r{i}")
        post(sessions, run_id, np.arange(300), loss=np.arange(300.0) + i, acc=np.ones(300))
        if i % 2:
            compact(sessions, run_id, SMALL)
        made.append(run_id)

    def statements(run_ids: list[str]) -> int:
        counted: list[str] = []
        with session_scope(sessions) as session:
            keys = [(the_run(session, r).key, 1) for r in run_ids]
            engine = session.get_bind()

            def count(*args: object) -> None:
                counted.append(str(args[2]))

            event.listen(engine, "before_cursor_execute", count)
            try:
                got = run_stats(session, keys, ["loss", "acc"])
            finally:
                event.remove(engine, "before_cursor_execute", count)
        assert len(got) == 2 * len(run_ids)
        assert got[(keys[-1][0], "loss")].min == float(len(run_ids) - 1)
        return len(counted)

    assert statements(made[:3]) == statements(made)
