"""Client-side commands: ``normwatch import ...`` and ``normwatch sync``.

These need only the client install (httpx), never the server.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normwatch.client.importers import NoteSink


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the client-side subcommands on the top-level parser."""
    imp = sub.add_parser("import", help="import a training log through the client")
    add_import_formats(imp.add_subparsers(metavar="format"))
    add_sync_command(sub)


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """Where imported metrics go: server, token, project and run name."""
    parser.add_argument(
        "--url",
        default=os.environ.get("NORMWATCH_URL", "http://127.0.0.1:8000"),
        help="server base URL (NORMWATCH_URL)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("NORMWATCH_TOKEN"),
        help="an ingest token (NORMWATCH_TOKEN)",
    )
    parser.add_argument("--project", default=None, help="default: the token's project")
    parser.add_argument("--name", default=None, help="run name (default: the file name)")


def add_import_formats(formats: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``normwatch import <format>`` for each format of `normwatch.client.importers`."""
    _import_parser(formats, "llmc", "an llm.c training log (s:<step> trl:... norm:...)")
    jsonl = _import_parser(formats, "jsonl", "JSON lines: one object with a step and metrics")
    jsonl.add_argument("--step-key", help="the step field (default: step, _step or global_step)")
    wandb = _import_parser(formats, "wandb-csv", "a W&B history or chart export (CSV)")
    wandb.add_argument("--step-key", help="the step column (default: _step or Step)")
    tensorboard = _import_parser(
        formats, "tensorboard", "scalars of TensorBoard event files under a log directory"
    )
    tensorboard.add_argument(
        "--no-run-prefix",
        action="store_true",
        help="do not put each run's sub-directory in front of its tags",
    )


def _import_parser(
    formats: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str
) -> argparse.ArgumentParser:
    parser = formats.add_parser(name, help=help, description=help)
    if name == "tensorboard":
        parser.add_argument("path", metavar="logdir", help="log directory (or one event file)")
    else:
        parser.add_argument("path", metavar="file")
    add_target_arguments(parser)
    parser.add_argument("--prefix", default="", help="put PREFIX/ in front of every metric name")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(handler=_import, format=name)
    return parser


Records = Iterator[tuple[int, dict[str, float]]]


def _open_format(
    args: argparse.Namespace, note: NoteSink
) -> tuple[Records, Callable[[], int], str]:
    """Records of ``args.path``, a count of how many to expect (it reads the whole file),
    and what one is called on the bar. A missing optional library is raised here."""
    path, prefix = Path(args.path), args.prefix
    if args.format == "llmc":
        from normwatch.client.importers import llmc

        return llmc.parse_llmc(path, prefix=prefix), lambda: llmc.count_llmc(path), "steps"
    if args.format == "jsonl":
        from normwatch.client.importers import jsonl

        records = jsonl.parse_jsonl(path, step_key=args.step_key, prefix=prefix, notes=note)
        return records, lambda: jsonl.count_jsonl(path), "lines"
    if args.format == "wandb-csv":
        from normwatch.client.importers import wandb_csv

        records = wandb_csv.parse_wandb_csv(path, step_key=args.step_key, prefix=prefix, notes=note)
        return records, lambda: wandb_csv.count_wandb_csv(path), "rows"
    from normwatch.client.importers import tensorboard

    run_prefix = not args.no_run_prefix
    records = tensorboard.parse_tensorboard(path, run_prefix=run_prefix, prefix=prefix, notes=note)
    return records, lambda: tensorboard.count_tensorboard(path, run_prefix=run_prefix), "events"


def _default_run_name(path: Path) -> str:
    """The file's name without its extension; for TensorBoard, the log directory's name."""
    if path.is_dir():
        return path.resolve().name
    if "tfevents" in path.name:
        return path.resolve().parent.name
    return path.stem


def _import(args: argparse.Namespace) -> int:
    from normwatch.client import Run
    from normwatch.client.importers import (
        ImportAborted,
        ImportFormatError,
        MissingDependencyError,
        ProgressBar,
        import_records,
    )

    if not args.token:
        print("error: pass --token or set NORMWATCH_TOKEN (an ingest token)", file=sys.stderr)
        return 2
    path = Path(args.path)
    if not path.exists():
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
    name = args.name or _default_run_name(path)
    bar = None if args.no_progress else ProgressBar(name)
    note: NoteSink = bar.note if bar else _print_note
    try:
        records, count, unit = _open_format(args, note)
    except MissingDependencyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ImportFormatError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    problem = _server_problem(args.url, args.token)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        total = count()
    except (ImportFormatError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if bar is not None:
        bar.unit = unit
    try:
        with (
            _client_log_to(bar.print if bar else _print_line),
            Run(args.url, token=args.token, project=args.project, name=name) as run,
        ):
            summary = import_records(records, run, total=total, progress=bar)
    except (ImportFormatError, ImportAborted, OSError) as exc:
        if bar is not None:
            bar.abandon()
        print(f"error: {exc}", file=sys.stderr)
        if not isinstance(exc, ImportAborted):
            print(f"the values before it were sent; run {name!r} is marked failed", file=sys.stderr)
        return 1
    if bar is not None:
        bar.close()
    steps = "no steps" if summary.steps == 0 else f"{summary.steps} steps"
    span = "" if summary.first_step is None else f" ({summary.first_step}..{summary.last_step})"
    print(
        f"imported {steps}{span} into run {name!r}: {summary.sent_points:,} values sent, "
        f"{summary.dropped_points:,} dropped, in {summary.seconds:.1f} s"
        + (
            f"; {summary.ignored_points:,} were stored already (the first value of a step is kept)"
            if summary.ignored_points
            else ""
        )
    )
    lost = summary.dropped_points + summary.pending_points
    if lost:
        print(f"warning: {lost:,} values were not stored (see the messages above)", file=sys.stderr)
        return 1
    return 0


def _server_problem(url: str, token: str) -> str | None:
    """Why the server at ``url`` cannot take an import with ``token``; None if it can.

    The client retries an unreachable server and keeps what a refused token logged in its
    spool, so an import would notice either only by waiting; one request up front turns a
    mistyped URL or token into an immediate error.
    """
    import httpx

    try:
        answer = httpx.get(
            f"{url.rstrip('/')}/api/v1/runs",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10.0,
        )
    except httpx.HTTPError as exc:
        return f"cannot reach the server at {url}: {exc}"
    if answer.status_code == 401:
        return f"the server at {url} refused the token (HTTP 401: {answer.text.strip()})"
    if answer.status_code == 404:
        return f"no normwatch API at {url} (HTTP 404 for /api/v1/runs)"
    # 403 is an ingest token's answer to this read: the token is valid.
    return None


def _print_line(line: str) -> None:
    print(line, file=sys.stderr)


def _print_note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


class _LineHandler(logging.Handler):
    """Client warnings as ``warning: ...`` lines, printed above the progress bar."""

    def __init__(self, print_line: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self._print_line = print_line

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._print_line(f"{record.levelname.lower()}: {record.getMessage()}")
        except Exception:
            self.handleError(record)


@contextmanager
def _client_log_to(print_line: Callable[[str], None]) -> Iterator[None]:
    """Route the client's log (a refused batch, a bad token) through ``print_line``."""
    client_logger = logging.getLogger("normwatch.client")
    handler = _LineHandler(print_line)
    propagate = client_logger.propagate
    client_logger.addHandler(handler)
    client_logger.propagate = False
    try:
        yield
    finally:
        client_logger.removeHandler(handler)
        client_logger.propagate = propagate


def add_sync_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``normwatch sync [dir]``: deliver what trainers left in a spool folder."""
    sync = sub.add_parser(
        "sync",
        help="deliver metrics left in a spool folder by trainers that could not send them",
        description="Replay every spooled run under DIR, oldest first, then remove what "
        "was delivered. Exit status 0 when everything was delivered.",
    )
    sync.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        default=None,
        help="spool folder (default: $NORMWATCH_SPOOL_DIR or ./normwatch-spool)",
    )
    sync.add_argument(
        "--url",
        default=os.environ.get("NORMWATCH_URL"),
        help="server base URL (default: NORMWATCH_URL, else the URL each run logged to)",
    )
    sync.add_argument(
        "--token",
        default=os.environ.get("NORMWATCH_TOKEN"),
        help="an ingest token (NORMWATCH_TOKEN)",
    )
    sync.add_argument(
        "--retry-for",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up when the server takes nothing for this long (default 30)",
    )
    sync.set_defaults(handler=_sync)


def _sync(args: argparse.Namespace) -> int:
    from normwatch.client import sync_spool

    if not args.token:
        print("error: pass --token or set NORMWATCH_TOKEN (an ingest token)", file=sys.stderr)
        return 2
    root = Path(args.directory) if args.directory else None
    if root is not None and not root.is_dir():
        print(f"error: no such folder: {root}", file=sys.stderr)
        return 2
    with _client_log_to(_print_line):
        report = sync_spool(
            root, token=args.token, url=args.url, retry_for=args.retry_for, progress=print
        )
    tally = report.tally
    print(
        f"{tally.batches} batches, {tally.points} points replayed; "
        f"{tally.dead_records} dead-lettered"
    )
    if report.busy:
        print(f"{len(report.busy)} spooled runs skipped: a running trainer still writes them")
    if report.unreadable:
        print(f"error: {len(report.unreadable)} spooled runs cannot be read", file=sys.stderr)
        return 1
    if report.failure is not None:
        print(
            f"error: {report.failure}; what was not delivered stays in the spool", file=sys.stderr
        )
        return 1
    if tally.dead_records:
        print(
            f"error: the server refused {tally.dead_records} records for good; they are in "
            "deadletter.jsonl next to each run's spool",
            file=sys.stderr,
        )
        return 1
    return 0
