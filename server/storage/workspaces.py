"""A project's run-page workspace: one row, read by its key, replaced whole."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..models import Workspace, utcnow


def workspace_row(session: Session, project_id: int) -> Workspace | None:
    """The project's workspace as stored; None when it never saved one."""
    return session.scalars(select(Workspace).where(Workspace.project_id == project_id)).first()


def save_workspace(
    session: Session, project_id: int, layout: dict[str, Any], *, updated_by: str
) -> Workspace:
    """Replace the project's layout, one revision past the last, under the row's lock (two
    viewers saving at once both land, the later one whole)."""
    row = session.scalars(
        select(Workspace).where(Workspace.project_id == project_id).with_for_update()
    ).first()
    if row is None:
        row = Workspace(project_id=project_id, revision=0)
        session.add(row)
    row.layout = dict(layout)
    row.revision = (row.revision or 0) + 1
    row.updated_by = updated_by
    row.updated_at = utcnow()
    session.flush()
    return row
