"""Shared fixtures: a scratch Postgres database, SQLite files, and real server processes.

Each test session gets its own Postgres database (created from the one named by
``NORMWATCH_TEST_DATABASE_URL`` and dropped afterwards), migrated with Alembic. Tests
that touch the database through a session run inside a transaction that is rolled back;
tests that talk HTTP to a real server create their own project, so no two share rows.

Functions tests call (scratch databases, tenants, receivers...) live in `tests.helpers`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import settings
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from normwatch.server.db import build_engine
from normwatch.testing import ServerProcess, start_server
from tests.helpers.databases import (
    create_scratch_pg,
    drop_scratch_pg,
    migrated_sqlite,
)
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.servers import ALERTING, server_of_its_own
from tests.helpers.tenants import Tenant, make_tenant

# Property tests draw the same examples on every run, so that the suite passes or fails the
# same way everywhere; NORMWATCH_HYPOTHESIS=explore draws new ones (to hunt for more).
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("NORMWATCH_HYPOTHESIS", "repeatable"))

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CITUS_TESTS = Path(__file__).resolve().parent / "citus"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``tests/citus`` needs a Citus cluster: it is collected only when named on the command
    line (``make test-citus``), never by the default suite on plain Postgres."""
    if collection_path != CITUS_TESTS:
        return None
    named = (Path(arg.split("::")[0]).resolve() for arg in config.args)
    return not any(p == CITUS_TESTS or CITUS_TESTS in p.parents for p in named)


# --- tiers ----------------------------------------------------------------------------------
# Every test gets one tier marker from what it uses, so that a run can pick a tier
# (``make test-fast`` is ``-m "unit or db"``): ``browser`` drives Chromium, ``e2e`` starts a
# real server process, ``db`` talks to a real database, ``unit`` neither. A module that
# starts servers or makes databases through the helpers rather than fixtures is told apart
# by what it calls. ``slow`` (declared on the test: 15 s or more) is added on top.
TIERS = ("browser", "e2e", "db", "unit")
BROWSER_FIXTURES = {"chromium", "browser", "page"}
E2E_FIXTURES = {"pg_server", "sqlite_server", "server", "alerting_server", "tenant", "api"}
DB_FIXTURES = {
    "pg_url",
    "fresh_pg_url",
    "sqlite_url",
    "db_url",
    "db_engine",
    "db_session",
    "dashboard_sessions",
    "dashboard_data",
}
E2E_CALLS = (
    "start_server(",
    "running_server(",
    "server_of_its_own(",
    "ServerProcess(",
    "subprocess.Popen(",  # a `normwatch serve` or `demo` of the test's own
)
E2E_FOLDER = Path(__file__).resolve().parent / "e2e"
DB_CALLS = (
    "own_database(",
    "own_sessions(",
    "scratch_pg(",
    "create_scratch_pg(",
    "migrated_sqlite(",
    "build_engine(",
    "create_database(",
)


def tier_of(fixtures: set[str], source: str, path: Path) -> str:
    """The tier of a test that uses ``fixtures`` in the module at ``path``, whose text is
    ``source``."""
    if fixtures & BROWSER_FIXTURES:
        return "browser"
    if E2E_FOLDER in path.parents or fixtures & E2E_FIXTURES:
        return "e2e"
    if any(call in source for call in E2E_CALLS):
        return "e2e"
    if fixtures & DB_FIXTURES or any(call in source for call in DB_CALLS):
        return "db"
    return "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sources: dict[Path, str] = {}
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIERS):
            continue  # declared on the test itself
        path = Path(item.path)
        if path not in sources:
            sources[path] = path.read_text()
        fixtures = set(getattr(item, "fixturenames", ()))
        item.add_marker(getattr(pytest.mark, tier_of(fixtures, sources[path], path)))
    # The slow ones first (the order is otherwise kept): spread over the test processes
    # from the start, none of them begins last and keeps the others waiting at the end.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A freshly created and migrated Postgres database for this test session."""
    try:
        url = create_scratch_pg("test")
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url
    drop_scratch_pg(url)


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
    return migrated_sqlite(tmp_path_factory.mktemp("sqlite") / "normwatch.db")


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
def pg_server(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server on the session's Postgres database."""
    proc = start_server(pg_url, tmp_path_factory.mktemp("server"))
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def sqlite_server(
    sqlite_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A real server on the session's SQLite file."""
    proc = start_server(sqlite_url, tmp_path_factory.mktemp("server"))
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def server(db_url: str, request: pytest.FixtureRequest) -> ServerProcess:
    """A real server on each backend in turn."""
    fixture = "pg_server" if db_url.startswith("postgresql") else "sqlite_server"
    proc: ServerProcess = request.getfixturevalue(fixture)
    return proc


@pytest.fixture(scope="session")
def alerting_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that may post alerts to 127.0.0.1, the only server on its database: no
    other process's dispatcher shares its outbox."""
    with server_of_its_own("alerts", tmp_path_factory.mktemp("alerts"), **ALERTING) as proc:
        yield proc


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """A webhook receiver on 127.0.0.1 that answers every POST 200."""
    with WebhookReceiver() as receiver:
        yield receiver


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
