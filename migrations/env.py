"""Alembic environment: runs against the URL in the Alembic config or NORMWATCH_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from normwatch.server.config import Settings
from normwatch.server.db import build_engine
from normwatch.server.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or Settings().database_url
    engine = build_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("normwatch migrations run online only: `normwatch db upgrade`.")
run_migrations_online()
