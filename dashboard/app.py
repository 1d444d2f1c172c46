"""Builds the Dash app on the service's FastAPI server.

Dash keeps some state per process (``dash.get_app()``, a catch-all page route added at
startup), so pages are not Dash "pages": each page module offers its routes, ``layout``
and ``register`` (:mod:`.routing`), one callback routes by path, and each page URL is a
real FastAPI route, so unknown paths are a plain 404. What that takes of Dash's private
API is in :mod:`.dash_internals`.
"""

from __future__ import annotations

import dash
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from itsdangerous import URLSafeTimedSerializer

from normwatch.server.api.context import context_of
from normwatch.server.auth import instance_secret
from normwatch.server.config import Settings

from . import routing
from .callback_check import CallbackCheck, CallbackErrors
from .dash_internals import callback_map, disable_catchall, render_index
from .data import DashboardData
from .live import install_live
from .login import install_login
from .pages.run_download import install_export
from .scripts import ScriptCache
from .security import BrowserSecurity, origin_of
from .session import SessionSigner


def attach_dashboard(server: FastAPI, settings: Settings) -> dash.Dash:
    """Mount the dashboard at ``/`` of ``server`` (login at ``/login``)."""
    context = context_of(server)
    sessions = context.sessions
    data = DashboardData(
        sessions,
        deliverer=context.dispatcher.deliverer,
        webhook_allow=context.webhook_allow,
        base_url=settings.base_url,
    )
    # Innermost: Dash's scripts from memory, compressed (`ScriptCache`), still with every
    # header the middlewares outside add.
    server.add_middleware(ScriptCache)
    # Added before Dash's middleware, so inside it: a failing callback is logged and
    # answered here rather than by Dash's anonymous 500.
    server.add_middleware(CallbackErrors)
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
    app.layout = routing.frame()
    routing.register(app, data)

    # Real routes for the page URLs; Dash's own catch-all would answer 200 for any path.
    disable_catchall(app)

    async def serve_index(request: Request) -> HTMLResponse:
        return HTMLResponse(render_index(app, request))

    for page in routing.PAGES:
        for route_path in page.ROUTES:
            server.add_api_route(route_path, serve_index, methods=["GET"], include_in_schema=False)
    public_origin = origin_of(settings.public_url) if settings.public_url else None
    trusted_origins = [public_origin] if public_origin else []
    install_live(server, data, context.changes, trusted_origins)
    install_export(server, data)

    with sessions() as session, session.begin():
        secret = (
            settings.secret_key.get_secret_value()
            if settings.secret_key is not None
            else instance_secret(session, "session_key")
        )
    signer = SessionSigner(
        URLSafeTimedSerializer(secret, salt="normwatch-session"), settings.session_max_age_s
    )
    # Outside Dash's middleware and inside the session guard: a malformed callback request
    # from a logged-in viewer is a 400 naming what does not fit.
    server.add_middleware(CallbackCheck, callbacks=lambda: callback_map(app))
    install_login(server, signer, sessions)
    # Added after the login guard, so outside it: its redirects and 401s carry the headers
    # too, and a cross-site write is refused before any session is looked up. The hashes are
    # taken once every page has registered its clientside callbacks (inline scripts).
    server.add_middleware(
        BrowserSecurity, script_hashes=app.csp_hashes(), trusted_origins=trusted_origins
    )
    return app
