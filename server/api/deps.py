"""Dependencies shared by the routes: database sessions and the calling principal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ..auth import Principal, Scope
from ..config import Settings
from ..errors import Unauthenticated
from ..services.access import authorize
from .context import ContextDep, ServiceContext

# Dependencies that never block are ``async def``: FastAPI runs a plain ``def`` one in the
# thread pool, a hand-off that cost more than a small batch's parse.


async def get_settings(context: ContextDep) -> Settings:
    return context.settings


def get_session(context: ContextDep) -> Iterator[Session]:
    """A session for one request; routes that write commit before they answer."""
    with context.sessions() as session:
        yield session


def get_snapshot_session(context: ContextDep) -> Iterator[Session]:
    """A session reading one snapshot of the database (see `db.snapshot_factory`); like
    every request session, it takes its connection at its first statement, after the
    caller is authenticated."""
    with context.snapshot_sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
SnapshotDep = Annotated[Session, Depends(get_snapshot_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="An API token of one project, scoped ingest, read or admin "
    "(`normwatch token create`).",
)


def bearer_of(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header's value (None: no token)."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> str:
    """The token of ``Authorization: Bearer <token>`` (401 without one)."""
    token = credentials.credentials.strip() if credentials is not None else None
    if not token:
        raise _no_token()
    return token


def _no_token() -> Unauthenticated:
    return Unauthenticated(
        "missing bearer token: send 'Authorization: Bearer <token>' "
        "(create one with `normwatch token create`)"
    )


async def get_principal(
    context: ContextDep, token: Annotated[str, Depends(bearer_token)]
) -> Principal:
    """The token's principal: from the cache when it trusts it, else from the database in
    the thread pool."""
    who = context.token_cache.cached(token)
    if who is None:
        who = await run_in_threadpool(context.token_cache.lookup, context.sessions, token)
    if who is None:
        raise Unauthenticated("invalid or revoked token")
    return who


def require(scope: Scope) -> Callable[[Principal], Awaitable[Principal]]:
    """A dependency admitting principals whose scope covers ``scope``."""

    async def check(who: Annotated[Principal, Depends(get_principal)]) -> Principal:
        authorize(who, scope)
        return who

    return check


async def caller(request: Request, context: ServiceContext, scope: Scope) -> Principal:
    """What ``require(scope)`` gives, for a route that takes no dependencies (the ingest
    route, where solving the tree of them cost about a tenth of a small batch's CPU); the
    route then documents ``ROUTE_SECURITY`` itself."""
    token = bearer_of(request.headers.get("authorization"))
    if token is None:
        raise _no_token()
    who = await get_principal(context, token)
    authorize(who, scope)
    return who


ROUTE_SECURITY: dict[str, Any] = {"security": [{_BEARER.scheme_name: []}]}
"""The OpenAPI security of a route that calls `caller` (as `require` would document it)."""


Reader = Annotated[Principal, Depends(require("read"))]
Writer = Annotated[Principal, Depends(require("ingest"))]
Admin = Annotated[Principal, Depends(require("admin"))]
