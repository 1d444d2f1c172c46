"""Dashboard sessions: the signed cookie, the viewer of a request, and the guard in front of
the dashboard's paths (a real app behind the middleware, on Postgres)."""

from __future__ import annotations

import httpx
import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from normwatch.dashboard.session import (
    COOKIE,
    PUBLIC_PREFIXES,
    SessionMiddleware,
    SessionSigner,
    current_viewer,
    viewer,
)
from normwatch.server.auth import Principal, revoke_token
from normwatch.testing import ServerProcess
from tests.helpers.coroutines import run_async
from tests.helpers.tenants import make_tenant

from .seed import principal

SALT = "normwatch-session"
WHO = Principal(token_id=7, project_id=3, project="marin", scope="read")


def signer_at(
    clock: list[int], *, key: str = "k", salt: str = SALT, max_age: int = 60
) -> SessionSigner:
    """A signer whose idea of now is ``clock[0]`` (seconds), instead of the system clock."""

    class ClockSigner(TimestampSigner):
        def get_timestamp(self) -> int:
            return clock[0]

    serializer = URLSafeTimedSerializer(key, salt=salt, signer=ClockSigner)
    return SessionSigner(serializer, max_age)


def test_a_cookie_names_its_token_until_it_expires() -> None:
    clock = [1_000_000]
    signer = signer_at(clock)
    cookie = signer.dump(42)
    assert signer.load(cookie) == 42
    clock[0] += 60
    assert signer.load(cookie) == 42
    clock[0] += 1
    assert signer.load(cookie) is None


def test_a_cookie_tampered_with_or_signed_otherwise_is_no_session() -> None:
    clock = [1_000_000]
    cookie = signer_at(clock).dump(42)
    payload, _, rest = cookie.partition(".")
    other_payload = signer_at(clock).dump(43).partition(".")[0]
    flipped = cookie[:-1] + ("A" if cookie[-1] != "A" else "B")
    for forged in (flipped, f"{other_payload}.{rest}", "", "garbage", payload):
        assert signer_at(clock).load(forged) is None, forged
    assert signer_at(clock, key="other").load(cookie) is None
    assert signer_at(clock, salt="another-salt").load(cookie) is None


@pytest.mark.parametrize("payload", [[42], {"t": "42"}, {"t": None}, {}, "42", 42])
def test_a_signed_cookie_without_a_token_id_is_no_session(payload: object) -> None:
    clock = [1_000_000]
    signer = signer_at(clock)
    assert signer.load(str(signer.serializer.dumps(payload))) is None


def test_viewer_is_the_principal_of_the_request_being_served() -> None:
    with pytest.raises(PermissionError, match="not logged in"):
        viewer()
    token = current_viewer.set(WHO)
    try:
        assert viewer() is WHO
    finally:
        current_viewer.reset(token)
    with pytest.raises(PermissionError):
        viewer()


# --- the guard, in front of a small app of its own -----------------------------------------


def guarded(signer: SessionSigner, sessions: sessionmaker[Session]) -> SessionMiddleware:
    def page(_request: Request) -> JSONResponse:
        who = viewer()
        return JSONResponse({"project": who.project, "scope": who.scope})

    def public(_request: Request) -> JSONResponse:
        return JSONResponse({"viewer": current_viewer.get() is not None})

    app = Starlette(
        routes=[
            Route("/runs/{run_id}", page, methods=["GET", "POST"]),
            Route("/api/v1/runs", public),
        ]
    )
    return SessionMiddleware(app, signer=signer, sessions=sessions)


def call(
    app: SessionMiddleware, method: str, path: str, cookie: str | None = None
) -> httpx.Response:
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        cookies = {COOKIE: cookie} if cookie is not None else None
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", cookies=cookies
        ) as client:
            return await client.request(method, path)

    return run_async(send())


def test_the_guard_lets_a_session_in_and_sends_others_to_log_in(
    pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]
) -> None:
    tenant = make_tenant(pg_server.database_url)
    reader = principal(dashboard_sessions, tenant.read)
    signer = signer_at([2_000_000_000])
    app = guarded(signer, dashboard_sessions)

    opened = call(app, "GET", "/runs/r1", signer.dump(reader.token_id))
    assert opened.status_code == 200
    assert opened.json() == {"project": tenant.project, "scope": "read"}

    for cookie in (None, "garbage", signer.dump(2**31 - 1)):
        sent = call(app, "GET", "/runs/r1?left=a%2Fb&start=5", cookie)
        assert sent.status_code == 303, cookie
        assert sent.headers["location"] == "/login?next=%2Fruns%2Fr1%3Fleft%3Da%252Fb%26start%3D5"
        refused = call(app, "POST", "/runs/r1", cookie)
        assert (refused.status_code, refused.json()) == (401, {"detail": "log in at /login"})

    public = call(app, "GET", "/api/v1/runs")
    assert (public.status_code, public.json()) == (200, {"viewer": False})
    assert "/api/" in PUBLIC_PREFIXES and "/login" in PUBLIC_PREFIXES


def test_the_guard_ends_a_revoked_tokens_session(
    pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]
) -> None:
    tenant = make_tenant(pg_server.database_url)
    admin = principal(dashboard_sessions, tenant.admin)
    signer = signer_at([2_000_000_000])
    with dashboard_sessions() as session, session.begin():
        revoke_token(session, admin.token_id)
    # A fresh guard: nothing remembered from a check made before the revocation.
    answer = call(
        guarded(signer, dashboard_sessions), "GET", "/runs/r1", signer.dump(admin.token_id)
    )
    assert answer.status_code == 303
