"""Retention: forget old runs, or keep only the summaries of their points.

A run is *old* when nothing has arrived for it for ``days`` days (its ``last_seen``). Two
modes:

- ``summaries``: drop the chunks' point data and keep their bucket summaries and the rollups.
  Charts of the run still show every spike and NaN at any zoom (each bucket's first, last,
  minimum and maximum are real points), at well under a byte a point; zooming below 64 points
  a bucket shows those summary points only.
- ``drop``: delete the run and everything of it (points, chunks, summaries, events, alert
  state and history).

Both work run by run, one transaction each, so an interrupted sweep is simply resumed by the
next one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session, sessionmaker

from ..models import UtcDateTime, utcnow
from .compaction import compact_run
from .policy import NO_CUT, Policy

log = logging.getLogger("normwatch.retention")

Mode = Literal["summaries", "drop"]
# No foreign key to runs (on Citus, alert states lose theirs): deleted by hand.
_TABLES_BY_RUN = ("blocks", "chunks", "rollups", "series", "alert_states")


@dataclass
class Swept:
    runs: int = 0
    chunks_thinned: int = 0


def old_runs(session: Session, older_than: datetime, mode: Mode) -> list[int]:
    """Runs last seen before ``older_than`` that the mode still has work on.

    Each run's series rows are looked at on their own (``run_key = …``), so that on a
    cluster sharded by run every statement stays on one shard.
    """
    conn = session.connection()
    quiet = [
        int(r[0])
        for r in conn.execute(
            text("SELECT key FROM runs WHERE last_seen < :t ORDER BY key").bindparams(
                bindparam("t", type_=UtcDateTime())
            ),
            {"t": older_than},
        )
    ]
    if mode == "drop":
        return quiet
    pending = text(
        "SELECT EXISTS (SELECT 1 FROM chunks WHERE run_key = :k AND data IS NOT NULL) "
        "OR EXISTS (SELECT 1 FROM blocks WHERE run_key = :k)"
    )
    return [k for k in quiet if conn.execute(pending, {"k": k}).scalar_one()]


def sweep(
    sessions: sessionmaker[Session],
    days: float,
    mode: Mode,
    policy: Policy | None = None,
    now: datetime | None = None,
) -> Swept:
    """Apply retention to every run quiet for ``days`` days."""
    if days <= 0:
        raise ValueError(f"retention days must be positive, got {days}")
    older_than = (now or utcnow()) - timedelta(days=days)
    with sessions() as session:
        keys = old_runs(session, older_than, mode)
    swept = Swept()
    for key in keys:
        if mode == "drop":
            with sessions() as session, session.begin():
                conn = session.connection()
                for table in _TABLES_BY_RUN:
                    conn.execute(text(f"DELETE FROM {table} WHERE run_key = :k"), {"k": key})
                conn.execute(text("DELETE FROM runs WHERE key = :k"), {"k": key})
        else:
            # Points still hot (a run that went quiet before its last compaction) go into
            # chunks first, so that they are summarised rather than kept whole or lost.
            with sessions() as session:
                segments = session.connection().execute(
                    text("SELECT DISTINCT segment FROM blocks WHERE run_key = :k"), {"k": key}
                )
                hot_segments = sorted(int(r[0]) for r in segments)
            for seg in hot_segments:
                compact_run(sessions, policy or Policy(), key, seg, NO_CUT)
            with sessions() as session, session.begin():
                thinned = session.connection().execute(
                    text("UPDATE chunks SET data = NULL WHERE run_key = :k AND data IS NOT NULL"),
                    {"k": key},
                )
                swept.chunks_thinned += thinned.rowcount
        swept.runs += 1
        log.info("retention (%s): run %s done", mode, key)
    return swept
