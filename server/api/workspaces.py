"""A project's run-page workspace: the layout of its metric panels (admin to save)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from ..schemas.workspace import WorkspaceLayout, WorkspaceOut
from ..services import workspaces as workspace_service
from .deps import Admin, Reader, SessionDep
from .errors import API, documented

router = APIRouter(prefix="/api/v1", tags=["workspaces"], responses=documented(*API))

ProjectPath = Annotated[str, Path(min_length=1, max_length=128, description="The project.")]


@router.get("/projects/{project}/workspace", response_model=WorkspaceOut)
def get_workspace(project: ProjectPath, session: SessionDep, who: Reader) -> WorkspaceOut:
    """The project's panel layout: pinned, hidden, ordered and expression panels."""
    return workspace_service.get_workspace(session, who, project)


@router.put("/projects/{project}/workspace", response_model=WorkspaceOut)
def put_workspace(
    project: ProjectPath, body: WorkspaceLayout, session: SessionDep, who: Admin
) -> WorkspaceOut:
    """Replace the project's panel layout whole; every viewer of its runs then sees it."""
    out = workspace_service.set_workspace(session, who, project, body)
    session.commit()
    return out
