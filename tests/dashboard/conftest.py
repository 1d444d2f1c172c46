"""Browser fixtures: system Chromium driven by Playwright, against a real server; and the
dashboard's data on that server's database, for page callbacks called directly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.server.db import build_engine, session_factory
from normwatch.testing import CHROMIUM_FLAGS, chromium_path


def chromium() -> str:
    found = chromium_path()
    if found is None:
        pytest.fail("Chromium not found: install it (Debian: apt-get install chromium)")
    return found


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    # Playwright gives each launch a fresh, empty profile directory of its own.
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def dashboard_sessions(pg_url: str) -> Iterator[sessionmaker[Session]]:
    """Sessions on the database of `pg_server`, for the dashboard's reads in this process."""
    engine = build_engine(pg_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


@pytest.fixture
def dashboard_data(dashboard_sessions: sessionmaker[Session]) -> DashboardData:
    """What the pages read, as `attach_dashboard` builds it (no deliverer, no allowed hosts)."""
    return DashboardData(dashboard_sessions)
