"""API tokens of the caller's project (admin): list, create, revoke, rotate.

Secrets are returned once, by the call that creates them; nothing lists a secret or its
digest. A revoked or expired token stops working on every worker within
``NORMWATCH_TOKEN_CACHE_S`` (an expired one at once: no worker trusts a token past its
expiry).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from ..auth import TokenInfo
from ..schemas.tokens import TokenCreate, TokenCreated, TokenOut, TokenRotate, TokenRotated
from ..services import tokens
from .deps import Admin, SessionDep
from .errors import API, documented

router = APIRouter(prefix="/api/v1", tags=["tokens"], responses=documented(*API))

TokenId = Annotated[int, Path(ge=1, le=2**31 - 1, description="The token's id.")]


def _out(info: TokenInfo) -> TokenOut:
    return TokenOut.model_validate(info, from_attributes=True)


def _created(secret: str, info: TokenInfo) -> TokenCreated:
    return TokenCreated.model_validate({**_out(info).model_dump(), "secret": secret})


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
    infos = tokens.list_tokens(session, who, project, active_only=not include_inactive)
    return [_out(info) for info in infos]


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(body: TokenCreate, session: SessionDep, who: Admin) -> TokenCreated:
    """A new token of the caller's project; its secret is in this answer only. It expires
    no later than the caller's token (without an expiry asked for, with it)."""
    secret, info = tokens.create_token(session, who, body)
    session.commit()
    return _created(secret, info)


@router.delete("/tokens/{token_id}", status_code=204, responses=documented(404))
def revoke_token(token_id: TokenId, session: SessionDep, who: Admin) -> Response:
    """Revoke a token (again: no change). Every worker refuses it within the cache TTL."""
    tokens.revoke_token(session, who, token_id)
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
    # A revoked token: TokenRevoked, a 409.
    secret, new, old = tokens.rotate_token(session, who, token_id, body or TokenRotate())
    session.commit()
    return TokenRotated.model_validate(
        {**_created(secret, new).model_dump(), "replaces": _out(old).model_dump()}
    )
