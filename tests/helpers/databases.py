"""Databases of a test's own: scratch Postgres databases and migrated SQLite files.

Scratch Postgres databases are created beside the one ``NORMWATCH_TEST_DATABASE_URL``
names (default: `DEFAULT_PG`) and migrated with Alembic, as the service's own are.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from normwatch.server.db import build_engine
from normwatch.server.migrate import upgrade
from sqlalchemy import make_url

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def base_url() -> str:
    """The database the test suite is pointed at; scratch databases are made beside it."""
    return os.environ.get("NORMWATCH_TEST_DATABASE_URL", DEFAULT_PG)


def admin_dsn(url: str) -> str:
    """``url`` as a plain libpq DSN, for psycopg connections outside SQLAlchemy."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def create_scratch_pg(purpose: str, *, migrate: bool = True) -> str:
    """Create a Postgres database of its own, migrated unless ``migrate`` is false (empty);
    returns its URL."""
    name = f"normwatch_{purpose}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn(base_url()), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(base_url()).set(database=name).render_as_string(hide_password=False)
    if migrate:
        engine = build_engine(url, pool_size=1)
        upgrade(engine)
        engine.dispose()
    return url


def drop_scratch_pg(url: str) -> None:
    name = make_url(url).database
    with psycopg.connect(admin_dsn(base_url()), autocommit=True) as admin:
        # A test may have closed it to simulate an outage.
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
