"""On Citus a metric batch is one transaction across the coordinator (the run's row, alerts,
the outbox) and the run's worker (its points): it commits in two phases, so that a crash
between the two commits leaves both or neither."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import event

from normwatch.server.db import build_engine, session_factory
from tests.helpers.committed import new_run, post


def test_a_batch_commits_in_two_phases_with_its_worker(pg_url: str) -> None:
    engine = build_engine(pg_url, pool_size=1)
    sessions = session_factory(engine)
    run = new_run(sessions)
    remote: list[str] = []

    @event.listens_for(engine, "connect")
    def watch(dbapi_conn: Any, _: Any) -> None:
        dbapi_conn.add_notice_handler(lambda d: remote.append(d.message_primary or ""))
        with dbapi_conn.cursor() as cur:
            cur.execute("SET citus.log_remote_commands = on")
            cur.execute("SET client_min_messages = log")
        dbapi_conn.commit()

    try:
        engine.dispose()  # the next connection is a watched one
        steps = np.arange(100, dtype=np.int64)
        post(sessions, run, steps, g=np.sin(steps / 10.0))
    finally:
        engine.dispose()
    sent = [m.removeprefix("issuing ") for m in remote if m.startswith("issuing ")]
    prepares = [m for m in sent if m.startswith("PREPARE TRANSACTION")]
    commits = [m for m in sent if m.startswith("COMMIT PREPARED")]
    assert len(prepares) == 1 and len(commits) == 1, sent
    assert not [m for m in sent if m == "COMMIT"], sent
