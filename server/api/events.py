"""Events: config changes, restarts, notes. Drawn on charts; zoom anchors."""

from __future__ import annotations

from fastapi import APIRouter

from ..schemas import EventCreate, EventOut
from ..services import ingest, query
from ..services.access import owned_run
from .context import ContextDep
from .deps import Reader, SessionDep, Writer
from .errors import API, documented

router = APIRouter(
    prefix="/api/v1/runs/{run_id}/events", tags=["events"], responses=documented(*API, 404)
)


@router.post("", status_code=201, response_model=EventOut, responses=documented(409))
def post_event(
    run_id: str, body: EventCreate, session: SessionDep, who: Writer, context: ContextDep
) -> EventOut:
    run, _ = owned_run(session, who, run_id)
    out = ingest.add_event(session, run, body)
    session.commit()
    context.changes.changed(run_id)  # open pages of the run draw it now
    return out


@router.get("", response_model=list[EventOut])
def list_events(run_id: str, session: SessionDep, who: Reader) -> list[EventOut]:
    run, _ = owned_run(session, who, run_id)
    return query.list_events(session, run)
