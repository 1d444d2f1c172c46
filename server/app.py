"""The application factory: API routes, error mapping and (when installed) the dashboard."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError

from .alerts.delivery import Deliverer
from .api import alerts, events, health, metrics, runs
from .config import Settings
from .db import engine_from_settings, session_factory
from .services.dispatcher import Dispatcher

log = logging.getLogger("normwatch.server")


def create_app(settings: Settings | None = None, *, dashboard: bool = True) -> FastAPI:
    """Build the service. Nothing is created at import time; tests build their own."""
    settings = settings or Settings()
    engine = engine_from_settings(settings)

    sessions = session_factory(engine)
    dispatcher = Dispatcher(
        sessions,
        Deliverer.from_settings(settings),
        base_url=settings.base_url,
        tick_s=settings.dispatch_tick_s,
        max_retry_delay_s=settings.retry_max_delay_s,
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        dispatcher.start()
        yield
        dispatcher.stop()
        engine.dispose()

    app = FastAPI(
        title="normwatch",
        version="0.1.0",
        summary="Live instability monitoring for large-model training runs.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = sessions
    app.state.dispatcher = dispatcher
    app.state.ingest_inflight = 0
    app.state.ingest_capacity = settings.ingest_concurrency

    @app.exception_handler(OperationalError)
    async def database_unavailable(_request: Request, exc: DBAPIError) -> JSONResponse:
        log.warning("database unavailable: %s", exc.orig)
        return JSONResponse(
            {"detail": "database unavailable; retry shortly"},
            status_code=503,
            headers={"Retry-After": "2"},
        )

    @app.exception_handler(DBAPIError)
    async def database_error(_request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return await database_unavailable(_request, exc)
        log.exception("database error", exc_info=exc)
        return JSONResponse({"detail": "internal database error"}, status_code=500)

    for module in (health, runs, metrics, events, alerts):
        app.include_router(module.router)

    if dashboard:
        try:
            from normwatch.dashboard import attach_dashboard
        except ImportError as exc:  # the [dashboard] extra is not installed
            log.warning("dashboard unavailable (%s); serving the API only", exc)
        else:
            attach_dashboard(app, settings)
    return app
