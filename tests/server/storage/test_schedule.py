"""Compaction passes: which runs a pass takes, the rests between them, and when each comes
due again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from normwatch.server.db import build_engine, session_factory
from normwatch.server.models import utcnow
from normwatch.server.storage import schedule
from normwatch.server.storage.policy import Policy
from tests.helpers.committed import count_rows, new_run, post
from tests.helpers.series import noisy


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
