"""Which runs to compact and when: due runs, their leases, a pass over them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, bindparam, or_, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from ..models import Compaction, Run, UtcDateTime, utcnow
from .compaction import compact_run, log
from .policy import NO_CUT, PassReport, Policy


@dataclass(frozen=True)
class _Due:
    run_key: int
    segment: int
    cut: int
    old_segments: bool
    backlog: bool = False
    """Due because points piled up (a chunk's worth, or an old segment), not by its clock."""


def due_runs(session: Session, policy: Policy, now: datetime) -> list[_Due]:
    """Runs with hot points that the policy says should be compacted now."""
    c = Compaction
    rows = session.execute(
        select(
            Run.key,
            Run.segment,
            Run.last_step,
            Run.last_seen,
            c.run_key,
            c.segment,
            c.through,
            c.compacted_at,
            c.lease_until,
        )
        .outerjoin(c, c.run_key == Run.key)
        .where(
            Run.last_step.is_not(None),
            or_(
                c.run_key.is_(None),
                c.segment != Run.segment,
                c.through.is_(None),
                c.through < Run.last_step,
                c.compacted_at < Run.last_seen,
            ),
        )
    ).all()
    due: list[_Due] = []
    fresh: list[int] = []
    for key, segment, last_step, last_seen, c_key, c_segment, through, at, lease in rows:
        if last_step is None or (lease is not None and lease > now):
            continue
        if c_key is None:
            fresh.append(key)
            at = None
        idle = (now - last_seen).total_seconds() >= policy.idle_s
        aged = at is not None and _crossed_slot(key, at, now, policy.max_age_s)
        far = last_step - (through if through is not None else -1) >= policy.chunk_points
        old = c_segment is not None and c_segment != segment
        if idle or aged or far or old:
            due.append(_Due(key, segment, int(last_step), old, backlog=far or old))
    if fresh:
        # First sight of a run starts its age clock; a run that is due is compacted now.
        _ensure_rows(session.connection(), fresh, now)
    return due


_GOLDEN = 0.6180339887498949


def _crossed_slot(run_key: int, since: datetime, now: datetime, period_s: float) -> bool:
    """Whether the run is due by age: one of its slot boundaries lies in ``(since, now]``.

    Each run has its own boundaries, ``period_s`` apart and offset by a fraction of the
    period that its key picks (the golden-ratio sequence spreads consecutive keys evenly).
    A run thus waits at most a period between compactions, and runs that started together,
    or were compacted together (a restart, an outage), come due one after another over the
    next period instead of all at once, then keep a period apart: the compactor's work, and
    the CPU it takes from ingest and chart reads, stays even instead of arriving in bursts.
    """
    offset = ((run_key * _GOLDEN) % 1.0) * period_s
    return (now.timestamp() - offset) // period_s > (since.timestamp() - offset) // period_s


_WHEN = (bindparam("now", type_=UtcDateTime()), bindparam("until", type_=UtcDateTime()))


def _ensure_rows(conn: Connection, run_keys: Sequence[int], now: datetime) -> None:
    conn.execute(
        text(
            "INSERT INTO compactions (run_key, segment, through, compacted_at, lease_until) "
            "SELECT key, segment, NULL, :now, NULL FROM runs WHERE key = :rk "
            "ON CONFLICT (run_key) DO NOTHING"
        ).bindparams(_WHEN[0]),
        [{"rk": k, "now": now} for k in run_keys],
    )


def claim(session: Session, run_key: int, now: datetime, lease_s: float) -> bool:
    """Lease a run to this worker; False when another holds an unexpired lease."""
    conn = session.connection()
    _ensure_rows(conn, [run_key], now)
    claimed = conn.execute(
        text(
            "UPDATE compactions SET lease_until = :until WHERE run_key = :rk "
            "AND (lease_until IS NULL OR lease_until <= :now)"
        ).bindparams(*_WHEN),
        {"rk": run_key, "now": now, "until": now + timedelta(seconds=lease_s)},
    )
    return bool(claimed.rowcount)


def compact_pass(
    sessions: sessionmaker[Session],
    policy: Policy,
    now: datetime | None = None,
    *,
    pause: Callable[[float], bool] | None = None,
) -> PassReport:
    """Compact every due run once. Never raises: a failing run is logged and retried later.

    ``pause(seconds)``, when given, is called after each run that was due by its clock
    (not by a backlog) and before the next one, with the seconds that run took, and says
    whether to go on: the background compactor spreads routine work out with it.
    """
    t0 = time.perf_counter()
    report = PassReport()
    now = now or utcnow()
    with sessions() as session, session.begin():
        due = due_runs(session, policy, now)
    for i, item in enumerate(due):
        started = time.perf_counter()
        worked = _compact_due(sessions, policy, item, now, report)
        if pause is not None and worked and not item.backlog and i + 1 < len(due):
            if not pause(time.perf_counter() - started):
                break
    report.seconds = time.perf_counter() - t0
    return report


def _compact_due(
    sessions: sessionmaker[Session], policy: Policy, item: _Due, now: datetime, report: PassReport
) -> bool:
    """Compact one due run, if this worker gets its lease; whether it did. Never raises."""
    try:
        with sessions() as session, session.begin():
            if not claim(session, item.run_key, now, policy.lease_s):
                return False
        report.runs += 1
        compact_run(sessions, policy, item.run_key, item.segment, item.cut, report)
        if item.old_segments:
            for seg in _older_hot_segments(sessions, item.run_key, item.segment):
                compact_run(sessions, policy, item.run_key, seg, NO_CUT, report)
        with sessions() as session, session.begin():
            session.execute(
                update(Compaction)
                .where(Compaction.run_key == item.run_key)
                .values(
                    segment=item.segment,
                    through=item.cut,
                    compacted_at=utcnow(),
                    lease_until=None,
                )
            )
    except Exception:
        report.errors += 1
        log.exception("compaction of run %s failed; it will be retried", item.run_key)
        return False
    return True


def compact_everything(sessions: sessionmaker[Session], policy: Policy) -> PassReport:
    """Compact every hot point of every run now, whatever the policy's clocks say."""
    report = PassReport()
    with sessions() as session:
        rows = session.connection().execute(text("SELECT key, segment FROM runs")).all()
    for key, segment in rows:
        for seg in range(1, int(segment) + 1):
            compact_run(sessions, policy, int(key), seg, NO_CUT, report)
        report.runs += 1
    return report


def _older_hot_segments(sessions: sessionmaker[Session], run_key: int, segment: int) -> list[int]:
    with sessions() as session:
        rows = session.connection().execute(
            text("SELECT DISTINCT segment FROM blocks WHERE run_key = :rk AND segment < :seg"),
            {"rk": run_key, "seg": segment},
        )
        return sorted(int(r[0]) for r in rows)
