"""The ``normwatch`` command line: serve, demo, db, token, import.

Server-side commands import the server lazily, so the client-only install still has a
working ``normwatch`` command (for ``import``).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from normwatch.server.auth import TokenInfo
    from normwatch.server.config import Settings
    from normwatch.server.storage.policy import Policy


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
        "prometheus_client",
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
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes sharing the port (NORMWATCH_WORKERS, default 1)",
    )
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
    compact = db_sub.add_parser(
        "compact", help="compact every hot point into chunks now (the server does it in time)"
    )
    compact.add_argument(
        "--follow",
        action="store_true",
        help="keep compacting as the policy says until stopped (what `serve` runs beside "
        "its workers), applying retention too when NORMWATCH_RETENTION_DAYS is set",
    )
    compact.add_argument("--parent", type=int, default=None, help=argparse.SUPPRESS)
    compact.set_defaults(handler=_db_compact)
    retain = db_sub.add_parser(
        "retention", help="apply retention now to runs quiet for a number of days"
    )
    retain.add_argument("--days", type=float, required=True, help="runs quiet this long")
    retain.add_argument(
        "--mode",
        choices=("summaries", "drop"),
        default="summaries",
        help="keep only the summaries of their points (default), or delete them whole",
    )
    retain.add_argument("--dry-run", action="store_true", help="list the runs, change nothing")
    retain.set_defaults(handler=_db_retention)

    add_token_commands(sub)

    from normwatch import cli_client

    cli_client.add_commands(sub)
    return parser


def add_token_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = sub.add_parser(
        "token",
        help="API tokens: create, list, revoke, rotate",
        description="API tokens. Each belongs to one project and has a scope: ingest (write "
        "runs, metrics, events), read, or admin (everything, plus rules and tokens). A secret "
        "is printed once, by the command that creates it; only its SHA-256 is stored.",
    )
    token_sub = token.add_subparsers(metavar="action")
    create = token_sub.add_parser(
        "create",
        help="create a token and print it once",
        description="Create a token and print its secret once, on stdout (details on stderr; "
        "for a read or admin token also a dashboard login link, whose #fragment never reaches "
        "the server or its logs).",
    )
    create.add_argument("--project", required=True, help="project the token belongs to")
    create.add_argument(
        "--scope", choices=("ingest", "read", "admin"), default="ingest", help="what it may do"
    )
    create.add_argument("--name", default="", help="a label to recognise it by")
    create.add_argument(
        "--expires-in",
        type=_lifetime,
        metavar="DURATION",
        help="stop working after this long: 90m, 12h, 30d, 2w (default: never)",
    )
    create.set_defaults(handler=_token_create)

    listing = token_sub.add_parser(
        "list",
        help="list tokens (never their secrets)",
        description="Id, project, scope, name, the secret's first characters, when it was "
        "created and last used, when it expires, and its state (active, expired, revoked).",
    )
    listing.add_argument("--project", help="only this project's tokens")
    listing.add_argument(
        "--all", action="store_true", help="expired and revoked tokens too (default: active)"
    )
    listing.set_defaults(handler=_token_list)

    revoke = token_sub.add_parser(
        "revoke",
        help="revoke tokens by id",
        description="Revoke tokens (again: no change). Every server worker refuses them "
        "within NORMWATCH_TOKEN_CACHE_S (5 s); their dashboard sessions end as soon. Exits 1 "
        "if an id is unknown (the others are revoked all the same).",
    )
    revoke.add_argument("ids", nargs="+", type=int, metavar="ID", help="ids from `token list`")
    revoke.set_defaults(handler=_token_revoke)

    rotate = token_sub.add_parser(
        "rotate",
        help="replace a token by a new one of the same project, scope and name",
        description="Create the successor of a token and print its secret once, like "
        "`create`. The old token is revoked at once, or with --grace keeps working that long "
        "so trainers can be redeployed with the new one.",
    )
    rotate.add_argument("id", type=int, metavar="ID", help="the token to replace")
    rotate.add_argument(
        "--expires-in",
        type=_lifetime,
        metavar="DURATION",
        help="the new token's lifetime (default: the old token's, or never)",
    )
    rotate.add_argument(
        "--grace",
        type=_grace,
        default=timedelta(0),
        metavar="DURATION",
        help="how long the old token keeps working, at most 30d (default: 0, revoked now)",
    )
    rotate.set_defaults(handler=_token_rotate)


_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_MAX_LIFETIME = timedelta(days=3660)
_MAX_GRACE = timedelta(days=30)


def _duration(text: str, longest: timedelta) -> timedelta:
    match = re.fullmatch(r"(\d{1,9})([smhdw])", text.strip())
    if match is None and text.strip() != "0":
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a number and a unit, like 90m, 12h, 30d or 2w"
        )
    length = timedelta(0) if match is None else timedelta(seconds=int(match[1]) * _UNIT_S[match[2]])
    if length > longest:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {longest.days} days")
    return length


def _lifetime(text: str) -> timedelta:
    length = _duration(text, _MAX_LIFETIME)
    if length <= timedelta(0):
        raise argparse.ArgumentTypeError("a token's lifetime must be longer than 0")
    return length


def _grace(text: str) -> timedelta:
    return _duration(text, _MAX_GRACE)


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


def _policy(settings: Settings) -> Policy:
    from normwatch.server.storage.policy import Policy

    return Policy(
        chunk_points=settings.compaction_chunk_points,
        precision=settings.compaction_precision,
        max_age_s=settings.compaction_max_age_s,
        idle_s=settings.compaction_idle_s,
    )


def _db_compact(args: argparse.Namespace) -> int:
    from normwatch.server.db import session_factory
    from normwatch.server.storage.schedule import compact_everything

    settings, engine = _settings_and_engine()
    if args.follow:
        return _compact_following(settings, engine, args.parent)
    try:
        t0 = time.perf_counter()
        report = compact_everything(session_factory(engine), _policy(settings))
    finally:
        engine.dispose()
    took = time.perf_counter() - t0
    print(
        f"compacted {report.points:,} points of {report.series:,} series in {report.runs:,} runs "
        f"({report.chunks_written:,} chunks written) in {took:.1f} s"
    )
    return 0


def _compact_following(settings: Settings, engine: Engine, parent: int | None) -> int:
    """Run the background compactor in this process until SIGTERM or SIGINT, or until the
    process ``parent`` (the ``serve`` that started it) is gone."""
    import signal
    import threading

    from normwatch.server import memory
    from normwatch.server.db import session_factory
    from normwatch.server.workers.compactor import Compactor

    memory.limit_arenas()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if parent is not None and os.getppid() != parent:
        return 0  # serve died while this process started
    compactor = Compactor.from_settings(session_factory(engine), settings)
    compactor.start()
    try:
        # A compactor started by `serve` ends with it, even when it was SIGKILLed.
        while not stop.wait(1.0):
            if parent is not None and os.getppid() != parent:
                break
    finally:
        compactor.stop()
        engine.dispose()
    return 0


def _db_retention(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from normwatch.server.db import session_factory
    from normwatch.server.models import utcnow
    from normwatch.server.storage import retention

    if args.days <= 0:
        print("normwatch: --days must be positive", file=sys.stderr)
        return 2
    settings, engine = _settings_and_engine()
    sessions = session_factory(engine)
    try:
        if args.dry_run:
            with sessions() as session:
                keys = retention.old_runs(session, utcnow() - timedelta(days=args.days), args.mode)
            print(f"{len(keys)} run(s) would be affected ({args.mode})")
            return 0
        swept = retention.sweep(sessions, args.days, args.mode, _policy(settings))
    finally:
        engine.dispose()
    what = "thinned to summaries" if args.mode == "summaries" else "dropped"
    print(f"{swept.runs} run(s) quiet for {args.days:g}+ days {what}")
    return 0


def _token_create(args: argparse.Namespace) -> int:
    from normwatch.server.auth import create_token, get_token
    from normwatch.server.db import session_factory
    from normwatch.server.models import utcnow

    settings, engine = _settings_and_engine()
    expires_at = None if args.expires_in is None else utcnow() + args.expires_in
    try:
        with session_factory(engine)() as session, session.begin():
            secret, row = create_token(
                session, args.project, args.scope, args.name, expires_at=expires_at
            )
            info = get_token(session, row.id)
    finally:
        engine.dispose()
    assert info is not None
    _print_secret(secret, info, settings.base_url)
    return 0


def _print_secret(secret: str, info: TokenInfo, base_url: str) -> None:
    """The secret alone on stdout (for ``$(...)``); what it is, and a login link, on stderr."""
    print(secret)
    print(
        f"{info.scope} token for project {info.project!r} (id {info.id}); "
        "it is shown only once, store it now.",
        file=sys.stderr,
    )
    if info.expires_at is not None:
        print(f"it expires at {_when(info.expires_at)}", file=sys.stderr)
    if info.scope in ("read", "admin"):
        # A fragment is never sent to the server, so the secret stays out of every log.
        print(f"dashboard login: {base_url}/login#token={secret}", file=sys.stderr)


def _when(moment: datetime | None, missing: str = "-") -> str:
    return missing if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _token_list(args: argparse.Namespace) -> int:
    from normwatch.server.auth import list_tokens
    from normwatch.server.db import session_factory

    _, engine = _settings_and_engine()
    try:
        with session_factory(engine)() as session:
            infos = list_tokens(session, args.project, active_only=not args.all)
    finally:
        engine.dispose()
    if not infos:
        which = "tokens" if args.all else "active tokens (--all lists expired and revoked ones)"
        where = f" in project {args.project!r}" if args.project else ""
        print(f"no {which}{where}", file=sys.stderr)
        return 0
    header = ("id", "project", "scope", "name", "prefix", "created", "last used", "expires")
    rows = [header + ("state",)]
    for info in infos:
        rows.append(
            (
                str(info.id),
                info.project,
                info.scope,
                info.name,
                info.prefix,
                _when(info.created_at),
                _when(info.last_used_at, "never"),
                _when(info.expires_at, "never"),
                info.state,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) + 1)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from normwatch.server.auth import revoke_token
    from normwatch.server.db import session_factory

    _, engine = _settings_and_engine()
    unknown: list[int] = []
    try:
        with session_factory(engine)() as session, session.begin():
            for token_id in dict.fromkeys(args.ids):
                info = revoke_token(session, token_id) if _is_token_id(token_id) else None
                if info is None:
                    unknown.append(token_id)
                    continue
                print(
                    f"token {info.id} ({info.scope}, project {info.project!r}, "
                    f"{info.name!r}) revoked at {_when(info.revoked_at)}"
                )
    finally:
        engine.dispose()
    for token_id in unknown:
        print(f"error: no token with id {token_id} (see `normwatch token list`)", file=sys.stderr)
    return 1 if unknown else 0


def _is_token_id(token_id: int) -> bool:
    return 1 <= token_id <= 2**31 - 1  # ids are 32-bit: anything else names no token


def _token_rotate(args: argparse.Namespace) -> int:
    from normwatch.server.auth import TokenRevoked, rotate_token
    from normwatch.server.db import session_factory
    from normwatch.server.models import utcnow

    settings, engine = _settings_and_engine()
    expires_at = None if args.expires_in is None else utcnow() + args.expires_in
    try:
        with session_factory(engine)() as session, session.begin():
            rotated = (
                rotate_token(session, args.id, expires_at=expires_at, grace=args.grace)
                if _is_token_id(args.id)
                else None
            )
    except TokenRevoked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    if rotated is None:
        print(f"error: no token with id {args.id} (see `normwatch token list`)", file=sys.stderr)
        return 1
    secret, new, old = rotated
    _print_secret(secret, new, settings.base_url)
    if old.revoked_at is not None:
        print(f"token {old.id} is revoked", file=sys.stderr)
    else:
        print(f"token {old.id} keeps working until {_when(old.expires_at)}", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from normwatch.server.migrate import upgrade

    settings, engine = _settings_and_engine()
    if args.host:
        settings.host = args.host
    if args.port:
        settings.port = args.port
    workers = args.workers if args.workers is not None else settings.workers
    if workers < 1:
        print(f"error: --workers must be 1 or more, got {workers}", file=sys.stderr)
        return 2
    if not args.no_migrate:
        upgrade(engine)
    engine.dispose()
    os.environ["NORMWATCH_HOST"] = settings.host
    os.environ["NORMWATCH_PORT"] = str(settings.port)
    metrics_dir, made_here = _prometheus_dir(workers)
    compactor = _CompactorProcess() if settings.compaction else None
    if compactor is not None:
        compactor.start()
        os.environ["NORMWATCH_COMPACTION"] = "false"  # the workers leave it to that process
    print(f"normwatch serving on {settings.base_url}  (API docs: {settings.base_url}/docs)")
    try:
        # An import string and a factory: each worker process builds its own app.
        uvicorn.run(
            "normwatch.server.app:serve_app",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=workers,
            log_level=args.log_level,
            log_config=_uvicorn_log_config(),
            timeout_graceful_shutdown=10,
        )
    finally:
        if compactor is not None:
            compactor.stop()
        if made_here and metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


class RedactTokenQuery(logging.Filter):
    """Writes ``token=***`` for the value of every ``token`` query parameter in a log line.

    ``GET /login?token=<secret>`` still logs in (bookmarks of the old login links); the
    access log at level info must not keep the secret.
    """

    _value = re.compile(r"(?<=[?&]token=)[^&#\s\"]+", re.IGNORECASE)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self._value.sub("***", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                self._value.sub("***", arg) if isinstance(arg, str) else arg for arg in record.args
            )
        return True


def _uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging setup plus `RedactTokenQuery` on its access log (each worker
    process applies it when it starts)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_token_query"] = {
        "()": "normwatch.cli.RedactTokenQuery"
    }
    config["loggers"]["uvicorn.access"]["filters"] = ["redact_token_query"]
    return config


class _CompactorProcess:
    """``normwatch db compact --follow`` beside the server's workers, restarted if it dies.

    A process of its own, at a lower CPU priority (nice 10), keeps compaction's work off the
    workers' interpreter lock and behind their requests: reads and ingest stay fast while it
    works through a backlog. It gets SIGTERM when ``serve`` ends, and exits by itself when
    ``serve`` was killed.
    """

    def __init__(self, restart_after_s: float = 2.0) -> None:
        import threading

        self._restart_after_s = restart_after_s
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._watch = threading.Thread(target=self._supervise, name="compactor-watch", daemon=True)

    def start(self) -> None:
        self._proc = self._spawn()
        self._watch.start()

    def _spawn(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "normwatch", "db", "compact", "--follow"]
            + ["--parent", str(os.getpid())],
            env=dict(os.environ),
        )
        try:
            os.setpriority(os.PRIO_PROCESS, proc.pid, 10)
        except OSError:  # not permitted here: it runs at the server's priority
            pass
        return proc

    def _supervise(self) -> None:
        while not self._stop.is_set():
            proc = self._proc
            if proc is None or proc.poll() is None:
                self._stop.wait(1.0)
                continue
            print(
                f"normwatch: the compactor exited with {proc.returncode}; restarting it",
                file=sys.stderr,
            )
            if self._stop.wait(self._restart_after_s):
                return
            self._proc = self._spawn()

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _prometheus_dir(workers: int) -> tuple[str | None, bool]:
    """Set up the folder where worker processes share their Prometheus values.

    Several workers need one (``PROMETHEUS_MULTIPROC_DIR``; a fresh temporary folder unless
    it is set); a single worker keeps its values in memory unless one is set. Returns the
    folder and whether it was made here (and is removed on exit).
    """
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if workers == 1 and not given:
        return None, False
    path = given or tempfile.mkdtemp(prefix="normwatch-prometheus-")
    # Exported before anything here imports prometheus_client, which reads it once.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    from normwatch.server.telemetry import prepare_multiprocess_dir

    prepare_multiprocess_dir(path)
    return path, not given


def _demo(args: argparse.Namespace) -> int:
    from normwatch.demo import run_demo

    return run_demo(db_path=args.db, port=args.port, steps_per_second=args.steps_per_second)
