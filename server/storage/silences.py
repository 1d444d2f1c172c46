"""Silences and acknowledgements: the rows behind `services.silences`."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..models import Alert, Run, Silence


def add_silence(session: Session, silence: Silence) -> Silence:
    """Store a new silence; it has its id on return."""
    session.add(silence)
    session.flush()
    return silence


def silences_of_project(session: Session, project_id: int) -> list[tuple[Silence, str | None]]:
    """The project's silences with the id of the run each names (None: every run), newest
    first."""
    rows = session.execute(
        select(Silence, Run.id)
        .outerjoin(Run, Run.key == Silence.run_key)
        .where(Silence.project_id == project_id)
        .order_by(Silence.id.desc())
    ).all()
    return [(silence, run_id) for silence, run_id in rows]


def silence_by_id(session: Session, silence_id: int) -> Silence | None:
    return session.get(Silence, silence_id)


def alert_by_id(session: Session, alert_id: int) -> tuple[Alert, int] | None:
    """An alert and the id of the project its run belongs to."""
    found = session.execute(
        select(Alert, Run.project_id)
        .join(Run, Run.key == Alert.run_key)
        .where(Alert.id == alert_id)
    ).first()
    return None if found is None else (found[0], found[1])
