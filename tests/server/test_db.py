"""The engine's connection handling on a real Postgres: idle pings and read snapshots."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from normwatch.scratch import admin_dsn
from normwatch.server import db
from normwatch.server.db import begin_snapshot, build_engine, session_factory, snapshot_factory


def backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def terminate(url: str, pid: int) -> None:
    with psycopg.connect(admin_dsn(url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s::integer)", (pid,))
        for _ in range(100):  # until the backend is gone
            row = admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            if row is None:
                return
            time.sleep(0.02)


def test_a_connection_that_died_while_idle_is_replaced_unseen(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_IDLE_S", 0.2)
    engine = build_engine(pg_url, pool_size=1)
    try:
        first = backend_pid(engine)
        terminate(pg_url, first)
        time.sleep(0.3)  # idle past the threshold: pinged at checkout, found dead, replaced
        assert backend_pid(engine) != first
    finally:
        engine.dispose()


def test_a_connection_used_a_moment_ago_is_not_pinged(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ping under steady use: a connection killed right after it was used fails its
    next statement once (the request answers 503 and is retried); the pool then replaces
    every connection it had."""
    monkeypatch.setattr(db, "PING_IDLE_S", 60.0)
    engine = build_engine(pg_url, pool_size=1)
    try:
        first = backend_pid(engine)
        terminate(pg_url, first)
        with pytest.raises(OperationalError):
            backend_pid(engine)
        assert backend_pid(engine) != first
    finally:
        engine.dispose()


def test_a_snapshot_session_reads_one_snapshot_and_leaves_the_pool_as_it_was(
    pg_url: str,
) -> None:
    engine = build_engine(pg_url, pool_size=1)
    sessions = session_factory(engine)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE snapshot_probe (n integer)"))
        with sessions() as session:
            begin_snapshot(session)
            count = text("SELECT count(*) FROM snapshot_probe")
            assert session.execute(count).scalar_one() == 0
            with psycopg.connect(admin_dsn(pg_url), autocommit=True) as other:
                other.execute("INSERT INTO snapshot_probe VALUES (1)")
            assert session.execute(count).scalar_one() == 0  # committed since: not seen
            level = session.execute(text("SHOW transaction_isolation")).scalar_one()
            assert level == "repeatable read"
        with sessions() as session:  # the same pooled connection, back at the default
            assert session.execute(text("SELECT count(*) FROM snapshot_probe")).scalar_one() == 1
            level = session.execute(text("SHOW transaction_isolation")).scalar_one()
            assert level == "read committed"
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS snapshot_probe"))
        engine.dispose()


def test_a_connection_pinged_after_idling_serves_a_snapshot_read(pg_url: str) -> None:
    """The idle ping ran ``SELECT 1`` in a transaction it left open; the snapshot read that
    got the connection next failed: "can't change 'autocommit' now: ... INTRANS"."""
    engine = build_engine(pg_url, pool_size=1, ping_idle_s=0.1)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        time.sleep(0.3)  # idle past the threshold: pinged at the next checkout
        with snapshot_factory(engine)() as session:
            level = session.execute(text("SHOW transaction_isolation")).scalar_one()
        assert level == "repeatable read"
        time.sleep(0.3)
        with session_factory(engine)() as session:
            level = session.execute(text("SHOW transaction_isolation")).scalar_one()
        assert level == "read committed"
    finally:
        engine.dispose()
