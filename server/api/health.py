"""Liveness that checks the database, answered even while a burst fills the worker."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..schemas import Health
from .context import ContextDep

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health, "description": "The database did not answer."}},
)
async def healthz(context: ContextDep) -> JSONResponse:
    """200 ``{"status": "ok"}`` when the database answers, else 503 with ``Retry-After``.

    Not subject to admission: it answers within about two seconds whatever else the worker
    is doing.
    """
    probe = context.health_probe
    failure = await probe.answer()
    if failure is not None:
        return JSONResponse(
            {"status": "unavailable", "database": failure},
            status_code=503,
            headers={"Retry-After": "5"},
        )
    return JSONResponse({"status": "ok", "database": probe.dialect})
