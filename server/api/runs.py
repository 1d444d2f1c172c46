"""Runs: create or resume, list, describe, update."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..schemas import INT64_MAX, RunCreate, RunOut, RunUpdate
from ..services import runs as run_service
from ..services.access import own_project, owned_run
from .deps import Reader, SessionDep, Writer
from .errors import API, documented

router = APIRouter(prefix="/api/v1/runs", tags=["runs"], responses=documented(*API))


@router.post("", response_model=RunOut, responses=documented(409))
def create_run(body: RunCreate, session: SessionDep, who: Writer) -> RunOut:
    """Create a run, or resume the project's run of that name (see ``start_step``)."""
    out = run_service.create_or_resume(session, who, body)
    session.commit()
    return out


@router.get("", response_model=list[RunOut])
def list_runs(
    session: SessionDep,
    who: Reader,
    project: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="Most runs returned.")] = 1000,
) -> list[RunOut]:
    """Runs of a project, most recently active first."""
    return run_service.list_runs(session, own_project(who, project), limit=limit)


@router.get("/{run_id}", response_model=RunOut, responses=documented(404))
def get_run(run_id: str, session: SessionDep, who: Reader) -> RunOut:
    run, project = owned_run(session, who, run_id)
    return run_service.describe(session, run, project)


@router.patch("/{run_id}", response_model=RunOut, responses=documented(404))
def update_run(
    run_id: str,
    body: RunUpdate,
    session: SessionDep,
    who: Writer,
    control_read: Annotated[
        int | None,
        Query(
            ge=0,
            le=INT64_MAX,
            description="The newest control request id the trainer has read: those up to it "
            "are marked seen before a finished run's unread requests expire.",
        ),
    ] = None,
) -> RunOut:
    """Mark a run finished or failed, replace its tags, or set its note (``""`` removes it)."""
    run, project = owned_run(session, who, run_id)
    out = run_service.update_run(session, run, project, body, control_read=control_read)
    session.commit()
    return out
