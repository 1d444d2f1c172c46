"""Programmatic Alembic: the schema is created and changed only through migrations."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import normwatch.migrations as _migrations


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(_migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def _config_of(engine: Engine) -> Config:
    return alembic_config(engine.url.render_as_string(hide_password=False))


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database at ``engine`` to ``revision`` (default: the newest)."""
    cfg = _config_of(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    cfg = _config_of(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def schema_behind(engine: Engine) -> str | None:
    """Why the database at ``engine`` cannot be served as it is (its schema is not this
    version's newest), or None when it can."""
    newest = ScriptDirectory.from_config(_config_of(engine)).get_current_head()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current == newest:
        return None
    if current is None:
        return "it has no normwatch schema yet"
    return f"its schema is at revision {current}, not this version's newest ({newest})"
