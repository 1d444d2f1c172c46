"""Every statement on the series tables names one run: a cluster sharded by run keeps each
on one shard (see docs/operations.md, "Sharding with Citus"). On Citus itself,
tests/citus/test_router_plans.py reads the plans."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, event, text

from normwatch.server.db import build_engine, session_factory
from normwatch.server.storage import compaction, retention, schedule
from normwatch.server.storage.policy import Policy
from tests.helpers.committed import new_run, post, series, stored

SERIES_TABLE = re.compile(
    r"\b(?:FROM|INTO|UPDATE|JOIN)\s+(blocks|chunks|rollups|series|alert_states)\b", re.I
)
PARAM = r"(?:%\(\w+\)s|\?|:\w+|\$\d+)"
ONE_RUN = re.compile(rf"\brun_key\s*=\s*{PARAM}", re.I)
# An insert whose run_key is one parameter for every row it writes.
ONE_RUN_INSERT = re.compile(
    rf"^\s*INSERT INTO \w+ \(run_key,.*?(?:SELECT|VALUES\s*\()\s*{PARAM}", re.I | re.S
)


@pytest.fixture
def recorded(pg_url: str) -> Iterator[tuple[Engine, list[str]]]:
    engine = build_engine(pg_url, pool_size=2)
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    yield engine, statements
    engine.dispose()


def test_ingest_compaction_reads_and_retention_stay_on_one_run(
    recorded: tuple[Engine, list[str]],
) -> None:
    engine, statements = recorded
    sessions = session_factory(engine)
    run = new_run(sessions)
    steps = np.arange(20_000, dtype=np.int64)
    post(sessions, run, steps, g=np.sin(steps / 100.0), h=np.cos(steps / 50.0))
    post(sessions, run, steps[:100], g=np.zeros(100))  # a re-send
    with sessions() as session:
        key = session.execute(text("SELECT key FROM runs WHERE id = :id"), {"id": run}).scalar_one()
    compaction.compact_run(sessions, Policy(), key, 1, 15_000)
    post(sessions, run, steps[:10] + 20_000, g=np.ones(10))
    for kw in ({"points": 1000}, {"start": 5000, "end": 6000}, {"start": 14_000, "end": 16_000}):
        series(sessions, run, "g", **kw)
    stored(sessions, run, "h")
    schedule.compact_pass(sessions, Policy(idle_s=0.0))
    retention.sweep(sessions, 3650, "summaries")
    touching = [s for s in statements if SERIES_TABLE.search(s)]
    assert len(touching) >= 10
    for statement in touching:
        assert ONE_RUN.search(statement) or ONE_RUN_INSERT.search(statement), statement
