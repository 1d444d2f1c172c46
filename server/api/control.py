"""Requests to a run's trainer: checkpoint now, or stop. Admins ask; the trainer reads them
in the answers to its metric batches (``control_read`` on ``POST .../metrics``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..schemas.control import ControlCreate, ControlOut
from ..services import control
from ..services.access import owned_run
from .deps import Admin, Reader, SessionDep
from .errors import API, documented

router = APIRouter(
    prefix="/api/v1/runs/{run_id}/control", tags=["control"], responses=documented(*API, 404)
)


@router.post(
    "",
    status_code=201,
    response_model=ControlOut,
    responses={
        200: {"model": ControlOut, "description": "A request of that action was open already."},
        **documented(409),
    },
)
def request_control(
    run_id: str, body: ControlCreate, session: SessionDep, who: Admin
) -> ControlOut | JSONResponse:
    """Ask the run's trainer to checkpoint or to stop, with a reason (admin).

    The request is drawn on the run's charts as a ``control`` event. The trainer hears of it
    in the answer to its next metric batch (`Run.should_stop()` / `should_checkpoint()` in
    the Python client). Asking again while a request of the same action is unread answers
    that request with 200. A run that is not running answers 409.
    """
    run, _ = owned_run(session, who, run_id)
    out, created = control.request_control(session, run, body, token_id=who.token_id)
    session.commit()
    if not created:
        return JSONResponse(out.model_dump(mode="json"), status_code=200)
    return out


@router.get("", response_model=list[ControlOut])
def list_requests(run_id: str, session: SessionDep, who: Reader) -> list[ControlOut]:
    """The run's requests, newest first, each with its state: pending, delivered (handed to
    the trainer), seen (the trainer said it read it) or expired (the run finished first)."""
    run, _ = owned_run(session, who, run_id)
    return control.list_requests(session, run)
