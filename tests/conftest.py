"""Shared fixtures: a scratch Postgres database, SQLite files, and real server processes.

Each test session gets its own Postgres database (created from the one named by
``NORMWATCH_TEST_DATABASE_URL`` and dropped afterwards), migrated with Alembic. Tests
that touch the database through a session run inside a transaction that is rolled back;
tests that talk HTTP to a real server create their own project, so no two share rows.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
import pytest
from hypothesis import settings
from normwatch.server.auth import create_token
from normwatch.server.db import build_engine, session_factory
from normwatch.server.migrate import upgrade
from sqlalchemy import Engine, make_url
from sqlalchemy.orm import Session

from normwatch.testing import ServerProcess, start_server

# Property tests draw the same examples on every run, so that the suite passes or fails the
# same way everywhere; NORMWATCH_HYPOTHESIS=explore draws new ones (to hunt for more).
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("NORMWATCH_HYPOTHESIS", "repeatable"))


@pytest.fixture(scope="session", autouse=True)
def spool_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every client of the session (and the processes it starts) spools to a scratch folder."""
    path = tmp_path_factory.mktemp("spool")
    previous = os.environ.get("NORMWATCH_SPOOL_DIR")
    os.environ["NORMWATCH_SPOOL_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("NORMWATCH_SPOOL_DIR", None)
    else:
        os.environ["NORMWATCH_SPOOL_DIR"] = previous


DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def _admin_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A freshly created and migrated Postgres database for this test session."""
    base = os.environ.get("NORMWATCH_TEST_DATABASE_URL", DEFAULT_PG)
    name = f"normwatch_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        admin = psycopg.connect(_admin_dsn(base), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"Postgres at {base} does not answer ({exc}); run ./scripts/ensure-postgres")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    engine = build_engine(url, pool_size=1)
    upgrade(engine)
    engine.dispose()
    yield url
    with psycopg.connect(_admin_dsn(base), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_scratch_pg(purpose: str) -> str:
    """Create and migrate a Postgres database of its own; returns its URL."""
    base = os.environ.get("NORMWATCH_TEST_DATABASE_URL", DEFAULT_PG)
    name = f"normwatch_{purpose}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_admin_dsn(base), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    engine = build_engine(url, pool_size=1)
    upgrade(engine)
    engine.dispose()
    return url


def drop_scratch_pg(url: str) -> None:
    name = make_url(url).database
    base = os.environ.get("NORMWATCH_TEST_DATABASE_URL", DEFAULT_PG)
    with psycopg.connect(_admin_dsn(base), autocommit=True) as admin:
        # A test may have closed it to simulate an outage.
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """A Postgres database of this test's own, migrated, dropped afterwards.

    For tests whose server must be the only one working on the data (every server process
    on a database shares its alert outbox)."""
    url = create_scratch_pg("own")
    yield url
    drop_scratch_pg(url)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("sqlite") / "normwatch.db"
    url = f"sqlite:///{path}"
    engine = build_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture(scope="session", params=["postgresql", "sqlite"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn."""
    fixture = "pg_url" if request.param == "postgresql" else "sqlite_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture(scope="session")
def db_engine(db_url: str) -> Iterator[Engine]:
    engine = build_engine(db_url, pool_size=2)
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(db_engine: Engine) -> Iterator[Session]:
    """A session whose every change is rolled back at the end of the test.

    On SQLite the outer transaction takes the write lock up front (``BEGIN IMMEDIATE``):
    the session's SAVEPOINT would otherwise open a deferred transaction whose first write,
    after a read, fails at once ("database is locked") whenever another process sharing
    the file (a test server's compactor) committed in between; taken up front, the lock is
    waited for.
    """
    with db_engine.connect() as conn:
        outer = conn.begin()
        if db_engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        session = Session(bind=conn, join_transaction_mode="create_savepoint")
        try:
            yield session
        finally:
            session.close()
            outer.rollback()


@pytest.fixture(scope="session")
def server(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server on each backend in turn."""
    proc = start_server(db_url, tmp_path_factory.mktemp("server"))
    yield proc
    proc.stop()


@dataclass(frozen=True)
class Tenant:
    """A project of its own with a token of each scope."""

    project: str
    ingest: str
    read: str
    admin: str

    def headers(self, scope: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, scope)}"}


def make_tenant(database_url: str) -> Tenant:
    engine = build_engine(database_url, pool_size=1)
    project = f"proj-{uuid.uuid4().hex[:10]}"
    try:
        with session_factory(engine)() as session, session.begin():
            tokens = {s: create_token(session, project, s)[0] for s in ("ingest", "read", "admin")}
    finally:
        engine.dispose()
    return Tenant(project, tokens["ingest"], tokens["read"], tokens["admin"])


@pytest.fixture
def tenant(server: ServerProcess) -> Tenant:
    return make_tenant(server.database_url)


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """``asyncio.run(coroutine)`` in a thread of its own: what it returned, or re-raising
    what it raised.

    A browser test earlier in the process may have left this thread's event loop running
    (Playwright's sync API), and ``asyncio.run`` needs a thread without one.
    """
    failures: list[BaseException] = []
    results: list[T] = []

    def run() -> None:
        try:
            results.append(asyncio.run(coroutine))
        except BaseException as exc:  # re-raised in the test's own thread below
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the coroutine did not finish in time"
    if failures:
        raise failures[0]
    return results[0]
