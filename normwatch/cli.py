"""The ``normwatch`` command line: serve, demo, db, token, import.

Server-side commands import the server lazily, so the client-only install still has a
working ``normwatch`` command (for ``import``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from normwatch.server.config import Settings


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    try:
        result: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in _SERVER_MODULES:
            raise
        print(
            f"error: this command needs the server (missing module {exc.name!r}); "
            "install it with: pip install 'normwatch[dashboard]'",
            file=sys.stderr,
        )
        return 2
    return result


# Modules of the [server] and [dashboard] extras; the client-only install lacks them.
_SERVER_MODULES = frozenset(
    {
        "fastapi",
        "uvicorn",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "pydantic",
        "pydantic_settings",
        "orjson",
        "numpy",
        "itsdangerous",
        "dash",
        "plotly",
        "starlette",
        "anyio",
    }
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normwatch", description="Live instability monitoring for training runs."
    )
    sub = parser.add_subparsers(metavar="command")

    serve = sub.add_parser("serve", help="run the API and dashboard")
    serve.add_argument("--host", help="bind address (NORMWATCH_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (NORMWATCH_PORT, default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve.add_argument(
        "--no-migrate", action="store_true", help="do not upgrade the schema on start"
    )
    serve.add_argument(
        "--log-level",
        default=os.environ.get("NORMWATCH_LOG_LEVEL", "warning"),
        choices=("critical", "error", "warning", "info", "debug"),
        help="server log level; 'info' adds one line per request (NORMWATCH_LOG_LEVEL)",
    )
    serve.set_defaults(handler=_serve)

    demo = sub.add_parser("demo", help="serve on an SQLite file with a simulated live run")
    demo.add_argument("--db", default="normwatch-demo.db", help="SQLite file (recreated)")
    demo.add_argument("--port", type=int, default=None)
    demo.add_argument("--steps-per-second", type=float, default=100.0, help="live streaming speed")
    demo.set_defaults(handler=_demo)

    db = sub.add_parser("db", help="schema management")
    db_sub = db.add_subparsers(metavar="action")
    upgrade = db_sub.add_parser("upgrade", help="apply migrations up to the newest")
    upgrade.add_argument("revision", nargs="?", default="head")
    upgrade.set_defaults(handler=_db_upgrade)
    downgrade = db_sub.add_parser("downgrade", help="revert migrations to a revision")
    downgrade.add_argument("revision")
    downgrade.set_defaults(handler=_db_downgrade)

    token = sub.add_parser("token", help="API tokens")
    token_sub = token.add_subparsers(metavar="action")
    create = token_sub.add_parser("create", help="create a token and print it once")
    create.add_argument("--project", required=True, help="project the token belongs to")
    create.add_argument(
        "--scope", choices=("ingest", "read", "admin"), default="ingest", help="what it may do"
    )
    create.add_argument("--name", default="", help="a label to recognise it by")
    create.set_defaults(handler=_token_create)

    from normwatch import cli_client

    cli_client.add_commands(sub)
    return parser


def _settings_and_engine() -> tuple[Settings, Engine]:
    from normwatch.server.config import Settings
    from normwatch.server.db import engine_from_settings

    settings = Settings()
    return settings, engine_from_settings(settings)


def _db_upgrade(args: argparse.Namespace) -> int:
    from normwatch.server.migrate import upgrade

    settings, engine = _settings_and_engine()
    upgrade(engine, args.revision)
    print(f"database at {engine.url.render_as_string(hide_password=True)} is at {args.revision}")
    return 0


def _db_downgrade(args: argparse.Namespace) -> int:
    from normwatch.server.migrate import downgrade

    _, engine = _settings_and_engine()
    downgrade(engine, args.revision)
    print(f"database downgraded to {args.revision}")
    return 0


def _token_create(args: argparse.Namespace) -> int:
    from normwatch.server.auth import create_token
    from normwatch.server.db import session_factory

    settings, engine = _settings_and_engine()
    with session_factory(engine)() as session, session.begin():
        secret, row = create_token(session, args.project, args.scope, args.name)
    engine.dispose()
    print(secret)
    print(
        f"{args.scope} token for project {args.project!r} (id {row.id}); "
        "it is shown only once, store it now.",
        file=sys.stderr,
    )
    if args.scope in ("read", "admin"):
        print(f"dashboard login: {settings.base_url}/login?token={secret}", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from normwatch.server.migrate import upgrade

    settings, engine = _settings_and_engine()
    if args.host:
        settings.host = args.host
    if args.port:
        settings.port = args.port
    if not args.no_migrate:
        upgrade(engine)
    engine.dispose()
    os.environ["NORMWATCH_HOST"] = settings.host
    os.environ["NORMWATCH_PORT"] = str(settings.port)
    print(f"normwatch serving on {settings.base_url}  (API docs: {settings.base_url}/docs)")
    uvicorn.run(
        "normwatch.server.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=args.workers,
        log_level=args.log_level,
        timeout_graceful_shutdown=10,
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
    from normwatch.demo import run_demo

    return run_demo(db_path=args.db, port=args.port, steps_per_second=args.steps_per_second)
