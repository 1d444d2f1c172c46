"""Client-side commands: ``normwatch import ...`` (and later ``sync``).

These need only the client install (httpx), never the server.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the client-side subcommands on the top-level parser."""
    imp = sub.add_parser("import", help="import a training log through the client")
    imp_sub = imp.add_subparsers(metavar="format")
    llmc = imp_sub.add_parser("llmc", help="an llm.c training log (s:<step> trl:... norm:...)")
    llmc.add_argument("path")
    add_target_arguments(llmc)
    llmc.set_defaults(handler=_import_llmc)


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


def _import_llmc(args: argparse.Namespace) -> int:
    from normwatch.client import Run
    from normwatch.client.llmc import import_llmc

    if not args.token:
        print("error: pass --token or set NORMWATCH_TOKEN (an ingest token)", file=sys.stderr)
        return 2
    path = Path(args.path)
    if not path.is_file():
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
    name = args.name or path.stem
    with Run(args.url, token=args.token, project=args.project, name=name) as run:
        steps = import_llmc(path, run)
    print(f"imported {steps} steps into run {name!r}")
    return 0
