"""``normwatch aliases ...``: the presets, and a project's metric-name aliases.

Like every server-side command, they import the server only when run."""

from __future__ import annotations

import argparse
import sys

from normwatch.cli_settings import settings_and_engine


def add_alias_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    aliases = sub.add_parser(
        "aliases",
        help="metric-name aliases: presets, show, set",
        description="A project's aliases let rules, charts and series reads use canonical "
        "names (grad/norm/total) for runs that logged other names (optim/total grad norm). "
        "Stored names are never renamed. See docs/aliases.md.",
    )
    alias_sub = aliases.add_subparsers(metavar="action")
    presets = alias_sub.add_parser(
        "presets", help="list the presets", description="Each preset's pairs and source."
    )
    presets.set_defaults(handler=_presets)
    show = alias_sub.add_parser(
        "show", help="a project's aliases", description="Every alias in effect, with its origin."
    )
    show.add_argument("--project", required=True)
    show.set_defaults(handler=_show)
    put = alias_sub.add_parser(
        "set",
        help="replace a project's aliases",
        description="Replace the project's presets and pairs whole (no --preset and no "
        "--alias: clear them). Exits 1 for an unknown project or aliases that cannot resolve.",
    )
    put.add_argument("--project", required=True)
    put.add_argument(
        "--preset", action="append", default=[], help="a preset name (repeat, in order)"
    )
    put.add_argument(
        "--alias",
        action="append",
        default=[],
        type=_pair,
        metavar="ALIAS=CANONICAL",
        help="a custom pair, e.g. 'my/gnorm=grad/norm/total' (repeat)",
    )
    put.set_defaults(handler=_set)


def _pair(text: str) -> tuple[str, str]:
    alias, sep, canonical = text.rpartition("=")
    if not sep or not alias or not canonical:
        raise argparse.ArgumentTypeError(f"{text!r} is not ALIAS=CANONICAL")
    return alias, canonical


def _presets(args: argparse.Namespace) -> int:
    from normwatch.server.aliases import PRESETS

    for preset in PRESETS.values():
        print(f"{preset.name}  ({preset.title})")
        for alias, canonical in preset.pairs:
            print(f"  {alias}  ->  {canonical}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from normwatch.server.db import session_factory
    from normwatch.server.services.aliases import project_aliases
    from normwatch.server.storage.tokens import project_named

    _, engine = settings_and_engine()
    try:
        with session_factory(engine)() as session:
            project = project_named(session, args.project)
            if project is None:
                print(f"error: no project named {args.project!r}", file=sys.stderr)
                return 1
            pairs = project_aliases(session, project.id).pairs()
    finally:
        engine.dispose()
    if not pairs:
        print(f"project {args.project!r} has no aliases", file=sys.stderr)
    for alias, canonical, origin in pairs:
        print(f"{alias}  ->  {canonical}  ({origin})")
    return 0


def _set(args: argparse.Namespace) -> int:
    from normwatch.server.aliases import AliasError, build
    from normwatch.server.db import session_factory
    from normwatch.server.storage.aliases import save_aliases
    from normwatch.server.storage.tokens import project_named

    pairs = dict(args.alias)
    try:
        aliases = build(args.preset, pairs)
    except AliasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _, engine = settings_and_engine()
    try:
        with session_factory(engine)() as session, session.begin():
            project = project_named(session, args.project)
            if project is None:
                print(f"error: no project named {args.project!r}", file=sys.stderr)
                return 1
            row = save_aliases(session, project.id, args.preset, pairs, updated_by="cli")
            revision = row.revision
    finally:
        engine.dispose()
    print(f"project {args.project!r}: {len(aliases.canonical_of)} aliases (revision {revision})")
    return 0
