"""A project's run-page workspace: read by any viewer of the project, saved by an admin
(the rule of every setting a project shares: aliases, rules, tags)."""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.orm import Session

from ..auth import Principal
from ..models import Workspace
from ..schemas.workspace import WorkspaceLayout, WorkspaceOut
from ..storage.tokens import token_name
from ..storage.workspaces import save_workspace, workspace_row
from .access import authorize, own_project

SAVING = "saving the project's panel layout"
"""What needs an admin token (`access.authorize`'s words)."""


def get_workspace(session: Session, who: Principal, project: str) -> WorkspaceOut:
    """The project's layout; the empty layout, revision 0, when it never saved one."""
    own_project(who, project)
    row = workspace_row(session, who.project_id)
    if row is None:
        return WorkspaceOut(project=project, layout=WorkspaceLayout(), revision=0)
    return _out(row, project)


def set_workspace(
    session: Session, who: Principal, project: str, layout: WorkspaceLayout
) -> WorkspaceOut:
    """Replace the project's layout whole (`Forbidden` without an admin token)."""
    authorize(who, "admin", doing=SAVING)
    own_project(who, project)
    row = save_workspace(
        session,
        who.project_id,
        layout.model_dump(mode="json"),
        updated_by=token_name(session, who.token_id) or "token",
    )
    return _out(row, project)


def _out(row: Workspace, project: str) -> WorkspaceOut:
    try:
        layout = WorkspaceLayout.model_validate(row.layout or {})
    except ValidationError:
        # A row a later release's bounds no longer take: the default layout, not a 500;
        # saving again replaces it.
        layout = WorkspaceLayout()
    return WorkspaceOut(
        project=project,
        layout=layout,
        revision=row.revision,
        updated_by=row.updated_by,
        updated_at=row.updated_at,
    )
