"""API tokens of the caller's project (admin): list, create, revoke, rotate.

Secrets are returned once, by the call that creates them; nothing lists a secret or its
digest. A revoked or expired token stops working on every worker within
``NORMWATCH_TOKEN_CACHE_S`` (an expired one at once: no worker trusts a token past its
expiry).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Response
from sqlalchemy.orm import Session

from .. import auth
from ..auth import Principal, TokenInfo
from ..models import utcnow
from ..schemas import (
    TEN_YEARS_S,
    TokenCreate,
    TokenCreated,
    TokenExpiry,
    TokenOut,
    TokenRotate,
    TokenRotated,
)
from .deps import Admin, SessionDep
from .errors import API, documented

router = APIRouter(prefix="/api/v1", tags=["tokens"], responses=documented(*API))

TokenId = Annotated[int, Path(ge=1, le=2**31 - 1, description="The token's id.")]


def _out(info: TokenInfo) -> TokenOut:
    return TokenOut.model_validate(info, from_attributes=True)


def _created(secret: str, info: TokenInfo) -> TokenCreated:
    return TokenCreated.model_validate({**_out(info).model_dump(), "secret": secret})


def _expiry(body: TokenExpiry) -> datetime | None:
    """The expiry asked for, in UTC; 422 if it is ambiguous, past or too far."""
    if body.expires_in_s is not None and body.expires_at is not None:
        raise HTTPException(422, "give expires_in_s or expires_at, not both")
    now = utcnow()
    if body.expires_in_s is not None:
        return now + timedelta(seconds=body.expires_in_s)
    if body.expires_at is None:
        return None
    at = body.expires_at
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if at <= now:
        raise HTTPException(422, f"expires_at {at.isoformat()} is not in the future")
    if at > now + timedelta(seconds=TEN_YEARS_S):
        raise HTTPException(422, "expires_at is more than ten years away")
    return at


def _within_caller(who: Principal, expires_at: datetime | None, asked: bool) -> datetime | None:
    """The expiry of a token ``who`` creates: never after ``who``'s own.

    A token cannot mint one that outlives it, or a short-lived admin token would be a
    permanent one. Asked for a later expiry: 403. Given none (or, rotating, the old
    token's lifetime), the new token expires with the caller.
    """
    limit = auth.as_utc(who.expires_at)
    if limit is None:
        return expires_at
    if asked and expires_at is not None and expires_at > limit:
        raise HTTPException(
            403,
            f"this token expires at {limit.isoformat()}: a token it creates must expire "
            "by then (use a token without an expiry to create longer-lived ones)",
        )
    return limit if expires_at is None else min(expires_at, limit)


def _owned(session: Session, who: Principal, token_id: int) -> TokenInfo:
    info = auth.get_token(session, token_id)
    if info is None:
        raise HTTPException(404, f"no token with id {token_id}")
    if info.project_id != who.project_id:
        raise HTTPException(403, "this token belongs to another project")
    return info


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(
    session: SessionDep,
    who: Admin,
    project: Annotated[str | None, Query(max_length=128)] = None,
    include_inactive: Annotated[
        bool, Query(alias="all", description="Expired and revoked tokens too.")
    ] = False,
) -> list[TokenOut]:
    """The project's tokens, oldest first: no secrets, no digests."""
    if project is not None and project != who.project:
        raise HTTPException(403, f"this token belongs to project {who.project!r}")
    infos = auth.list_tokens(session, who.project, active_only=not include_inactive)
    return [_out(info) for info in infos]


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(body: TokenCreate, session: SessionDep, who: Admin) -> TokenCreated:
    """A new token of the caller's project; its secret is in this answer only. It expires
    no later than the caller's token (without an expiry asked for, with it)."""
    if body.project is not None and body.project != who.project:
        raise HTTPException(403, f"this token belongs to project {who.project!r}")
    if not who.can(body.scope):
        raise HTTPException(403, f"a {who.scope} token cannot create {body.scope} tokens")
    asked = _expiry(body)
    expires_at = _within_caller(who, asked, asked is not None)
    secret, row = auth.create_token(
        session, who.project, body.scope, body.name, expires_at=expires_at
    )
    info = auth.get_token(session, row.id)
    assert info is not None
    session.commit()
    return _created(secret, info)


@router.delete("/tokens/{token_id}", status_code=204, responses=documented(404))
def revoke_token(token_id: TokenId, session: SessionDep, who: Admin) -> Response:
    """Revoke a token (again: no change). Every worker refuses it within the cache TTL."""
    _owned(session, who, token_id)
    auth.revoke_token(session, token_id)
    session.commit()
    return Response(status_code=204)


@router.post(
    "/tokens/{token_id}/rotate",
    status_code=201,
    response_model=TokenRotated,
    responses=documented(404, 409),
)
def rotate_token(
    token_id: TokenId, session: SessionDep, who: Admin, body: TokenRotate | None = None
) -> TokenRotated:
    """A successor with the same scope and name. The old token is revoked at once, or
    with ``grace_s`` keeps working that long so trainers can be given the new one. The
    successor expires no later than the caller's token."""
    body = body or TokenRotate()
    old = _owned(session, who, token_id)
    if not who.can(old.scope):
        raise HTTPException(403, f"a {who.scope} token cannot rotate {old.scope} tokens")
    asked = _expiry(body)
    rotated = auth.rotate_token(  # a revoked token: TokenRevoked, a 409
        session,
        token_id,
        expires_at=_within_caller(who, asked, asked is not None),
        grace=timedelta(seconds=body.grace_s),
        not_after=who.expires_at,
    )
    assert rotated is not None  # _owned found it in this transaction
    secret, new, old = rotated
    session.commit()
    return TokenRotated.model_validate(
        {**_created(secret, new).model_dump(), "replaces": _out(old).model_dump()}
    )
