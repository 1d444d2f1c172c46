"""Bearer tokens: generated once, stored as SHA-256, scoped to one project.

Scopes: ``ingest`` writes runs, metrics and events; ``read`` reads; ``admin`` does
everything, plus rules and tokens. Tokens carry 256 bits of randomness, so a plain
SHA-256 (not a slow password hash) is the right digest: nothing to brute-force.

A token is active until it is revoked or its ``expires_at`` passes; rotation creates its
successor and either revokes it at once or lets it expire after a grace period.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, cast

from sqlalchemy.orm import Session

from .errors import TokenRevoked
from .models import ApiToken, Project, utcnow
from .storage.tokens import (
    active_token,
    add_token,
    instance_secret,
    project_named,
    token_row,
    token_rows,
    touch_token,
    update_token,
)

Scope = Literal["ingest", "read", "admin"]
SCOPES: tuple[Scope, ...] = ("ingest", "read", "admin")
TokenState = Literal["active", "expired", "revoked"]
TOKEN_PREFIX = "nw_"

__all__ = [
    "SCOPES",
    "Principal",
    "Scope",
    "TokenCache",
    "TokenInfo",
    "as_utc",
    "authenticate",
    "create_token",
    "get_or_create_project",
    "get_token",
    "hash_token",
    "instance_secret",
    "list_tokens",
    "principal_for_token_id",
    "revoke_token",
    "rotate_token",
]
# last_used_at is written at most this often per token, to keep reads write-free.
_TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token of one project with one scope."""

    token_id: int
    project_id: int
    project: str
    scope: Scope
    expires_at: datetime | None = None

    def can(self, needed: Scope) -> bool:
        return self.scope == "admin" or self.scope == needed

    def trusted_for(self, ttl_s: float, now: datetime) -> float:
        """Seconds a check made at ``now`` may be reused: ``ttl_s``, cut short by expiry."""
        if self.expires_at is None:
            return ttl_s
        return max(0.0, min(ttl_s, (self.expires_at - now).total_seconds()))


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def get_or_create_project(session: Session, name: str) -> Project:
    project = project_named(session, name, create=True)
    assert project is not None
    return project


def create_token(
    session: Session,
    project: str,
    scope: Scope,
    name: str = "",
    *,
    expires_at: datetime | None = None,
) -> tuple[str, ApiToken]:
    """Create a token; the secret is returned once and never stored.

    ``expires_at`` (None: never) is kept in UTC; a naive time is taken as UTC.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    proj = get_or_create_project(session, project)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        project_id=proj.id,
        name=name or f"{scope} token",
        scope=scope,
        token_hash=hash_token(secret),
        prefix=secret[:10],
        expires_at=as_utc(expires_at),
    )
    return secret, add_token(session, row)


def as_utc(moment: datetime | None) -> datetime | None:
    """``moment`` in UTC; a naive one is taken as UTC (SQLite keeps no offset: every
    stored time must already be UTC to compare right)."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def authenticate(session: Session, token: str, now: datetime | None = None) -> Principal | None:
    """The principal for a presented token, or None if unknown, revoked or expired."""
    now = now or utcnow()
    row = active_token(session, now, digest=hash_token(token))
    if row is None:
        return None
    tok, project_name = row
    last = tok.last_used_at
    if (
        last is None
        or (now - (last if last.tzinfo else last.replace(tzinfo=now.tzinfo))) > _TOUCH_EVERY
    ):
        touch_token(session, tok.id, now)
    return _principal(tok, project_name)


def _principal(tok: ApiToken, project_name: str) -> Principal:
    return Principal(tok.id, tok.project_id, project_name, cast(Scope, tok.scope), tok.expires_at)


