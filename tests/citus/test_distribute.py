"""``normwatch db distribute`` on a database migrated before it had Citus's tables placed:
its rows move into the shards and back, intact, and every command can be run again."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import psycopg
from sqlalchemy import make_url

from normwatch.scratch import admin_dsn
from normwatch.server.db import build_engine, session_factory
from normwatch.server.migrate import upgrade
from normwatch.server.storage import citus
from tests.helpers.committed import compact, new_run, post, stored
from tests.helpers.databases import scratch_pg


def normwatch(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "normwatch", "db", *args],
        env={**os.environ, "NORMWATCH_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_distribute_moves_stored_points_into_shards_and_back() -> None:
    with scratch_pg("distribute", migrate=False) as url:
        engine = build_engine(url, pool_size=1)
        try:
            upgrade(engine, "0011")  # the schema, with every table a plain one
            with engine.connect() as conn:
                assert citus.placed(conn) == {}
            sessions = session_factory(engine)
            run = new_run(sessions)
            steps = np.arange(5000, dtype=np.int64)
            post(sessions, run, steps, g=np.sin(steps / 100.0))
            compact(sessions, run)
            post(sessions, run, steps[:50] + 5000, g=np.ones(50))  # hot points beside chunks
            before = stored(sessions, run, "g")
            engine.dispose()

            done = normwatch(url, "distribute")
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith(
                "sharded by run: blocks, chunks, rollups, series, alert_states; on every node: "
                "projects, api_tokens, alert_rules, metric_aliases, instance_secrets; "
                "on the coordinator: alerts, "
            ), done.stdout
            with engine.connect() as conn:
                kinds = citus.placed(conn)
            assert {t for t, k in kinds.items() if k == "by run"} == set(citus.BY_RUN)
            after = stored(sessions, run, "g")
            np.testing.assert_array_equal(after[0], before[0])
            np.testing.assert_array_equal(after[1], before[1])
            engine.dispose()

            again = normwatch(url, "distribute")
            assert (again.returncode, again.stdout) == (
                0,
                "every table is placed already (20 tables)\n",
            )
            up = normwatch(url, "upgrade")  # 0012 finds the tables placed already
            assert up.returncode == 0, up.stderr
            assert up.stdout.endswith(
                "on Citus: 5 tables sharded by run, 5 on every node, 10 on the coordinator\n"
            ), up.stdout

            undone = normwatch(url, "distribute", "--undo")
            assert (undone.returncode, undone.stdout) == (0, "20 tables are plain tables again\n")
            with engine.connect() as conn:
                assert citus.placed(conn) == {}
            back = stored(sessions, run, "g")
            np.testing.assert_array_equal(back[1], before[1])
            nothing = normwatch(url, "distribute", "--undo")
            assert (nothing.returncode, nothing.stdout) == (0, "nothing to undo\n")
        finally:
            engine.dispose()


def test_upgrade_on_a_coordinator_without_workers_says_what_to_do(pg_url: str) -> None:
    """A database with the extension but no nodes registered: a clear refusal, and the
    migrations (one transaction) leave nothing behind."""
    name = f"normwatch_nodes_{os.getpid()}"
    base = make_url(pg_url)
    with psycopg.connect(admin_dsn(pg_url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = base.set(database=name).render_as_string(hide_password=False)
    try:
        with psycopg.connect(admin_dsn(url), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION citus")
        up = normwatch(url, "upgrade")
        assert up.returncode == 1
        assert "cannot place the tables on this Citus cluster: the coordinator is not in" in (
            up.stderr
        )
        with psycopg.connect(admin_dsn(url), autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('runs')").fetchone() == (None,)
    finally:
        with psycopg.connect(admin_dsn(pg_url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
