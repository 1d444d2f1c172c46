"""Builds the Dash app on the service's FastAPI server.

Dash keeps some state per process (``dash.get_app()``, a catch-all page route added at
startup), so pages are not Dash "pages": each page module offers ``PATH``, ``layout``
and ``register``; this module routes by path with one callback and registers real
FastAPI routes for the page URLs, so unknown paths are a plain 404.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import dash
from dash import Input, Output, State, dcc, html
from dash.backends._fastapi import reset_current_request, set_current_request
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from itsdangerous import URLSafeTimedSerializer
from normwatch.server.alerts.targets import parse_allow
from normwatch.server.auth import instance_secret
from normwatch.server.config import Settings

from .data import DashboardData, RunNotFound
from .pages import alerts as alerts_page
from .pages import rules as rules_page
from .pages import run as run_page
from .pages import runs as runs_page
from .security import BrowserSecurity, origin_of
from .session import SessionSigner, install_login, viewer

PAGES = (runs_page, run_page, alerts_page, rules_page)


def attach_dashboard(server: FastAPI, settings: Settings) -> dash.Dash:
    """Mount the dashboard at ``/`` of ``server`` (login at ``/login``)."""
    sessions = server.state.sessions
    data = DashboardData(
        sessions,
        deliverer=server.state.dispatcher.deliverer,
        webhook_allow=parse_allow(settings.webhook_allow),
        base_url=settings.base_url,
    )
    # Dash's annotation predates its FastAPI backend, which takes the app instance.
    app = dash.Dash(
        __name__,
        server=server,  # type: ignore[arg-type]
        title="normwatch",
        update_title="",
        suppress_callback_exceptions=True,
        serve_locally=True,
        # The login page serves its own script; Dash pages need not load it.
        assets_ignore=r"^login\.js$",
    )
    app.layout = html.Div(
        [
            dcc.Location(id="url", refresh="callback-nav"),
            html.Header(
                [
                    dcc.Link("normwatch", href="/", className="brand"),
                    dcc.Link("runs", href="/", className="nav", id="nav-runs"),
                    dcc.Link("alerts", href="/alerts", className="nav", id="nav-alerts"),
                    dcc.Link("rules", href="/rules", className="nav", id="nav-rules"),
                    html.Span(id="viewer", className="viewer"),
                    html.A("log out", href="/logout", className="logout"),
                ],
                className="topbar",
            ),
            html.Main(id="page"),
        ]
    )

    @app.callback(
        Output("page", "children"),
        Output("viewer", "children"),
        Input("url", "pathname"),
        State("url", "search"),
    )
    async def route(pathname: str | None, search: str | None) -> tuple[Any, str]:
        who = viewer()
        params = _query(search)
        for page in PAGES:
            match = page.match(pathname or "/")
            if match is not None:
                try:
                    layout = await anyio.to_thread.run_sync(
                        partial(page.layout, data, who, **match, **params)
                    )
                except RunNotFound:
                    layout = not_found(pathname or "/")
                return layout, f"project {who.project} · {who.scope}"
        return not_found(pathname or "/"), f"project {who.project}"

    for page in PAGES:
        page.register(app, data)

    # Real routes for the page URLs; Dash's own catch-all would answer 200 for any path.
    app.backend._setup_catchall = lambda: None  # type: ignore[attr-defined]

    async def serve_index(request: Request) -> HTMLResponse:
        # Dash finishes its setup (assets, scripts) on its first own request; a deep link
        # may be the first request of all, so make sure that setup happened.
        app._setup_server()
        token = set_current_request(request)
        try:
            return HTMLResponse(app.index())
        finally:
            reset_current_request(token)

    for page in PAGES:
        for route_path in page.ROUTES:
            server.add_api_route(route_path, serve_index, methods=["GET"], include_in_schema=False)

    with sessions() as session, session.begin():
        secret = (
            settings.secret_key.get_secret_value()
            if settings.secret_key is not None
            else instance_secret(session, "session_key")
        )
    signer = SessionSigner(
        URLSafeTimedSerializer(secret, salt="normwatch-session"), settings.session_max_age_s
    )
    install_login(server, signer, sessions)
    # Added after the login guard, so outside it: its redirects and 401s carry the headers
    # too, and a cross-site write is refused before any session is looked up. The hashes are
    # taken once every page has registered its clientside callbacks (inline scripts).
    public_origin = origin_of(settings.public_url) if settings.public_url else None
    server.add_middleware(
        BrowserSecurity,
        script_hashes=app.csp_hashes(),
        trusted_origins=[public_origin] if public_origin else [],
    )
    return app


def _query(search: str | None) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl((search or "").lstrip("?")))


def not_found(path: str) -> html.Div:
    return html.Div(
        [
            html.H2("Not found"),
            html.P(f"Nothing at {path} in your project."),
            dcc.Link("All runs", href="/"),
        ],
        className="card",
    )