class TokenCache:
    """Principals of recently presented bearer tokens, trusted for ``ttl_s`` seconds.

    Authentication is otherwise a transaction of its own on every request: for a trainer
    posting a small batch several times a second, as much database work as storing it.
    Only tokens that authenticated are kept (a new token works at once); a revoked one
    stops working within ``ttl_s``, the same window the dashboard gives session cookies,
    and an expiring one is trusted no longer than its expiry (``wall`` tells the time it
    is compared with). Entries are keyed by the token's digest, never the token itself.
    """

    def __init__(
        self,
        ttl_s: float = 5.0,
        *,
        limit: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = utcnow,
    ) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._recent: dict[str, tuple[Principal, float]] = {}

    def cached(self, token: str) -> Principal | None:
        """The token's principal if the cache still trusts it; None says "ask `lookup`"
        (it never touches the database, so an event loop may call it)."""
        digest = hash_token(token)
        with self._lock:
            hit = self._recent.get(digest)
        return hit[0] if hit is not None and hit[1] > self._clock() else None

    def lookup(self, session_for: Callable[[], Session], token: str) -> Principal | None:
        """The token's principal, from the cache or else from ``authenticate``."""
        digest = hash_token(token)
        now = self._clock()
        with self._lock:
            hit = self._recent.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        wall = self._wall()
        with session_for() as session, session.begin():
            who = authenticate(session, token, wall)
        with self._lock:
            if who is None:
                self._recent.pop(digest, None)
            else:
                if len(self._recent) >= self.limit:
                    self._recent.clear()
                self._recent[digest] = (who, now + who.trusted_for(self.ttl_s, wall))
        return who


def principal_for_token_id(
    session: Session, token_id: int, now: datetime | None = None
) -> Principal | None:
    """Re-check a token named by a session cookie: revoking it, or its expiry, ends the
    session."""
    row = active_token(session, now or utcnow(), token_id=token_id)
    if row is None:
        return None
    tok, project_name = row
    return _principal(tok, project_name)


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed and managed: never its secret, nor its digest."""

    id: int
    project_id: int
    project: str
    scope: Scope
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    state: TokenState


def _info(tok: ApiToken, project: str, now: datetime) -> TokenInfo:
    state: TokenState = "active"
    if tok.revoked_at is not None:
        state = "revoked"
    elif tok.expires_at is not None and tok.expires_at <= now:
        state = "expired"
    return TokenInfo(
        id=tok.id,
        project_id=tok.project_id,
        project=project,
        scope=cast(Scope, tok.scope),
        name=tok.name,
        prefix=tok.prefix,
        created_at=tok.created_at,
        last_used_at=tok.last_used_at,
        expires_at=tok.expires_at,
        revoked_at=tok.revoked_at,
        state=state,
    )


def list_tokens(
    session: Session, project: str | None = None, *, active_only: bool = True
) -> list[TokenInfo]:
    """Tokens by project and id; ``project`` None lists every project's."""
    now = utcnow()
    rows = token_rows(session, project, now, active_only=active_only)
    return [_info(tok, name, now) for tok, name in rows]


def get_token(session: Session, token_id: int) -> TokenInfo | None:
    found = token_row(session, token_id)
    return None if found is None else _info(*found, utcnow())


def revoke_token(session: Session, token_id: int) -> TokenInfo | None:
    """Revoke a token (None if there is none); a revoked token keeps its first revocation."""
    found = token_row(session, token_id)
    if found is None:
        return None
    tok, project = found
    now = utcnow()
    if tok.revoked_at is None:
        update_token(session, tok, {"revoked_at": now})
    return _info(tok, project, now)


def rotate_token(
    session: Session,
    token_id: int,
    *,
    expires_at: datetime | None = None,
    grace: timedelta = timedelta(0),
    not_after: datetime | None = None,
) -> tuple[str, TokenInfo, TokenInfo] | None:
    """A successor of the same project, scope and name: (its secret, it, the old token).

    The successor expires at ``expires_at``; without one it lives as long as the old token
    was given (its ``expires_at - created_at``), or forever; and never after ``not_after``
    (the expiry of the token asking, which may not outlive it). The old token is revoked at
    once, or with a ``grace`` period expires then (sooner if it was due to). None if there
    is no such token; `TokenRevoked` if it is revoked.
    """
    found = token_row(session, token_id)
    if found is None:
        return None
    old, project = found
    if old.revoked_at is not None:
        raise TokenRevoked(f"token {token_id} is revoked; create a new one instead")
    now = utcnow()
    if expires_at is None and old.expires_at is not None:
        expires_at = now + (old.expires_at - old.created_at)
    limit = as_utc(not_after)
    if limit is not None:
        expires_at = min(as_utc(expires_at) or limit, limit)
    secret, new = create_token(
        session, project, cast(Scope, old.scope), old.name, expires_at=expires_at
    )
    if grace > timedelta(0):
        ends = now + grace
        expires = ends if old.expires_at is None else min(as_utc(old.expires_at) or ends, ends)
        update_token(session, old, {"expires_at": expires})
    else:
        update_token(session, old, {"revoked_at": now})
    return secret, _info(new, project, now), _info(old, project, now)
