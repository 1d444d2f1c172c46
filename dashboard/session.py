"""Dashboard login: a read or admin token exchanged for a signed session cookie.

The cookie holds only the token's id, signed with the instance secret; every request
re-checks that the token still exists and is not revoked, so revoking a token ends its
sessions. The viewer is published to Dash callbacks through a context variable.
"""

from __future__ import annotations

import html
import time
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, urlsplit

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from normwatch.server.auth import Principal, authenticate, principal_for_token_id
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

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

# A revoked token's sessions end within this many seconds.
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
    serializer: URLSafeTimedSerializer
    max_age: int

    def dump(self, token_id: int) -> str:
        return str(self.serializer.dumps({"t": token_id}))

    def load(self, cookie: str) -> int | None:
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
        with self.sessions() as session:
            who = principal_for_token_id(session, token_id)
        if len(self._recent) > 10_000:
            self._recent.clear()
        self._recent[token_id] = (who, now + RECHECK_S)
        return who


def _safe_next(target: str | None) -> str:
    """Only same-site paths: an open redirect through the login page is refused."""
    if not target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def login_page(error: str = "", next_url: str = "/") -> HTMLResponse:
    message = f'<p class="error">{html.escape(error)}</p>' if error else ""
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>normwatch · log in</title>
<style>body{{font-family:system-ui,sans-serif;background:#f6f7f9;display:flex;
justify-content:center;padding-top:12vh}}form{{background:#fff;padding:2rem 2.5rem;
border-radius:8px;box-shadow:0 1px 4px #0002;width:26rem}}h1{{margin:0 0 1rem;font-size:1.4rem}}
input{{width:100%;padding:.5rem;font-family:monospace;box-sizing:border-box}}
button{{margin-top:1rem;padding:.5rem 1.2rem}}.error{{color:#b00020}}
.hint{{color:#666;font-size:.85rem}}</style></head><body>
<form method="post" action="/login"><h1>normwatch</h1>{message}
<label for="token">API token (read or admin)</label>
<input id="token" name="token" type="password" autocomplete="off" autofocus required>
<input type="hidden" name="next" value="{html.escape(next_url)}">
<button type="submit" id="login">Log in</button>
<p class="hint">Create one with <code>normwatch token create --project P --scope read</code>.</p>
</form></body></html>"""
    return HTMLResponse(body, status_code=401 if error else 200)


def install_login(app: FastAPI, signer: SessionSigner, sessions: sessionmaker[Session]) -> None:
    """Add /login and /logout, and the middleware that guards the dashboard."""

    def establish(token: str, next_url: str, secure: bool) -> Response:
        with sessions() as session, session.begin():
            who = authenticate(session, token.strip())
        if who is None:
            return login_page("That token is unknown or revoked.", next_url)
        if not who.can("read"):
            return login_page(
                f"That is an '{who.scope}' token; the dashboard needs a read or admin token.",
                next_url,
            )
        response = RedirectResponse(_safe_next(next_url), status_code=303)
        response.set_cookie(
            COOKIE,
            signer.dump(who.token_id),
            max_age=signer.max_age,
            httponly=True,
            samesite="lax",
            secure=secure,
        )
        return response

    @app.get("/login", include_in_schema=False)
    def login_form(request: Request, token: str | None = None, next: str = "/") -> Response:
        if token:  # the login link printed by `normwatch demo` and `token create`
            return establish(token, next, request.url.scheme == "https")
        return login_page(next_url=_safe_next(next))

    @app.post("/login", include_in_schema=False)
    async def login_submit(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0]
        next_url = (form.get("next") or ["/"])[0]
        return establish(token, next_url, request.url.scheme == "https")

    @app.get("/logout", include_in_schema=False)
    def logout() -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    app.add_middleware(SessionMiddleware, signer=signer, sessions=sessions)
