"""Databases of a test's own: scratch Postgres databases and migrated SQLite files.

Scratch Postgres databases are created beside the one ``NORMWATCH_TEST_DATABASE_URL``
names (default: `DEFAULT_PG`) and migrated with Alembic, as the service's own are.

On a Citus coordinator each is a cluster of its own (`normwatch.scratch`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.scratch import create_database, drop_database
from normwatch.server.db import build_engine, session_factory
from normwatch.server.migrate import upgrade

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BACKENDS = ["postgresql", "sqlite"]
"""The backends a module's own database is made on (``params`` of its fixture)."""


def base_url() -> str:
    """The database the test suite is pointed at; scratch databases are made beside it."""
    return os.environ.get("NORMWATCH_TEST_DATABASE_URL", DEFAULT_PG)


def create_scratch_pg(purpose: str, *, migrate: bool = True) -> str:
    """Create a Postgres database of its own, migrated unless ``migrate`` is false (empty);
    returns its URL."""
    return create_database(base_url(), f"normwatch_{purpose}", migrate=migrate)


def drop_scratch_pg(url: str) -> None:
    drop_database(base_url(), url)


@contextmanager
def scratch_pg(purpose: str, *, migrate: bool = True) -> Iterator[str]:
    """`create_scratch_pg` for the ``with`` block, dropped on the way out."""
    url = create_scratch_pg(purpose, migrate=migrate)
    try:
        yield url
    finally:
        drop_scratch_pg(url)


def migrated_sqlite(path: Path) -> str:
    """The URL of a new SQLite database file at ``path``, migrated."""
    url = f"sqlite:///{path}"
    engine = build_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


@contextmanager
def own_database(
    backend: str, purpose: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A migrated database of a test module's own on ``backend`` (one of `BACKENDS`) for the
    ``with`` block: a scratch Postgres database, dropped on the way out, or an SQLite file."""
    if backend == "sqlite":
        yield migrated_sqlite(tmp_path_factory.mktemp(purpose) / "normwatch.db")
        return
    with scratch_pg(purpose) as url:
        yield url


@contextmanager
def own_sessions(
    backend: str, purpose: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[sessionmaker[Session]]:
    """Sessions on `own_database` for the ``with`` block (a pool of two)."""
    with own_database(backend, purpose, tmp_path_factory) as url:
        engine = build_engine(url, pool_size=2)
        try:
            yield session_factory(engine)
        finally:
            engine.dispose()
