"""Alembic owns the schema: upgrade, downgrade, upgrade again, and no drift."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from normwatch.server.db import build_engine
from normwatch.server.migrate import downgrade, upgrade
from normwatch.server.models import Base
from sqlalchemy import inspect, make_url

from tests.conftest import DEFAULT_PG, _admin_dsn


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_db(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    base = os.environ.get("NORMWATCH_TEST_DATABASE_URL", DEFAULT_PG)
    name = f"normwatch_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_admin_dsn(base), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_url(base).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(_admin_dsn(base), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_upgrade_downgrade_upgrade_without_drift(empty_db: str) -> None:
    engine = build_engine(empty_db, pool_size=1)
    try:
        upgrade(engine)
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        upgrade(engine)
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, Base.metadata)
        assert diff == []
    finally:
        engine.dispose()
