"""The application factory: API routes, error mapping and (when installed) the dashboard."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from . import memory
from .alerts.delivery import Deliverer
from .alerts.targets import parse_allow
from .api import (
    alerts,
    aliases,
    analytics,
    control,
    docs,
    errors,
    events,
    export,
    health,
    metrics,
    prometheus,
    runs,
    tokens,
    workspaces,
)
from .api.admission import Admission, CallerShares, InteractiveRequests, ReadsFirst, Slots
from .api.body import RequestBounds
from .api.context import ServiceContext, install_context
from .auth import TokenCache
from .config import Settings
from .db import engine_from_settings, session_factory, snapshot_factory
from .storage.gauges import lag_samples
from .storage.health import DatabaseProbe
from .telemetry import Telemetry
from .workers.compactor import Compactor
from .workers.dispatcher import Dispatcher
from .workers.live import RunChanges

log = logging.getLogger("normwatch.server")


def serve_app() -> FastAPI:
    """The app of a ``normwatch serve`` worker process: `create_app` with ``freeze_gc``, in a
    process whose threads share two malloc arenas (see :mod:`.memory`)."""
    memory.limit_arenas()
    return create_app(freeze_gc=True)


def _check_pool(settings: Settings) -> None:
    """Warn when the pool cannot serve every admitted request at once: those beyond it wait
    for a connection (``NORMWATCH_DB_POOL_TIMEOUT_S``) and then get 503."""
    admitted = settings.ingest_concurrency + settings.read_concurrency
    # The pool opens as many connections again past its size; the dispatcher takes one.
    if not settings.database_url.startswith("sqlite") and 2 * settings.db_pool_size < admitted + 1:
        log.warning(
            "NORMWATCH_DB_POOL_SIZE=%d gives at most %d connections, fewer than the %d requests "
            "admitted at once (NORMWATCH_INGEST_CONCURRENCY + NORMWATCH_READ_CONCURRENCY) and "
            "the alert dispatcher: raise it to at least %d",
            settings.db_pool_size,
            2 * settings.db_pool_size,
            admitted,
            (admitted + 2) // 2,
        )


def create_app(
    settings: Settings | None = None, *, dashboard: bool = True, freeze_gc: bool = False
) -> FastAPI:
    """Build the service. Nothing is created at import time; tests build their own.

    ``freeze_gc`` is for a process that runs this one app: at start-up, every object alive
    (modules, the dashboard's layouts, SQLAlchemy's mappers: some 160,000 that never become
    garbage) is moved out of the cyclic collector's sight. Its full passes would otherwise
    walk them all, and under steady ingest they stopped a request for 50-90 ms about every
    ten seconds.
    """
    settings = settings or Settings()
    _check_pool(settings)
    engine = engine_from_settings(settings)

    sessions = session_factory(engine)
    webhook_allow = parse_allow(settings.webhook_allow)
    health_probe = DatabaseProbe(settings.database_url)
    reads_first = ReadsFirst(settings.interactive_first_s)
    dispatcher = Dispatcher(
        sessions,
        Deliverer(allow=webhook_allow),
        base_url=settings.base_url,
        tick_s=settings.dispatch_tick_s,
        lease_s=settings.dispatch_lease_s,
        max_retry_delay_s=settings.retry_max_delay_s,
        ahead=reads_first.small_batch,
    )
    telemetry = Telemetry(engine, sessions)
    telemetry.add_collector(lag_samples, name="compaction")

    compactor = Compactor.from_settings(sessions, settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if freeze_gc:
            gc.collect()
            gc.freeze()
        dispatcher.start()
        if settings.compaction:
            compactor.start()
        yield
        compactor.stop()
        dispatcher.stop()
        telemetry.close()
        health_probe.close()
        engine.dispose()

    app = FastAPI(
        title="normwatch",
        version="0.1.0",
        summary="Live instability monitoring for large-model training runs.",
        lifespan=lifespan,
        # FastAPI's docs pages load their scripts from a CDN; `docs` serves them offline.
        docs_url=None,
        redoc_url=None,
    )
    context = ServiceContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        snapshot_sessions=snapshot_factory(engine),
        token_cache=TokenCache(settings.token_cache_s),
        dispatcher=dispatcher,
        compactor=compactor,
        telemetry=telemetry,
        health_probe=health_probe,
        ingest_slots=Slots(
            settings.ingest_concurrency, settings.ingest_wait_s, settings.admission_queue
        ),
        read_slots=Slots(settings.read_concurrency, settings.read_wait_s, settings.admission_queue),
        reads_first=reads_first,
        webhook_allow=webhook_allow,
        changes=RunChanges(sessions, max_watches=settings.live_max_watches),
    )
    install_context(app, context)

    errors.install(app)
    docs.install(app)

    for module in (
        health,
        runs,
        metrics,
        export,
        analytics,
        events,
        control,
        alerts,
        aliases,
        prometheus,
        tokens,
        workspaces,
    ):
        app.include_router(module.router)
    app.include_router(analytics.compare_router)

    if dashboard:
        try:
            from normwatch.dashboard import attach_dashboard
        except ImportError as exc:  # the [dashboard] extra is not installed
            log.warning("dashboard unavailable (%s); serving the API only", exc)
        else:
            attach_dashboard(app, settings)
    if settings.interactive_first_s > 0:
        app.add_middleware(
            InteractiveRequests,
            reads_first=context.reads_first,
            small_batch_bytes=settings.small_batch_bytes,
        )
    # Outside the dashboard's session check, which reads the database: it is admitted too.
    per_caller = settings.read_per_caller or max(1, settings.read_concurrency // 2)
    app.add_middleware(
        Admission,
        ingest=context.ingest_slots,
        reads=context.read_slots,
        refused=telemetry.count_refused,
        shares=CallerShares(per_caller, settings.read_wait_s, settings.admission_queue),
    )
    app.add_middleware(
        RequestBounds, default=settings.max_request_bytes, ingest=settings.max_body_bytes
    )
    # Outside every other middleware, so that whatever raises is a 500 on a kept connection.
    app.add_middleware(errors.Unexpected)
    # Added last, so outermost: it times and counts every answer, the dashboard's too.
    app.add_middleware(prometheus.RequestMetrics, telemetry=telemetry)
    return app
