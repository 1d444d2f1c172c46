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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from normwatch.cli_aliases import add_alias_commands
from normwatch.cli_db import add_db_commands
from normwatch.cli_settings import DatabaseNotReady, settings_and_engine
from normwatch.cli_tokens import add_token_commands

if TYPE_CHECKING:
    pass


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
    except DatabaseNotReady as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
        "fastapi_offline",
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
    demo.add_argument(
        "--db", default="normwatch-demo.db", help="SQLite file (made afresh unless --keep)"
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the last demo's database (runs, rules, alerts, tokens) and go on with its "
        "simulated run from where it stopped",
    )
    demo.add_argument(
        "--allow-webhook",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="let alert webhooks target this private or loopback host, e.g. 127.0.0.1:9000 "
        "(repeat; added to NORMWATCH_WEBHOOK_ALLOW)",
    )
    demo.add_argument("--port", type=int, default=None)
    demo.add_argument("--steps-per-second", type=float, default=100.0, help="live streaming speed")
    demo.set_defaults(handler=_demo)

    add_db_commands(sub)

    add_token_commands(sub)
    add_alias_commands(sub)

    from normwatch import cli_client

    cli_client.add_commands(sub)
    return parser


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from normwatch.server.migrate import schema_behind, upgrade

    settings, engine = settings_and_engine("any")
    if args.host:
        settings.host = args.host
    if args.port:
        settings.port = args.port
    workers = args.workers if args.workers is not None else settings.workers
    if workers < 1:
        print(f"error: --workers must be 1 or more, got {workers}", file=sys.stderr)
        return 2
    behind = schema_behind(engine) if args.no_migrate else None
    if not args.no_migrate:
        upgrade(engine)
    engine.dispose()
    if behind is not None:
        where = engine.url.render_as_string(hide_password=True)
        print(
            f"error: cannot serve {where} with --no-migrate: {behind}. Run `normwatch db "
            "upgrade` first, or start without --no-migrate.",
            file=sys.stderr,
        )
        return 2
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
            # A signal to the whole process group (Ctrl-C, `timeout`, a service manager's
            # stop) ends the compactor a moment before serve: wait first, so that a serve
            # that is stopping neither restarts it nor says it will.
            if self._stop.wait(self._restart_after_s):
                return
            print(
                f"normwatch: the compactor exited with {proc.returncode}; restarted it",
                file=sys.stderr,
            )
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
    from normwatch.server.alerts.targets import parse_allow

    for entry in args.allow_webhook:
        try:
            parse_allow(entry)
        except ValueError as exc:
            reason = str(exc).removeprefix("NORMWATCH_WEBHOOK_ALLOW: ")
            print(f"error: --allow-webhook: {reason}", file=sys.stderr)
            return 2
    return run_demo(
        db_path=args.db,
        port=args.port,
        steps_per_second=args.steps_per_second,
        keep=args.keep,
        webhook_allow=args.allow_webhook,
    )
