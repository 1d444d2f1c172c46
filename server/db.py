"""Engine and session construction for Postgres and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from .config import Settings


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def build_engine(database_url: str, *, pool_size: int = 8) -> Engine:
    """Create an engine tuned for this service's access pattern.

    SQLite runs in WAL mode with a busy timeout so the ingest writer and chart readers
    do not block one another; Postgres gets a bounded pool with pre-ping so a database
    restart costs one failed checkout rather than a stream of errors.
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
    return create_engine(
        url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, pool_recycle=1800
    )


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on error."""
    with factory() as session, session.begin():
        yield session


def engine_from_settings(settings: Settings) -> Engine:
    return build_engine(settings.database_url, pool_size=settings.db_pool_size)
