"""The alert notifications outbox: leasing due notifications to a dispatcher."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session


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
