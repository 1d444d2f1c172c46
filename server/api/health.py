"""Liveness that checks the database."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ..schemas import Health
from .deps import SessionDep

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(session: SessionDep) -> JSONResponse:
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return JSONResponse(
            {"status": "unavailable", "database": type(exc).__name__},
            status_code=503,
            headers={"Retry-After": "5"},
        )
    return JSONResponse({"status": "ok", "database": session.get_bind().dialect.name})
