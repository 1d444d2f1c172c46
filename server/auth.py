"""Bearer tokens: generated once, stored as SHA-256, scoped to one project.

Scopes: ``ingest`` writes runs, metrics and events; ``read`` reads; ``admin`` does
everything, plus rules and tokens. Tokens carry 256 bits of randomness, so a plain
SHA-256 (not a slow password hash) is the right digest: nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, cast

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from .models import ApiToken, InstanceSecret, Project, utcnow

Scope = Literal["ingest", "read", "admin"]
SCOPES: tuple[Scope, ...] = ("ingest", "read", "admin")
TOKEN_PREFIX = "nw_"
# last_used_at is written at most this often per token, to keep reads write-free.
_TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token of one project with one scope."""

    token_id: int
    project_id: int
    project: str
    scope: Scope

    def can(self, needed: Scope) -> bool:
        return self.scope == "admin" or self.scope == needed


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def get_or_create_project(session: Session, name: str) -> Project:
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        project = Project(name=name)
        session.add(project)
        session.flush()
    return project


def create_token(
    session: Session, project: str, scope: Scope, name: str = ""
) -> tuple[str, ApiToken]:
    """Create a token; the secret is returned once and never stored."""
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
    )
    session.add(row)
    session.flush()
    return secret, row


def authenticate(session: Session, token: str) -> Principal | None:
    """The principal for a presented token, or None if unknown or revoked."""
    row = session.execute(
        select(ApiToken, Project.name)
        .join(Project, Project.id == ApiToken.project_id)
        .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    ).first()
    if row is None:
        return None
    tok, project_name = row
    now = utcnow()
    last = tok.last_used_at
    if (
        last is None
        or (now - (last if last.tzinfo else last.replace(tzinfo=now.tzinfo))) > _TOUCH_EVERY
    ):
        session.execute(update(ApiToken).where(ApiToken.id == tok.id).values(last_used_at=now))
    return Principal(tok.id, tok.project_id, project_name, cast(Scope, tok.scope))


class TokenCache:
    """Principals of recently presented bearer tokens, trusted for ``ttl_s`` seconds.

    Authentication is otherwise a transaction of its own on every request: for a trainer
    posting a small batch several times a second, as much database work as storing it.
    Only tokens that authenticated are kept (a new token works at once); a revoked one
    stops working within ``ttl_s``, the same window the dashboard gives session cookies.
    Entries are keyed by the token's digest, never the token itself.
    """

    def __init__(
        self,
        ttl_s: float = 5.0,
        *,
        limit: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: dict[str, tuple[Principal, float]] = {}

    def lookup(self, session_for: Callable[[], Session], token: str) -> Principal | None:
        """The token's principal, from the cache or else from ``authenticate``."""
        digest = hash_token(token)
        now = self._clock()
        with self._lock:
            hit = self._recent.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        with session_for() as session, session.begin():
            who = authenticate(session, token)
        with self._lock:
            if who is None:
                self._recent.pop(digest, None)
            else:
                if len(self._recent) >= self.limit:
                    self._recent.clear()
                self._recent[digest] = (who, now + self.ttl_s)
        return who


def principal_for_token_id(session: Session, token_id: int) -> Principal | None:
    """Re-check a token named by a session cookie: revoking it ends the session."""
    row = session.execute(
        select(ApiToken, Project.name)
        .join(Project, Project.id == ApiToken.project_id)
        .where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
    ).first()
    if row is None:
        return None
    tok, project_name = row
    return Principal(tok.id, tok.project_id, project_name, cast(Scope, tok.scope))


def instance_secret(session: Session, name: str) -> str:
    """A random secret generated on first use and shared by every worker via the database.

    Workers starting together may race to create it; the insert ignores a conflict and
    everyone reads back the one row that won.
    """
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    insert_stmt = insert(InstanceSecret)
    session.execute(
        insert_stmt.values(name=name, value=secrets.token_urlsafe(48)).on_conflict_do_nothing()
    )
    value = session.scalar(select(InstanceSecret.value).where(InstanceSecret.name == name))
    assert value is not None
    return value
