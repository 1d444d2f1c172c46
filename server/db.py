"""Engine and session construction for Postgres and SQLite."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from .config import Settings

T = TypeVar("T")


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def build_engine(database_url: str, *, pool_size: int = 8) -> Engine:
    """Create an engine tuned for this service's access pattern.

    SQLite runs in WAL mode with a busy timeout so the ingest writer and chart readers
    do not block one another; Postgres gets a bounded pool whose idle connections are
    pinged before use (see `_ping_when_idle`), so a database restart costs at most one
    failed request a worker rather than a stream of errors.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_pre_ping=True
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_recycle=1800)
    _ping_when_idle(engine, PING_IDLE_S)
    return engine


PING_IDLE_S = 5.0
"""A pooled Postgres connection idle longer than this is pinged before it is handed out."""


def _ping_when_idle(engine: Engine, idle_s: float) -> None:
    """Pessimistic disconnect handling, for connections that sat idle only.

    SQLAlchemy's ``pool_pre_ping`` costs a round trip on every checkout: under steady load,
    one more statement for every request. A connection used a moment ago is as good as the
    statement it just ran, so only one idle longer than ``idle_s`` is pinged; a dead one is
    replaced (``DisconnectionError`` makes the pool retry with a fresh connection). One that
    died while busy (a database restart under load) fails its next statement: SQLAlchemy
    then invalidates the whole pool, and that one request gets a 503 to retry.
    """

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _used(_dbapi_conn: DBAPIConnection | None, record: ConnectionPoolEntry) -> None:
        record.info["used_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry, _proxy: object) -> None:
        if time.monotonic() - record.info.get("used_at", 0.0) <= idle_s:
            return
        try:
            cursor = dbapi_conn.cursor()
            try:
                cursor.execute("SELECT 1")
            finally:
                cursor.close()
        except Exception as exc:
            raise DisconnectionError(f"pooled connection did not answer: {exc}") from exc


def begin_snapshot(session: Session) -> None:
    """Begin the session's transaction as one snapshot of the database; call it first.

    A chart read takes several statements (summaries, chunks, hot blocks), and a compaction
    committing between two of them would otherwise move points from one to the other under
    the read: counted twice, or missed. On Postgres the transaction runs at REPEATABLE READ
    (read-only, so it never fails to serialize); on SQLite a read transaction in WAL mode is
    one snapshot already.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on error."""
    with factory() as session, session.begin():
        yield session


def engine_from_settings(settings: Settings) -> Engine:
    return build_engine(settings.database_url, pool_size=settings.db_pool_size)


class PerEngine(Generic[T]):
    """One object per engine, made by ``make`` on first use: a process's caches of what a
    database holds (ids are only unique within one database, and a process talking to two,
    as the test suite does, must not mix them up)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._held: weakref.WeakKeyDictionary[Engine, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, engine: Engine) -> T:
        with self._lock:
            held = self._held.get(engine)
            if held is None:
                held = self._held[engine] = self._make()
            return held
