"""A run's data version: what changes whenever a read of its points could give another answer.

A batch is stored under the run's row lock, which moves its ``last_seen`` (and its last
step); each transaction of a compaction moves the watermark, chunk count or point count of
the series it compacts (a late point for a step a chunk never had shows from then on). A
restart opens a segment; an event comes with an id of its own. Read in the same snapshot as
the points it stands for (`normwatch.server.db.begin_snapshot`), the version names them: an
answer computed from them may be kept under it (`..services.kept`). Retention's
``summaries`` mode, which drops the point data of runs quiet for days, moves none of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from .sql import fetch

__all__ = ["DataVersion", "data_version"]


@dataclass(frozen=True)
class DataVersion:
    run_key: int
    run_id: str
    """The run's public id, random: a key reused by another run (SQLite may, after a
    rollback) makes another version."""
    segment: int
    last_step: int | None
    last_seen: datetime
    compacted: tuple[int, int, int, int, int | None]
    """Over the run's series: how many, their chunks, points and tails, the last watermark."""
    events: tuple[int, int | None]
    """How many events the run has, and the newest one's id."""


def data_version(session: Session, run_key: int) -> DataVersion | None:
    """The run's `DataVersion`, in one statement; None when no run has that key."""
    rows = fetch(
        session.connection(),
        "SELECT r.id, r.segment, r.last_step, r.last_seen, s.n, s.chunks, s.points, s.tails, "
        "s.through, e.n, e.newest FROM runs r, (SELECT count(*) AS n, "
        "coalesce(sum(chunks), 0) AS chunks, coalesce(sum(points), 0) AS points, "
        "coalesce(sum(tail_count), 0) AS tails, max(through) AS through FROM series "
        "WHERE run_key = :rk) s, (SELECT count(*) AS n, max(id) AS newest FROM events "
        "WHERE run_key = :rk) e WHERE r.key = :rk",
        {"rk": run_key},
    )
    if not rows:
        return None
    run_id, segment, last_step, last_seen, n, chunks, points, tails, through, events, newest = rows[
        0
    ]
    return DataVersion(
        run_key,
        str(run_id),
        int(segment),
        _int(last_step),
        _moment(last_seen),
        (int(n), int(chunks), int(points), int(tails), _int(through)),
        (int(events), _int(newest)),
    )


def _int(value: int | None) -> int | None:
    return None if value is None else int(value)


def _moment(value: object) -> datetime:
    """A timestamp column as the driver gives it (SQLite's: ISO text)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
