"""Gauges read from the database when Prometheus scrapes: the alert outbox's backlog and
how far compaction is behind. The service's telemetry registers them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from sqlalchemy import func, or_, select, text
from sqlalchemy.orm import Session

from ..models import Compaction, Notification, Run, utcnow


@dataclass(frozen=True)
class Sample:
    """One gauge value computed at scrape time: ``name{labels} value``.

    Samples of one name form one series family and must share their label names.
    """

    name: str
    value: float
    help: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


ScrapeCollector = Callable[[Session], Iterable[Sample]]
"""Reads gauges from the database at scrape time; its session is read-only and discarded."""


def alert_backlog(session: Session) -> Iterator[Sample]:
    """Notifications waiting for delivery, and the age of the oldest in seconds (0 if none)."""
    count, oldest = session.execute(
        select(func.count(), func.min(Notification.created_at)).where(
            Notification.status == "pending"
        )
    ).one()
    age = 0.0 if oldest is None else max((utcnow() - oldest).total_seconds(), 0.0)
    yield Sample(
        "normwatch_alert_notifications_pending",
        float(count),
        "Alert notifications not yet delivered (including those waiting for a retry).",
    )
    yield Sample(
        "normwatch_alert_notifications_oldest_pending_age_seconds",
        age,
        "Age of the oldest undelivered alert notification; 0 when none is pending.",
    )


def lag_samples(session: Session) -> Iterator[Sample]:
    """Compaction backlog gauges for ``/metrics``, read at scrape time."""
    c = Compaction
    pending = (
        Run.last_step.is_not(None),
        or_(c.run_key.is_(None), c.through.is_(None), c.through < Run.last_step),
    )
    count, oldest = session.execute(
        select(func.count(), func.min(func.coalesce(c.compacted_at, Run.created_at)))
        .select_from(Run)
        .outerjoin(c, c.run_key == Run.key)
        .where(*pending)
    ).one()
    age = 0.0 if oldest is None else max((utcnow() - oldest).total_seconds(), 0.0)
    yield Sample(
        "normwatch_compaction_pending_runs",
        float(count),
        "Runs with points not compacted yet.",
    )
    yield Sample(
        "normwatch_compaction_lag_seconds",
        age,
        "Time since the least recently compacted run with pending points was last compacted.",
    )
    hot = session.connection().execute(text("SELECT sum(count) FROM blocks")).scalar_one()
    yield Sample("normwatch_hot_points", float(hot or 0), "Points not compacted yet.")
