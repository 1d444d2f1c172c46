"""What the routes use of the running service, as one typed object.

The app factory builds a `ServiceContext` once and keeps it on the app; every route and
dependency reaches it through `ContextDep` (or the narrower dependencies of :mod:`.deps`),
so nothing reads untyped attributes of ``request.app.state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from ..alerts.targets import AllowList
from ..auth import TokenCache
from ..config import Settings
from ..storage.health import DatabaseProbe
from ..telemetry import Telemetry
from ..workers.compactor import Compactor
from ..workers.dispatcher import Dispatcher
from ..workers.live import RunChanges
from .admission import ReadsFirst, Slots

__all__ = ["ContextDep", "ServiceContext", "context_of", "get_context", "install_context"]


@dataclass(frozen=True)
class ServiceContext:
    """The parts of one service process that requests use."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    """Sessions that take a connection at their first statement."""
    snapshot_sessions: sessionmaker[Session]
    """Sessions that read one snapshot of the database (chart reads, previews)."""
    token_cache: TokenCache
    dispatcher: Dispatcher
    compactor: Compactor
    telemetry: Telemetry
    health_probe: DatabaseProbe
    ingest_slots: Slots
    read_slots: Slots
    reads_first: ReadsFirst
    webhook_allow: AllowList
    """Hosts alert channels may target although private (``NORMWATCH_WEBHOOK_ALLOW``)."""
    changes: RunChanges
    """Tells open run pages that their run changed (`.workers.live`)."""


def install_context(app: FastAPI, context: ServiceContext) -> None:
    app.state.context = context


def context_of(app: FastAPI) -> ServiceContext:
    """The context `install_context` put on ``app``."""
    context = app.state.context
    assert isinstance(context, ServiceContext)
    return context


async def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


ContextDep = Annotated[ServiceContext, Depends(get_context)]
