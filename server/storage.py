"""All SQL lives here. The hot paths (points in, series out) bypass the ORM.

A batch goes in as one hot block a metric (:mod:`.blocks`): on Postgres one binary
``COPY`` per batch (:mod:`.pgcopy`), on SQLite one ``executemany``. Batches of one run are
stored one after the other under the run's row lock; a batch whose steps all lie past the
run's last step (a live trainer's) goes straight in, and any other first drops the points
that its series' hot blocks hold already, so a re-sent batch stores nothing twice. A
point re-sent after its step was compacted is merged at the next compaction, the stored
value winning (:mod:`.compaction`), and reads prefer the compacted value meanwhile.
NaN in a value column is stored as NULL, since SQLite cannot hold a NaN; inside the
blocks' blobs it is kept bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg
from sqlalchemy import Connection, bindparam, func, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from . import blocks, pgcopy
from .batch import BatchError, MetricBatch
from .chunks import Points
from .metric_ids import MetricIdCache
from .models import Block, Event, JsonDoc, Metric, Segment, UtcDateTime, utcnow

T = TypeVar("T")


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


def resolve_metric_ids(
    session: Session,
    run_key: int,
    names: Sequence[str],
    *,
    known: MetricIdCache | None = None,
    max_run_metrics: int | None = None,
) -> dict[str, int]:
    """Ids for ``names`` in the run, creating the missing ones.

    Names that ``known`` holds cost no query. The cache is only read here: ids resolved
    in this transaction enter it once the caller has committed (`MetricIdCache.remember`).
    Missing names are created in sorted order, so that concurrent first batches of one
    run insert them in the same order and wait for one another instead of deadlocking.
    A batch that would take the run past ``max_run_metrics`` names raises
    `TooManyMetrics` and creates none (batches racing to add names may each pass it).
    """
    if not names:
        return {}
    ids, missing = known.lookup(run_key, names) if known is not None else ({}, list(names))
    if not missing:
        return ids
    missing.sort()
    conn = session.connection()
    postgres = conn.dialect.name == "postgresql"
    if max_run_metrics is not None:
        ids.update(_metric_ids(conn, run_key, missing))
        missing = [name for name in missing if name not in ids]
        if not missing:
            return ids
        have = conn.execute(
            text("SELECT count(*) FROM metrics WHERE run_key = :rk"), {"rk": run_key}
        ).scalar_one()
        if have + len(missing) > max_run_metrics:
            raise TooManyMetrics(
                f"metrics: the run has {have} metrics and this batch adds {len(missing)}; "
                f"a run may have at most {max_run_metrics} (NORMWATCH_MAX_RUN_METRICS)"
            )
    if postgres:
        conn.execute(
            text(
                "INSERT INTO metrics (run_key, name) SELECT :rk, unnest(CAST(:names AS text[])) "
                "ON CONFLICT (run_key, name) DO NOTHING"
            ),
            {"rk": run_key, "names": missing},
        )
    else:
        conn.execute(
            text("INSERT OR IGNORE INTO metrics (run_key, name) VALUES (:rk, :name)"),
            [{"rk": run_key, "name": n} for n in missing],
        )
    ids.update(_metric_ids(conn, run_key, missing))
    return ids


class TooManyMetrics(BatchError):
    """A batch would take its run past the configured number of metric names."""


_SQLITE_NAMES_A_STATEMENT = 10_000
"""Names looked up per statement on SQLite, well below its 32,766 bound parameters."""


def _metric_ids(conn: Connection, run_key: int, names: list[str]) -> list[tuple[str, int]]:
    """``(name, id)`` of the given names that the run has."""
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            text("SELECT name, id FROM metrics WHERE run_key = :rk AND name = ANY(:names)"),
            {"rk": run_key, "names": names},
        )
        return [(name, mid) for name, mid in rows]
    found: list[tuple[str, int]] = []
    for i in range(0, len(names), _SQLITE_NAMES_A_STATEMENT):
        part = names[i : i + _SQLITE_NAMES_A_STATEMENT]
        rows = conn.execute(
            select(Metric.name, Metric.id).where(Metric.run_key == run_key, Metric.name.in_(part))
        )
        found.extend((name, mid) for name, mid in rows)
    return found


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


def write_points(
    session: Session,
    run_key: int,
    segment: int,
    batch: MetricBatch,
    metric_ids: dict[str, int],
    *,
    fresh: bool = False,
) -> int:
    """Store a batch's logged values as hot blocks; returns how many points it carried.

    ``fresh`` says that no stored point of the segment can share a step with the batch
    (every step lies past the segment's last one, read under `lock_run`): the batch then
    goes in without looking. Otherwise the points its series' hot blocks hold already are
    dropped first, in one query.
    """
    if batch.point_count == 0:
        return 0
    keep = None if fresh else _unstored(session, run_key, segment, batch, metric_ids)
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        if keep is None and batch.all_logged:
            ids, steps, values, shared = blocks.full_batch(batch, metric_ids)
            payload = pgcopy.encode_full_blocks(run_key, segment, ids, steps, values, shared)
        else:
            payload = pgcopy.encode_blocks(
                run_key, segment, blocks.of_batch(batch, metric_ids, keep)
            )
        with psycopg_of(conn, pgcopy.COPY_BLOCKS) as driver, driver.cursor() as cursor:
            with cursor.copy(pgcopy.COPY_BLOCKS) as copy:
                copy.write(payload)
        return batch.point_count
    rows = blocks.of_batch(batch, metric_ids, keep)
    if rows:
        conn.exec_driver_sql(
            "INSERT INTO blocks (run_key, metric_id, segment, first_step, last_step, count, "
            "last_value, steps, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    run_key,
                    b.metric_id,
                    segment,
                    b.first_step,
                    b.last_step,
                    b.count,
                    None if b.last_value != b.last_value else b.last_value,
                    b.steps,
                    b.data,
                )
                for b in rows
            ],
        )
    return batch.point_count


_IDS_PER_QUERY = 512


def _unstored(
    session: Session, run_key: int, segment: int, batch: MetricBatch, metric_ids: dict[str, int]
) -> npt.NDArray[np.bool_]:
    """Which of the batch's points (``batch.logged``'s shape) no hot block holds yet.

    One query over the batch's range of metric ids: a range of the key's second column
    bounds the index scan whatever the planner knows of the table (blocks of other metrics
    in the range are skipped here).
    """
    rows_of = {metric_ids[name]: i for i, name in enumerate(batch.names) if name in metric_ids}
    keep = np.ones(batch.logged.shape, dtype=np.bool_)
    if not rows_of:
        return keep
    taken = (
        session.connection()
        .execute(
            text(
                "SELECT metric_id, first_step, last_step, count, steps, data FROM blocks "
                "WHERE run_key = :rk AND metric_id BETWEEN :lo_id AND :hi_id AND segment = :seg "
                "AND last_step >= :lo AND first_step <= :hi"
            ),
            {
                "rk": run_key,
                "seg": segment,
                "lo_id": min(rows_of),
                "hi_id": max(rows_of),
                "lo": int(batch.steps.min()),
                "hi": int(batch.steps.max()),
            },
        )
        .all()
    )
    found: dict[int, list[tuple[int, int, int, bytes | None, bytes]]] = {}
    for mid, first, last, count, steps, data in taken:
        if int(mid) in rows_of:
            found.setdefault(int(mid), []).append((first, last, count, steps, data))
    for mid, stored in found.items():
        keep[rows_of[mid]] = ~np.isin(batch.steps, blocks.decode_many(stored).steps)
    return keep


@contextmanager
def psycopg_of(conn: Connection, statement: str) -> Iterator[psycopg.Connection[Any]]:
    """The psycopg connection under ``conn``, for what SQLAlchemy cannot send (``COPY``,
    a statement that must not be prepared).

    Its errors come out as SQLAlchemy's would (``OperationalError`` for a lost connection,
    which is then invalidated), so callers and the app's error handlers see one kind.
    """
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    try:
        yield driver
    except psycopg.Error as exc:
        lost = driver.broken or driver.closed
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            statement, None, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc


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


def read_points(
    session: Session,
    run_key: int,
    metric_id: int,
    lineage: Lineage,
    start: int | None,
    end: int | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """All hot (uncompacted) (step, value) of one metric in the lineage, ascending by step."""
    parts: list[Points] = []
    conn = session.connection()
    for seg, lo, hi in lineage.ranges:
        a = max(x for x in (start, lo, _I64_MIN) if x is not None)
        b = min(x for x in (end, None if hi is None else hi - 1, _I64_MAX) if x is not None)
        if a > b:
            continue
        rows = conn.execute(
            text(
                "SELECT first_step, last_step, count, steps, data FROM blocks WHERE run_key = :rk "
                "AND metric_id = :mid AND segment = :seg AND first_step <= :b AND last_step >= :a"
            ),
            {"rk": run_key, "mid": metric_id, "seg": seg, "a": a, "b": b},
        ).all()
        parts.append(clip(blocks.decode_many([tuple(r) for r in rows]), a, b))
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    steps = np.concatenate([p.steps for p in parts])
    values = np.concatenate([p.values for p in parts])
    if len(parts) > 1:
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    return steps, values


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def clip(points: Points, a: int, b: int) -> Points:
    """The points with ``a <= step <= b``."""
    if not len(points) or (points.steps[0] >= a and points.steps[-1] <= b):
        return points
    lo, hi = np.searchsorted(points.steps, [a, b + 1])
    return points.take(slice(int(lo), int(hi)))


def latest_values(session: Session, run_key: int) -> list[tuple[str, int | None, float | None]]:
    """Each metric's name, last step and value in the run's current segment, by name.

    A metric's row holds what compaction has taken in; its newest hot block, anything
    newer. The value is NaN where one was logged as NaN, None where nothing was. The hot
    blocks are read in a statement of their own that names one run (a probe a metric down
    the key), so that it stays on one shard where ``blocks`` is distributed.
    """
    conn = session.connection()
    segment = conn.execute(
        text("SELECT segment FROM runs WHERE key = :rk"), {"rk": run_key}
    ).scalar_one_or_none()
    metrics = conn.execute(
        text(
            "SELECT id, name, last_step, last_value FROM metrics WHERE run_key = :rk ORDER BY name"
        ),
        {"rk": run_key},
    ).all()
    newest: dict[int, tuple[int, float | None]] = {}
    probe = (
        "(SELECT b.{col} FROM blocks b WHERE b.run_key = :rk AND b.metric_id = u.id "
        "AND b.segment = :seg ORDER BY b.first_step DESC LIMIT 1)"
    )
    ids = [int(m[0]) for m in metrics]
    for lo in range(0, len(ids) if segment is not None else 0, _IDS_PER_QUERY):
        part = ids[lo : lo + _IDS_PER_QUERY]
        values, params = values_table(("BIGINT",), [(m,) for m in part])
        params.update({"rk": run_key, "seg": segment})
        rows = conn.execute(
            text(
                f"WITH u(id) AS ({values}) SELECT u.id, "
                f"{probe.format(col='last_step')}, {probe.format(col='last_value')} FROM u"
            ),
            params,
        )
        for mid, step, value in rows:
            if step is not None:
                newest[int(mid)] = (int(step), value)
    out: list[tuple[str, int | None, float | None]] = []
    for mid, name, step, value in metrics:
        hot = newest.get(int(mid))
        if hot is not None and (step is None or hot[0] >= step):
            step, value = hot
        nan = math.nan if step is not None and value is None else value
        out.append((name, None if step is None else int(step), nan))
    return out


def padded(items: Sequence[T]) -> Sequence[T]:
    """``items`` with the last repeated up to a power of two (at least one item).

    For statements written for a number of items (a ``VALUES`` list, an ``OR`` of keys):
    SQLAlchemy caches a compiled statement by its text, psycopg prepares a text it has seen
    a few times, and one text for every count filled those caches with hundreds of large
    statements (a compactor grew by 100 MB in minutes, nearly all of it cached SQL). Padded,
    a statement has at most a dozen shapes. Only for statements that a repeated item leaves
    unchanged (a condition OR'ed twice, a row of ``UPDATE … FROM`` that matches twice).
    """
    if not items:
        raise ValueError("nothing to pad")
    size = 1 << (len(items) - 1).bit_length()
    return items if size == len(items) else [*items, *[items[-1]] * (size - len(items))]


def values_table(
    types: Sequence[str], rows: Sequence[Sequence[object]]
) -> tuple[str, dict[str, object]]:
    """``VALUES (...), ...`` of ``rows`` as bound parameters, each column cast to its SQL
    type (what both Postgres and SQLite take as a table in a ``WITH`` clause), and the
    parameters. The rows are `padded`: the table may hold the last row more than once."""
    params: dict[str, object] = {}
    tuples = []
    for i, row in enumerate(padded(rows)):
        cells = []
        for j, (kind, value) in enumerate(zip(types, row, strict=True)):
            params[f"v{i}_{j}"] = value
            cells.append(f"CAST(:v{i}_{j} AS {kind})")
        tuples.append("(" + ", ".join(cells) + ")")
    return "VALUES " + ", ".join(tuples), params


def series_keys(
    session: Session, run_key: int, names: Sequence[str]
) -> tuple[Lineage, dict[str, int]]:
    """The run's latest lineage and the ids of ``names`` it has, in one round trip: what
    every chart read needs before it can look at a point."""
    rows = session.connection().execute(
        text(
            "SELECT 0, segment, start_step, NULL FROM segments WHERE run_key = :rk "
            "UNION ALL SELECT 1, id, NULL, name FROM metrics WHERE run_key = :rk "
            "AND name IN :names"
        ).bindparams(bindparam("names", expanding=True)),
        {"rk": run_key, "names": list(names)},
    )
    segments: list[tuple[int, int | None]] = []
    ids: dict[str, int] = {}
    for kind, key, start, name in rows:
        if kind == 0:
            segments.append((int(key), None if start is None else int(start)))
        else:
            ids[name] = int(key)
    return lineage_of(segments), ids


def metric_ids_by_name(session: Session, run_key: int, names: Sequence[str]) -> dict[str, int]:
    rows = session.execute(
        select(Metric.name, Metric.id).where(Metric.run_key == run_key, Metric.name.in_(names))
    )
    return {name: mid for name, mid in rows}


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


def point_count(session: Session, run_key: int) -> int:
    """How many of the run's points are hot (not compacted yet)."""
    return int(session.scalar(select(func.sum(Block.count)).where(Block.run_key == run_key)) or 0)


def now() -> datetime:
    return utcnow()


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
