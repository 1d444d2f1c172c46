"""Dashboard sessions: a signed cookie naming a read or admin token, checked on each request.

The cookie holds only the token's id, signed with the instance secret; every request
re-checks that the token still exists and is neither revoked nor expired, so revoking a
token ends its sessions. The viewer is published to Dash callbacks through a context
variable (:func:`viewer`). The login page that sets the cookie is in :mod:`.login`.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

import anyio
from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from normwatch.server.auth import Principal, principal_for_token_id

COOKIE = "normwatch_session"
PUBLIC_PREFIXES = (
    "/api/",
    "/healthz",
    "/metrics",
    "/docs",
    "/redoc",
    "/openapi.json",
    "/login",
    "/logout",
    "/_dash-component-suites/",
    "/assets/",
    "/_favicon.ico",
)

# A revoked token's sessions end within this many seconds (an expired token's at once).
RECHECK_S = 5.0

current_viewer: ContextVar[Principal | None] = ContextVar("normwatch_viewer", default=None)


def viewer() -> Principal:
    """The logged-in principal of the request being served (inside a Dash callback)."""
    who = current_viewer.get()
    if who is None:
        raise PermissionError("not logged in")
    return who


@dataclass(frozen=True)
class SessionSigner:
    """Session cookies: a token's id, signed and timestamped; valid for ``max_age`` seconds."""

    serializer: URLSafeTimedSerializer
    max_age: int

    def dump(self, token_id: int) -> str:
        return str(self.serializer.dumps({"t": token_id}))

    def load(self, cookie: str) -> int | None:
        """The token id of a cookie :meth:`dump` made; None for one tampered with, signed
        with another key, or older than ``max_age``."""
        try:
            data = self.serializer.loads(cookie, max_age=self.max_age)
        except BadSignature:
            return None
        token_id = data.get("t") if isinstance(data, dict) else None
        return token_id if isinstance(token_id, int) else None


class SessionMiddleware:
    """Pure ASGI: resolves the session cookie, guards dashboard paths."""

    def __init__(
        self, app: ASGIApp, signer: SessionSigner, sessions: sessionmaker[Session]
    ) -> None:
        self.app = app
        self.signer = signer
        self.sessions = sessions
        # token id → (principal or None, recheck after): one lookup per token per few seconds.
        self._recent: dict[int, tuple[Principal | None, float]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"].startswith(PUBLIC_PREFIXES):
            await self.app(scope, receive, send)
            return
        cookie = HTTPConnection(scope).cookies.get(COOKIE)
        who = await anyio.to_thread.run_sync(self._resolve, cookie)
        if who is None and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 4401})
            return
        if who is None:
            request = Request(scope)
            if scope["method"] in ("GET", "HEAD"):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response: Response = RedirectResponse(
                    f"/login?next={quote(target, safe='')}", status_code=303
                )
            else:
                response = Response(
                    '{"detail": "log in at /login"}', 401, media_type="application/json"
                )
            await response(scope, receive, send)
            return
        token = current_viewer.set(who)
        try:
            await self.app(scope, receive, send)
        finally:
            current_viewer.reset(token)

    def _resolve(self, cookie: str | None) -> Principal | None:
        if not cookie:
            return None
        token_id = self.signer.load(cookie)
        if token_id is None:
            return None
        now = time.monotonic()
        cached = self._recent.get(token_id)
        if cached is not None and cached[1] > now:
            return cached[0]
        wall = datetime.now(UTC)
        with self.sessions() as session:
            who = principal_for_token_id(session, token_id, wall)
        if who is not None and not who.can("read"):
            who = None  # only read and admin tokens open the dashboard, whatever signed it
        if len(self._recent) > 10_000:
            self._recent.clear()
        trusted = RECHECK_S if who is None else who.trusted_for(RECHECK_S, wall)
        self._recent[token_id] = (who, now + trusted)
        return who
