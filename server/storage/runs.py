"""Runs as storage sees them: a run's row lock for a batch, its segments and latest lineage,
its events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select, text, update
from sqlalchemy.orm import Session

from ..models import Event, JsonDoc, Metric, Segment, UtcDateTime


@dataclass(frozen=True)
class Lineage:
    """Which segment owns each step range in the run's latest history.

    After restarts from earlier checkpoints, segment k is visible from its start step
    up to (not including) the start of the next segment that began below it.
    """

    ranges: tuple[tuple[int, int | None, int | None], ...]  # (segment, lo, hi exclusive)


def lineage_of(segments: Sequence[tuple[int, int | None]]) -> Lineage:
    """Build the latest lineage from ``(segment, start_step)`` pairs.

    >>> lineage_of([(1, None), (2, 77096)]).ranges
    ((2, 77096, None), (1, None, 77096))
    """
    out: list[tuple[int, int | None, int | None]] = []
    upper: int | None = None
    for seg, start in sorted(segments, reverse=True):
        if upper is not None and start is not None and start >= upper:
            continue  # wholly superseded by a later restart from further back
        out.append((seg, start, upper))
        if start is None:
            break
        upper = start if upper is None else min(upper, start)
    return Lineage(tuple(out))


@dataclass(frozen=True)
class LockedRun:
    """What storing a batch needs of its run, read under the run's row lock."""

    key: int
    project_id: int
    name: str
    tags: list[str]
    segment: int
    """The run's current segment."""
    last_step: int | None
    """The current segment's last step before this batch."""
    rules: str | None
    """A fingerprint of the project's alert rules (None: it has none), which changes with
    any rule created, edited, enabled, disabled or deleted."""


_RULES_PG = (
    "(SELECT md5(string_agg(a.id || '@' || a.updated_at || '@' || a.enabled, ',' "
    "ORDER BY a.id)) FROM alert_rules a WHERE a.project_id = r.project_id)"
)


_RULES_SQLITE = (
    "(SELECT group_concat(a.id || '@' || a.updated_at || '@' || a.enabled, ',') FROM "
    "(SELECT id, updated_at, enabled FROM alert_rules WHERE project_id = r.project_id "
    "ORDER BY id) a)"
)


_LOCKED_TYPES = {"tags": JsonDoc}


def lock_run(
    session: Session,
    run_id: str,
    *,
    project_id: int | None = None,
    segment: int | None = None,
    last_step: int | None = None,
    now: datetime,
) -> LockedRun | None:
    """Take the run's row lock until the transaction ends, mark it seen at ``now`` and move
    its last step to ``last_step`` (when the batch is for the current segment, ``segment``
    None meaning that one); the run as the batches before this one left it. None when no run
    has that id (in ``project_id``'s project, when given).

    Batches of one run are thereby stored one at a time, and each sees what the one before
    it stored. On Postgres lock, update and read are one statement, which also brings the
    fingerprint of the project's alert rules. On SQLite a write takes the database's write
    lock, and the reads after it are then current.
    """
    conn = session.connection()
    params = {"id": run_id, "pid": project_id, "seg": segment, "last": last_step, "now": now}
    binds = (bindparam("now", type_=UtcDateTime()),)
    owned = "" if project_id is None else " AND project_id = :pid"
    if conn.dialect.name == "postgresql":
        row = conn.execute(
            text(
                "WITH old AS (SELECT key, segment, last_step FROM runs "
                f"WHERE id = :id{owned} FOR NO KEY UPDATE) "
                "UPDATE runs r SET last_seen = :now, last_step = CASE "
                "WHEN CAST(:last AS bigint) IS NOT NULL "
                "AND coalesce(CAST(:seg AS integer), old.segment) = old.segment "
                "THEN greatest(old.last_step, CAST(:last AS bigint)) ELSE old.last_step END "
                "FROM old WHERE r.key = old.key RETURNING r.key, r.project_id, r.name, "
                f"r.tags, old.segment, old.last_step, {_RULES_PG} AS rules"
            )
            .bindparams(*binds)
            .columns(**_LOCKED_TYPES),
            params,
        ).first()
        return None if row is None else LockedRun(*row)
    locked = conn.execute(
        text(f"UPDATE runs SET last_seen = :now WHERE id = :id{owned}").bindparams(*binds),
        params,
    )
    if not locked.rowcount:
        return None
    row = conn.execute(
        text(
            "SELECT r.key, r.project_id, r.name, r.tags, r.segment, r.last_step, "
            f"{_RULES_SQLITE} AS rules FROM runs r WHERE r.id = :id"
        ).columns(**_LOCKED_TYPES),
        {"id": run_id},
    ).one()
    run = LockedRun(*row)
    if last_step is not None and (segment is None or segment == run.segment):
        conn.execute(
            text(
                "UPDATE runs SET last_step = max(coalesce(last_step, :last), :last) WHERE key = :rk"
            ),
            {"rk": run.key, "last": last_step},
        )
    return run


def forget_latest(session: Session, run_key: int) -> None:
    """A new segment starts the run's "latest values" afresh."""
    session.execute(
        update(Metric).where(Metric.run_key == run_key).values(last_step=None, last_value=None)
    )


def segments_of(session: Session, run_key: int) -> list[tuple[int, int | None]]:
    rows = session.execute(
        select(Segment.segment, Segment.start_step)
        .where(Segment.run_key == run_key)
        .order_by(Segment.segment)
    )
    return [(seg, start) for seg, start in rows]


def events_of(session: Session, run_key: int) -> list[Event]:
    return list(
        session.scalars(
            select(Event).where(Event.run_key == run_key).order_by(Event.step, Event.id)
        )
    )


def event_count(session: Session, run_key: int) -> int:
    return int(
        session.connection()
        .execute(text("SELECT count(*) FROM events WHERE run_key = :rk"), {"rk": run_key})
        .scalar_one()
    )


def run_exists(session: Session, run_id: str) -> bool:
    return (
        session.connection()
        .execute(text("SELECT 1 FROM runs WHERE id = :id"), {"id": run_id})
        .first()
        is not None
    )
