"""Runs as storage sees them: creating, finding and locking them, their segments and latest
lineage, their events."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import bindparam, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..models import Event, JsonDoc, Metric, Project, Run, Segment, UtcDateTime
from .sql import psycopg_of


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
    any rule created, edited, enabled, disabled or deleted, and with its metric aliases."""


# The project's metric aliases change what its rules watch: their revision is part of the
# fingerprint (NULL || text stays NULL, so a project without rules still reads as None).
_ALIASES = (
    "coalesce((SELECT '#' || m.revision FROM metric_aliases m "
    "WHERE m.project_id = r.project_id), '')"
)

_RULES_PG = (
    "((SELECT md5(string_agg(a.id || '@' || a.updated_at || '@' || a.enabled, ',' "
    f"ORDER BY a.id)) FROM alert_rules a WHERE a.project_id = r.project_id) || {_ALIASES})"
)


_RULES_SQLITE = (
    "((SELECT group_concat(a.id || '@' || a.updated_at || '@' || a.enabled, ',') FROM "
    "(SELECT id, updated_at, enabled FROM alert_rules WHERE project_id = r.project_id "
    f"ORDER BY id) a) || {_ALIASES})"
)


_LOCKED_TYPES = {"tags": JsonDoc}


def _lock_pg(owned: bool) -> str:
    """`lock_run`'s statement on Postgres, in psycopg's placeholders."""
    return (
        "WITH old AS (SELECT key, segment, last_step FROM runs "
        f"WHERE id = %(id)s{' AND project_id = %(pid)s' if owned else ''} FOR NO KEY UPDATE) "
        "UPDATE runs r SET last_seen = %(now)s, last_step = CASE "
        "WHEN CAST(%(last)s AS bigint) IS NOT NULL "
        "AND coalesce(CAST(%(seg)s AS integer), old.segment) = old.segment "
        "THEN greatest(old.last_step, CAST(%(last)s AS bigint)) ELSE old.last_step END "
        "FROM old WHERE r.key = old.key RETURNING r.key, r.project_id, r.name, "
        f"r.tags, old.segment, old.last_step, {_RULES_PG.replace('%', '%%')} AS rules"
    )


_LOCK_PG = {owned: _lock_pg(owned) for owned in (False, True)}


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
    if conn.dialect.name == "postgresql":
        statement = _LOCK_PG[project_id is not None]
        # Straight to psycopg: SQLAlchemy's result machinery took more CPU than the
        # statement itself. (Pipelined with the transaction's BEGIN it saves a round trip
        # but costs more CPU in psycopg than the round trip does.)
        with psycopg_of(conn, statement) as driver:
            got = driver.execute(statement, params).fetchone()
        if got is None:
            return None
        key, project, name, tags, seg, last, rules = got
        if isinstance(tags, str | bytes):
            tags = orjson.loads(tags)
        return LockedRun(key, project, name, tags, seg, last, rules)
    binds = (bindparam("now", type_=UtcDateTime()),)
    owned = "" if project_id is None else " AND project_id = :pid"
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


MAX_RUN_EVENTS = 10_000
"""Events a run may hold: each is drawn on every chart of the run."""


def event_count(session: Session, run_key: int) -> int:
    return int(
        session.connection()
        .execute(text("SELECT count(*) FROM events WHERE run_key = :rk"), {"rk": run_key})
        .scalar_one()
    )


