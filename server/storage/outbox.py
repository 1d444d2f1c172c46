"""The alert notifications outbox: leasing due notifications to a dispatcher, what it needs
to send one, and the record of each attempt."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..models import Alert, AlertRule, DeliveryAttempt, Notification, Project, Run


def claim_notifications(
    session: Session, now: datetime, lease_until: datetime, limit: int
) -> list[int]:
    """Lease up to ``limit`` due notifications to this worker, oldest first.

    The lease moves their next attempt past ``lease_until``, so another worker (or this one
    after a crash) takes them over only once it expires; ``SKIP LOCKED`` keeps concurrent
    claimers from waiting on each other's rows.
    """
    conn = session.connection()
    lock = " FOR UPDATE SKIP LOCKED" if conn.dialect.name == "postgresql" else ""
    rows = conn.execute(
        text(
            "UPDATE notifications SET next_attempt_at = :lease WHERE id IN ("
            "SELECT id FROM notifications WHERE status = 'pending' AND next_attempt_at <= :now "
            f"ORDER BY id LIMIT :limit{lock}) RETURNING id"
        ),
        {"lease": lease_until, "now": now, "limit": limit},
    )
    return sorted(int(r[0]) for r in rows)


def notification_context(
    session: Session, notification_id: int
) -> tuple[Notification, Alert, AlertRule, Run, str] | None:
    """A notification with its alert, rule, run and project name (None: gone)."""
    row = session.execute(
        select(Notification, Alert, AlertRule, Run, Project.name)
        .join(Alert, Alert.id == Notification.alert_id)
        .join(AlertRule, AlertRule.id == Alert.rule_id)
        .join(Run, Run.key == Alert.run_key)
        .join(Project, Project.id == Run.project_id)
        .where(Notification.id == notification_id)
    ).first()
    return None if row is None else (row[0], row[1], row[2], row[3], row[4])


def record_attempt(
    session: Session,
    notification_id: int,
    status_code: int | None,
    error: str | None,
    duration_ms: float,
) -> Notification | None:
    """Log one delivery attempt; the notification, for the caller to update (None: gone)."""
    row = session.get(Notification, notification_id)
    if row is None:
        return None
    session.add(
        DeliveryAttempt(
            notification_id=notification_id,
            status_code=status_code,
            error=error,
            duration_ms=duration_ms,
        )
    )
    row.attempts += 1
    return row
