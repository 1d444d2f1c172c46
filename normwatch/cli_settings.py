"""The settings and the database engine a command works on, or why it cannot have them.

``normwatch serve`` with nothing configured makes and serves ``./normwatch.db`` (the
default of ``NORMWATCH_DATABASE_URL``). The commands that work on a server's database
(``token``, ``db``, ``aliases``) must find that database, not make an empty one: with
nothing configured and no ``./normwatch.db`` they stop with :class:`DatabaseNotReady`,
whose message says what to set, and leave no file behind. So does a configured SQLite file
that is not there (except for ``db upgrade``, which creates it) and a database without
normwatch's tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sqlalchemy import URL, Engine

    from normwatch.server.config import Settings

__all__ = ["DatabaseNotReady", "Need", "settings_and_engine"]

Need = Literal["any", "configured", "migrated"]
"""What a command needs of the database.

``any``: whatever the settings name, made if missing (``serve``). ``configured``: a
database named by ``NORMWATCH_DATABASE_URL``, or the default file already there; a
configured SQLite file is created (``db upgrade``). ``migrated``: that, and the database
exists and has normwatch's tables (every other command).
"""


class DatabaseNotReady(Exception):
    """The command's database is not configured, not there, or not migrated; the message
    says what to do."""


def settings_and_engine(need: Need = "migrated") -> tuple[Settings, Engine]:
    """The settings from the environment and an engine on their database, once the
    database is what ``need`` says. Raises `DatabaseNotReady` otherwise, having created
    nothing."""
    from sqlalchemy.engine import make_url

    from normwatch.server.config import Settings
    from normwatch.server.db import engine_from_settings

    settings = Settings()
    url = make_url(settings.database_url)
    if need != "any":
        configured = "database_url" in settings.model_fields_set
        sqlite_file = _sqlite_file(url)
        if not configured and (sqlite_file is None or not sqlite_file.exists()):
            raise DatabaseNotReady(_not_configured(sqlite_file))
        if need == "migrated" and sqlite_file is not None and not sqlite_file.exists():
            raise DatabaseNotReady(
                f"there is no database at {sqlite_file} "
                f"(NORMWATCH_DATABASE_URL={settings.database_url}): `normwatch db upgrade` "
                "creates it, or set NORMWATCH_DATABASE_URL to the database your server uses"
            )
    engine = engine_from_settings(settings)
    if need == "migrated":
        try:
            _check_migrated(engine)
        except BaseException:
            engine.dispose()
            raise
    return settings, engine


def _sqlite_file(url: URL) -> Path | None:
    """The file of an SQLite URL, absolute; None for another database or an in-memory one."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.query.get("uri") == "true":  # a file: URI, read by SQLite itself
        return None
    return Path(url.database).resolve()


def _not_configured(default_file: Path | None) -> str:
    here = f" and there is no {default_file.name} here" if default_file is not None else ""
    demo = Path.cwd().resolve() / "normwatch-demo.db"
    return (
        f"no database is configured{here} (the SQLite file `normwatch serve` makes when "
        "nothing is set). Set NORMWATCH_DATABASE_URL, in the environment or in .env, to the "
        "database your server uses, for example\n"
        "  export NORMWATCH_DATABASE_URL=postgresql+psycopg://normwatch:secret@db.internal/normwatch\n"
        f"  export NORMWATCH_DATABASE_URL=sqlite:///{demo}"
        "    # the file `normwatch demo` serves, started here"
    )


def _check_migrated(engine: Engine) -> None:
    from sqlalchemy import inspect
    from sqlalchemy.exc import OperationalError

    where = engine.url.render_as_string(hide_password=True)
    try:
        with engine.connect() as conn:
            migrated = inspect(conn).has_table("alembic_version")
    except OperationalError as exc:
        reason = str(exc.orig or exc).strip().splitlines()[0]
        raise DatabaseNotReady(f"cannot reach the database at {where}: {reason}") from None
    if not migrated:
        raise DatabaseNotReady(
            f"the database at {where} has no normwatch tables: run `normwatch db upgrade` first"
        )