def run_marks(session: Session, run_ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """What moves whenever a run logs anything, by run id, for those of ``run_ids`` that
    exist: its last step, segment and status, when a batch last came, how many events it
    has, and its note's MD5 (a note edited shows on the run's open pages)."""
    if not run_ids:
        return {}
    rows = session.connection().execute(
        text(
            "SELECT r.id, r.last_step, r.segment, r.status, r.last_seen, "
            "(SELECT count(*) FROM events e WHERE e.run_key = r.key), md5(r.notes) "
            "FROM runs r WHERE r.id IN :ids"
        ).bindparams(bindparam("ids", expanding=True)),
        {"ids": list(run_ids)},
    )
    return {row[0]: tuple(row[1:]) for row in rows}


def run_exists(session: Session, run_id: str) -> bool:
    return (
        session.connection()
        .execute(text("SELECT 1 FROM runs WHERE id = :id"), {"id": run_id})
        .first()
        is not None
    )


def run_for_update(session: Session, project_id: int, name: str) -> Run | None:
    """The project's run of that name, its row locked for the transaction (as locked, not
    as this session last saw it)."""
    return session.scalar(
        select(Run)
        .where(Run.project_id == project_id, Run.name == name)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def insert_run(
    session: Session,
    project_id: int,
    name: str,
    config: dict[str, Any],
    tags: list[str],
    start_step: int | None,
) -> Run | None:
    """A new run with its first segment; None when a concurrent create of the same name
    won (its savepoint is rolled back, the transaction goes on)."""
    run = Run(
        id=uuid.uuid4().hex,
        project_id=project_id,
        name=name,
        config=config,
        tags=tags,
        status="running",
        segment=1,
    )
    try:
        with session.begin_nested():
            session.add(run)
            session.flush()
            session.add(Segment(run_key=run.key, segment=1, start_step=start_step))
            session.flush()
    except IntegrityError:
        return None
    return run


def segment_start(session: Session, run_key: int, segment: int) -> int | None:
    """The step a segment started at (None: not given)."""
    return session.scalar(
        select(Segment.start_step).where(Segment.run_key == run_key, Segment.segment == segment)
    )


def open_segment(session: Session, run: Run, start_step: int | None) -> None:
    """The run's next segment, starting at ``start_step``; its latest values start afresh."""
    run.segment += 1
    session.add(Segment(run_key=run.key, segment=run.segment, start_step=start_step))
    run.last_step = None
    forget_latest(session, run.key)


def segments(session: Session, run_key: int) -> list[Segment]:
    """The run's segments, first to last."""
    return list(
        session.scalars(select(Segment).where(Segment.run_key == run_key).order_by(Segment.segment))
    )


def run_by_id(session: Session, run_id: str) -> tuple[Run, str] | None:
    """The run and its project's name, or None."""
    row = session.execute(
        select(Run, Project.name)
        .join(Project, Project.id == Run.project_id)
        .where(Run.id == run_id)
    ).first()
    return None if row is None else (row[0], row[1])


def run_owner(session: Session, run_id: str) -> int | None:
    """The id of the project a run belongs to (None: no such run)."""
    return session.scalar(select(Run.project_id).where(Run.id == run_id))


def runs_of_project(session: Session, project: str, limit: int) -> list[tuple[Run, str]]:
    """The project's runs with its name, most recently active first."""
    rows = session.execute(
        select(Run, Project.name)
        .join(Project, Project.id == Run.project_id)
        .where(Project.name == project)
        .order_by(Run.last_seen.desc(), Run.key.desc())
        .limit(limit)
    )
    return [(run, name) for run, name in rows]


def running_runs(session: Session, project_id: int) -> list[Run]:
    """The project's runs whose status is running."""
    return list(
        session.scalars(select(Run).where(Run.project_id == project_id, Run.status == "running"))
    )


def update_run(session: Session, run: Run, values: dict[str, object]) -> None:
    """Set columns of the run and read it back."""
    session.execute(update(Run).where(Run.key == run.key).values(**values))
    session.refresh(run)


def add_event(session: Session, event: Event) -> Event:
    """Store an event and give it its id."""
    session.add(event)
    session.flush()
    return event


def same_event(session: Session, event: Event) -> Event | None:
    """The stored event with the same segment, step, kind and text as ``event``, if any."""
    return session.scalars(
        select(Event)
        .where(
            Event.run_key == event.run_key,
            Event.step == event.step,
            Event.segment == event.segment,
            Event.kind == event.kind,
            Event.text == event.text,
        )
        .order_by(Event.id)
        .limit(1)
    ).first()


def run_keys(session: Session, project: str, run_ids: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(id, key, current segment)`` of those of ``run_ids`` that are the project's runs."""
    if not run_ids:
        return []
    rows = session.execute(
        select(Run.id, Run.key, Run.segment)
        .join(Project, Project.id == Run.project_id)
        .where(Project.name == project, Run.id.in_(list(run_ids)))
    )
    return [(run_id, int(key), int(seg)) for run_id, key, seg in rows]


def logged_names(session: Session, project: str, *, runs: int, limit: int) -> list[str]:
    """The metric names that the project's ``runs`` most recently active runs logged,
    sorted, at most ``limit`` of them (two statements: the metrics table may be sharded by
    run, apart from the runs)."""
    keys = list(
        session.scalars(
            select(Run.key)
            .join(Project, Project.id == Run.project_id)
            .where(Project.name == project)
            .order_by(Run.last_seen.desc(), Run.key.desc())
            .limit(runs)
        )
    )
    if not keys:
        return []
    return list(
        session.scalars(
            select(Metric.name)
            .where(Metric.run_key.in_(keys))
            .distinct()
            .order_by(Metric.name)
            .limit(limit)
        )
    )
