"""``normwatch token ...``: create, list, revoke and rotate API tokens.

Like every server-side command, they import the server only when run."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normwatch.server.auth import TokenInfo

from normwatch.cli_settings import settings_and_engine


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


def _token_create(args: argparse.Namespace) -> int:
    from normwatch.server.auth import create_token, get_token
    from normwatch.server.db import session_factory
    from normwatch.server.models import utcnow

    settings, engine = settings_and_engine()
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

    _, engine = settings_and_engine()
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

    _, engine = settings_and_engine()
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
    from normwatch.server.auth import rotate_token
    from normwatch.server.db import session_factory
    from normwatch.server.errors import TokenRevoked
    from normwatch.server.models import utcnow

    settings, engine = settings_and_engine()
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
