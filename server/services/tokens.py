"""API tokens of the caller's project: who may list, create, revoke and rotate which.

A token acts within its project and may not create or rotate a token of a wider scope, or
one that outlives it (a short-lived admin token would otherwise mint a permanent one).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from .. import auth
from ..auth import Principal, TokenInfo
from ..errors import Forbidden, Invalid, NotFound
from ..models import utcnow
from ..schemas.tokens import TEN_YEARS_S, TokenCreate, TokenExpiry, TokenRotate
from .access import own_project, owns


def expiry(body: TokenExpiry) -> datetime | None:
    """The expiry asked for, in UTC; `Invalid` if it is ambiguous, past or too far."""
    if body.expires_in_s is not None and body.expires_at is not None:
        raise Invalid("give expires_in_s or expires_at, not both")
    now = utcnow()
    if body.expires_in_s is not None:
        return now + timedelta(seconds=body.expires_in_s)
    if body.expires_at is None:
        return None
    at = body.expires_at
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if at <= now:
        raise Invalid(f"expires_at {at.isoformat()} is not in the future")
    if at > now + timedelta(seconds=TEN_YEARS_S):
        raise Invalid("expires_at is more than ten years away")
    return at


def within_caller(who: Principal, expires_at: datetime | None, asked: bool) -> datetime | None:
    """The expiry of a token ``who`` creates: never after ``who``'s own.

    Asked for a later expiry: `Forbidden`. Given none (or, rotating, the old token's
    lifetime), the new token expires with the caller.
    """
    limit = auth.as_utc(who.expires_at)
    if limit is None:
        return expires_at
    if asked and expires_at is not None and expires_at > limit:
        raise Forbidden(
            f"this token expires at {limit.isoformat()}: a token it creates must expire "
            "by then (use a token without an expiry to create longer-lived ones)"
        )
    return limit if expires_at is None else min(expires_at, limit)


def owned_token(session: Session, who: Principal, token_id: int) -> TokenInfo:
    info = auth.get_token(session, token_id)
    if info is None:
        raise NotFound(f"no token with id {token_id}")
    owns(who, info.project_id, "token")
    return info


def list_tokens(
    session: Session, who: Principal, project: str | None, *, active_only: bool
) -> list[TokenInfo]:
    return auth.list_tokens(session, own_project(who, project), active_only=active_only)


def create_token(session: Session, who: Principal, body: TokenCreate) -> tuple[str, TokenInfo]:
    """A new token of ``who``'s project: its secret and what is stored of it."""
    own_project(who, body.project)
    if not who.can(body.scope):
        raise Forbidden(f"a {who.scope} token cannot create {body.scope} tokens")
    asked = expiry(body)
    expires_at = within_caller(who, asked, asked is not None)
    secret, row = auth.create_token(
        session, who.project, body.scope, body.name, expires_at=expires_at
    )
    info = auth.get_token(session, row.id)
    assert info is not None
    return secret, info


def revoke_token(session: Session, who: Principal, token_id: int) -> None:
    owned_token(session, who, token_id)
    auth.revoke_token(session, token_id)


def rotate_token(
    session: Session, who: Principal, token_id: int, body: TokenRotate
) -> tuple[str, TokenInfo, TokenInfo]:
    """A successor of the token (its secret, it, the old token); a revoked token raises
    `TokenRevoked`."""
    old = owned_token(session, who, token_id)
    if not who.can(old.scope):
        raise Forbidden(f"a {who.scope} token cannot rotate {old.scope} tokens")
    asked = expiry(body)
    rotated = auth.rotate_token(
        session,
        token_id,
        expires_at=within_caller(who, asked, asked is not None),
        grace=timedelta(seconds=body.grace_s),
        not_after=who.expires_at,
    )
    assert rotated is not None  # owned_token found it in this transaction
    return rotated
