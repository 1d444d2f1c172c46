"""Engine and session construction for Postgres and SQLite."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import psycopg
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from .config import Settings

T = TypeVar("T")

log = logging.getLogger("normwatch.server")


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def build_engine(
    database_url: str,
    *,
    pool_size: int = 8,
    pool_timeout_s: float = 10.0,
    ping_idle_s: float | None = None,
) -> Engine:
    """Create an engine tuned for this service's access pattern.

    SQLite runs in WAL mode with a busy timeout so the ingest writer and chart readers
    do not block one another; Postgres gets a bounded pool whose idle connections are
    pinged before use (see `_ping_when_idle`), so a database restart costs at most one
    failed request a worker rather than a stream of errors. A request that finds the pool
    exhausted for ``pool_timeout_s`` gets SQLAlchemy's ``TimeoutError``, which the service
    answers with 503 and ``Retry-After`` (see :mod:`.errors`). Every connection is handed
    out outside any transaction (see `_hand_out_clean`).
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
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
        pool_timeout=pool_timeout_s,
    )
    _ping_when_idle(engine, PING_IDLE_S if ping_idle_s is None else ping_idle_s)
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
        if time.monotonic() - record.info.get("used_at", 0.0) > idle_s:
            try:
                cursor = dbapi_conn.cursor()
                try:
                    cursor.execute("SELECT 1")
                finally:
                    cursor.close()
                # The driver opened a transaction for the ping: end it, or the connection
                # goes out "in transaction" and a snapshot read cannot set its isolation.
                dbapi_conn.rollback()
            except Exception as exc:
                raise DisconnectionError(f"pooled connection did not answer: {exc}") from exc
        _hand_out_clean(dbapi_conn)


def _hand_out_clean(dbapi_conn: DBAPIConnection) -> None:
    """Make sure a Postgres connection leaves the pool outside any transaction.

    The pool rolls back every connection returned to it; this is the guarantee on the way
    out, whatever touched the connection in between (an event hook, a driver-level call).
    psycopg knows the status locally, so the check costs no round trip. A connection whose
    status is unknown (its socket broke) is replaced.
    """
    status = dbapi_conn.info.transaction_status
    if status == psycopg.pq.TransactionStatus.IDLE:
        return
    if status == psycopg.pq.TransactionStatus.UNKNOWN:
        raise DisconnectionError("pooled connection is broken")
    log.warning("a pooled connection was in a transaction (%s); rolled back", status.name)
    try:
        dbapi_conn.rollback()
    except Exception as exc:
        raise DisconnectionError(f"pooled connection could not roll back: {exc}") from exc


def is_unavailable(exc: BaseException) -> bool:
    """True for database failures that a retry a moment later can get past: a refused or
    lost connection, the pool exhausted, a statement cancelled, SQLite's lock held too long."""
    if isinstance(exc, PoolTimeout):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated or isinstance(exc, OperationalError):
            return True
        return isinstance(exc.orig, psycopg.errors.QueryCanceled | psycopg.OperationalError)
    return False


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


def snapshot_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions each reading one snapshot of the database, as `begin_snapshot` does, that
    take their connection only at their first statement: a request that authenticates
    first (which may itself need a connection) never holds two connections at once, so a
    burst of reads cannot take the whole pool and then wait on it for a second one."""
    if engine.dialect.name == "postgresql":
        engine = engine.execution_options(isolation_level="REPEATABLE READ")
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on error."""
    with factory() as session, session.begin():
        yield session


def engine_from_settings(settings: Settings) -> Engine:
    return build_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        pool_timeout_s=settings.db_pool_timeout_s,
        ping_idle_s=settings.db_ping_idle_s,
    )


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
