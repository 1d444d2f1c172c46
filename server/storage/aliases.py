"""A project's metric-name aliases: one row, read by its key, replaced whole."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..models import MetricAliases, utcnow


def aliases_row(session: Session, project_id: int) -> MetricAliases | None:
    """The project's aliases as stored; None when it never set any."""
    return session.scalars(
        select(MetricAliases).where(MetricAliases.project_id == project_id)
    ).first()


def save_aliases(
    session: Session,
    project_id: int,
    presets: list[str],
    pairs: dict[str, str],
    *,
    updated_by: str,
) -> MetricAliases:
    """Replace the project's aliases, one revision past the last, under the row's lock
    (two admins saving at once both land, one after the other)."""
    row = session.scalars(
        select(MetricAliases).where(MetricAliases.project_id == project_id).with_for_update()
    ).first()
    if row is None:
        row = MetricAliases(project_id=project_id, revision=0)
        session.add(row)
    row.presets = list(presets)
    row.pairs = dict(pairs)
    row.revision = (row.revision or 0) + 1
    row.updated_by = updated_by
    row.updated_at = utcnow()
    session.flush()
    return row
