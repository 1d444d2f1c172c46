"""Retention on a database of its own: old runs thinned to summaries, or dropped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.migrate import upgrade
from normwatch.server.models import AlertRule, utcnow
from normwatch.server.storage import retention
from tests.helpers.committed import Sessions, count_rows, new_run, post, series, the_run
from tests.helpers.databases import migrated_sqlite, scratch_pg
from tests.helpers.series import noisy


@pytest.fixture(params=["postgresql", "sqlite"])
def own(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sessions]:
    with ExitStack() as scratch:
        if request.param == "postgresql":
            url = scratch.enter_context(scratch_pg("retention"))
        else:
            url = migrated_sqlite(tmp_path / "retention.db")
        engine = build_engine(url, pool_size=2)
        yield session_factory(engine)
        engine.dispose()


def age(sessions: Sessions, run_id: str, days: float) -> None:
    with session_scope(sessions) as session:
        session.execute(
            text("UPDATE runs SET last_seen = :t WHERE id = :id"),
            {"t": utcnow() - timedelta(days=days), "id": run_id},
        )


def test_old_runs_keep_their_summaries_and_every_spike(own: Sessions) -> None:
    old, recent = new_run(own, name="old"), new_run(own, name="recent")
    steps, values = noisy(100_000, seed=9)
    values[77_777] = 40.0
    values[88_888] = np.nan
    post(own, old, steps, g=values)
    post(own, recent, steps[:1000], g=values[:1000])
    age(own, old, 40)
    swept = retention.sweep(own, 30, "summaries")
    assert swept.runs == 1 and swept.chunks_thinned == 25
    assert count_rows(own, old, "blocks") == 0  # compacted first, then thinned
    assert count_rows(own, recent, "blocks") == 1  # untouched: one batch, one block
    for kw in ({"points": 1000}, {"start": 77_000, "end": 78_000, "points": 1000}):
        s = series(own, old, "g", **kw)
        assert 40.0 in s.values.tolist() and 77_777 in s.steps.tolist()
        assert s.downsampled
    s = series(own, old, "g", start=88_000, end=89_000, points=1000)
    assert 88_888 in s.steps.tolist() and np.isnan(s.values[s.steps.tolist().index(88_888)])
    assert retention.sweep(own, 30, "summaries").runs == 0  # nothing left to do


def test_old_runs_can_be_dropped_whole(own: Sessions) -> None:
    """With their alert states too, which keep no foreign key to runs on Citus."""
    old, recent = new_run(own, name="old"), new_run(own, name="recent")
    with session_scope(own) as session:
        for run_id in (old, recent):  # each run is in a project of its own
            session.add(
                AlertRule(
                    project_id=the_run(session, run_id).project_id,
                    name="g above 0.5",
                    metric="g",
                    condition={"kind": "threshold", "op": ">", "value": 0.5},
                )
            )
    post(own, old, np.arange(5000), g=np.ones(5000))
    post(own, recent, np.arange(10), g=np.ones(10))
    assert count_rows(own, old, "alert_states") == count_rows(own, recent, "alert_states") == 1
    with session_scope(own) as session:
        old_key = the_run(session, old).key
    age(own, old, 40)
    assert retention.sweep(own, 30, "drop").runs == 1
    with session_scope(own) as session:
        ids = [r[0] for r in session.execute(text("SELECT id FROM runs"))]
        left = session.execute(text("SELECT sum(count) FROM blocks")).scalar_one()
        states = session.execute(text("SELECT run_key FROM alert_states")).scalars().all()
    assert ids == [recent] and left == 10
    assert old_key not in states and len(states) == 1


def test_command_line_compacts_and_applies_retention(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    engine = build_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    run = new_run(sessions)
    post(sessions, run, np.arange(10_000), g=np.ones(10_000))
    env = {**os.environ, "NORMWATCH_DATABASE_URL": url}

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "normwatch", "db", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "compacted 10,000 points of 1 series in 1 runs" in cli("compact")
    assert count_rows(sessions, run, "blocks") == 0
    age(sessions, run, 10)
    assert "1 run(s) would be affected (drop)" in cli(
        "retention", "--days", "5", "--mode", "drop", "--dry-run"
    )
    assert "1 run(s) quiet for 5+ days thinned to summaries" in cli("retention", "--days", "5")
    assert series(sessions, run, "g", points=10).total_points == 10_000
    engine.dispose()
