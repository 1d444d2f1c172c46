"""``normwatch db ...``: migrations, compaction and retention on the configured database.

Like every server-side command, they import the server only when run."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from normwatch.cli_settings import settings_and_engine

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from normwatch.server.config import Settings
    from normwatch.server.storage.policy import Policy


def add_db_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser("db", help="schema management")
    db_sub = db.add_subparsers(metavar="action")
    upgrade = db_sub.add_parser("upgrade", help="apply migrations up to the newest")
    upgrade.add_argument("revision", nargs="?", default="head")
    upgrade.set_defaults(handler=_db_upgrade)
    downgrade = db_sub.add_parser("downgrade", help="revert migrations to a revision")
    downgrade.add_argument("revision")
    downgrade.set_defaults(handler=_db_downgrade)
    distribute = db_sub.add_parser(
        "distribute",
        help="on a Citus coordinator: shard the series tables by run (upgrade does it too)",
    )
    distribute.add_argument(
        "--undo", action="store_true", help="turn every table back into a plain one"
    )
    distribute.set_defaults(handler=_db_distribute)
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


def _db_upgrade(args: argparse.Namespace) -> int:
    from normwatch.server.migrate import upgrade
    from normwatch.server.storage import citus

    settings, engine = settings_and_engine("configured")
    try:
        upgrade(engine, args.revision)
        with engine.connect() as conn:
            kinds = list(citus.placed(conn).values())
    except citus.NotACluster as exc:
        print(f"normwatch: cannot place the tables on this Citus cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(f"database at {engine.url.render_as_string(hide_password=True)} is at {args.revision}")
    if kinds:
        print(
            f"on Citus: {kinds.count('by run')} tables sharded by run, "
            f"{kinds.count('everywhere')} on every node, "
            f"{kinds.count('coordinator')} on the coordinator"
        )
    return 0


def _db_downgrade(args: argparse.Namespace) -> int:
    from normwatch.server.migrate import downgrade

    _, engine = settings_and_engine()
    downgrade(engine, args.revision)
    print(f"database downgraded to {args.revision}")
    return 0


def _db_distribute(args: argparse.Namespace) -> int:
    from normwatch.server.storage import citus

    _, engine = settings_and_engine()
    where = engine.url.render_as_string(hide_password=True)
    try:
        with engine.begin() as conn:
            if not citus.has_citus(conn):
                print(
                    f"normwatch: {where} is not a Citus coordinator "
                    "(no citus extension in the database)",
                    file=sys.stderr,
                )
                return 1
            done = citus.undistribute(conn) if args.undo else citus.distribute(conn)
            kinds = citus.placed(conn)
    except citus.NotACluster as exc:
        print(f"normwatch: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    if args.undo:
        print(f"{len(done.undone)} tables are plain tables again" if done else "nothing to undo")
        return 0
    if done:
        print(
            f"sharded by run: {', '.join(done.by_run) or '-'}; on every node: "
            f"{', '.join(done.reference) or '-'}; on the coordinator: "
            f"{', '.join(done.coordinator) or '-'}"
        )
    else:
        print(f"every table is placed already ({len(kinds)} tables)")
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

    # Started by `serve` (--parent): the database is the one it serves, whatever it is.
    settings, engine = settings_and_engine("any" if args.parent is not None else "migrated")
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

    from normwatch.server.db import session_factory
    from normwatch.server.models import utcnow
    from normwatch.server.storage import retention

    if args.days <= 0:
        print("normwatch: --days must be positive", file=sys.stderr)
        return 2
    settings, engine = settings_and_engine()
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
