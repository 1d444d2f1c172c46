"""A project's run-page panel layout, read and saved through the service layer: the
dashboard's half of ``GET``/``PUT /api/v1/projects/{project}/workspace``, under the same
rules (any viewer reads the project's layout; saving it needs an admin token)."""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import Principal
from normwatch.server.schemas.workspace import WorkspaceLayout
from normwatch.server.services import workspaces

from .refusals import invalid


class WorkspaceData:
    """The workspace half of `DashboardData` (which sets ``sessions``)."""

    sessions: sessionmaker[Session]

    def workspace(self, who: Principal) -> WorkspaceLayout:
        """The viewer's project's layout (the empty layout when it never saved one)."""
        with self.sessions() as session:
            return workspaces.get_workspace(session, who, who.project).layout

    def save_workspace(self, who: Principal, layout: WorkspaceLayout) -> WorkspaceLayout:
        """Save ``layout`` for the viewer's project (`Forbidden` without an admin token,
        `Invalid` for a layout past the API's bounds); the layout saved."""
        try:
            checked = WorkspaceLayout.model_validate(layout.model_dump())
        except ValidationError as exc:
            raise invalid(exc, "the layout") from None
        with self.sessions() as session, session.begin():
            return workspaces.set_workspace(session, who, who.project, checked).layout
