"""All SQL lives here. The hot paths (points in, series out) bypass the ORM.

Points go in on Postgres as one binary ``COPY`` per batch, built by NumPy
(:mod:`.pgcopy`); a batch that overlaps stored points goes instead as one array insert
(``unnest`` of typed arrays, ``ON CONFLICT DO NOTHING``), so a re-sent batch stores
nothing twice. SQLite takes one ``executemany``. NaN is stored as NULL on both, since
SQLite cannot hold a NaN and "not logged" is never stored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy import Connection, func, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from . import pgcopy
from .batch import MetricBatch
from .metric_ids import MetricIdCache
from .models import Event, Metric, Point, Run, Segment, utcnow


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
) -> dict[str, int]:
    """Ids for ``names`` in the run, creating the missing ones.

    Names that ``known`` holds cost no query. The cache is only read here: ids resolved
    in this transaction enter it once the caller has committed (`MetricIdCache.remember`).
    Missing names are created in sorted order, so that concurrent first batches of one
    run insert them in the same order and wait for one another instead of deadlocking.
    """
    if not names:
        return {}
    ids, missing = known.lookup(run_key, names) if known is not None else ({}, list(names))
    if not missing:
        return ids
    missing.sort()
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.execute(
            text(
                "INSERT INTO metrics (run_key, name) SELECT :rk, unnest(CAST(:names AS text[])) "
                "ON CONFLICT (run_key, name) DO NOTHING"
            ),
            {"rk": run_key, "names": missing},
        )
        rows = conn.execute(
            text("SELECT name, id FROM metrics WHERE run_key = :rk AND name = ANY(:names)"),
            {"rk": run_key, "names": missing},
        )
    else:
        conn.execute(
            text("INSERT OR IGNORE INTO metrics (run_key, name) VALUES (:rk, :name)"),
            [{"rk": run_key, "name": n} for n in missing],
        )
        rows = conn.execute(
            select(Metric.name, Metric.id).where(
                Metric.run_key == run_key, Metric.name.in_(missing)
            )
        )
    ids.update((name, mid) for name, mid in rows)
    return ids


def write_points(
    session: Session, run_key: int, segment: int, batch: MetricBatch, metric_ids: dict[str, int]
) -> int:
    """Store a batch's logged values; returns how many points it carried.

    Rows go in ordered by (metric id, step): concurrent batches of one run that overlap
    then meet on their first common key, and the later one waits for the earlier instead
    of the two deadlocking. On Postgres they go as one binary ``COPY`` inside a savepoint;
    if any of them is stored already (a re-sent or overlapping batch), the savepoint is
    rolled back and the batch goes again as ``INSERT ... ON CONFLICT DO NOTHING``, which
    stores only the new ones.
    """
    mids, steps, values = _point_rows(batch, metric_ids)
    if len(steps) == 0:
        return 0
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        if not _copy_points(conn, pgcopy.encode_points(run_key, segment, mids, steps, values)):
            _insert_points_pg(conn, run_key, segment, mids, steps, values)
    else:
        count = len(steps)
        conn.exec_driver_sql(
            "INSERT OR IGNORE INTO points (run_key, metric_id, segment, step, value) "
            "VALUES (?, ?, ?, ?, ?)",
            list(
                zip(
                    repeat(run_key, count),
                    mids.tolist(),
                    repeat(segment, count),
                    steps.tolist(),
                    _nan_to_none(values),
                    strict=True,
                )
            ),
        )
    return len(steps)


def _point_rows(
    batch: MetricBatch, metric_ids: dict[str, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The batch's logged points as (metric id, step, value) arrays, by metric id then step."""
    values, logged, names = batch.values, batch.logged, batch.names
    if not batch.all_logged:
        present = logged.any(axis=1)
        if not present.all():
            values, logged = values[present], logged[present]
            names = [names[i] for i in np.flatnonzero(present).tolist()]
    ids = np.fromiter((metric_ids[n] for n in names), dtype=np.int64, count=len(names))
    by_id = np.argsort(ids, kind="stable")
    by_step = np.argsort(batch.steps, kind="stable")
    ids, steps = ids[by_id], batch.steps[by_step]
    values = values[by_id][:, by_step]
    if batch.all_logged:
        return np.repeat(ids, len(steps)), np.tile(steps, len(ids)), values.ravel()
    logged = logged[by_id][:, by_step]
    rows, cols = np.nonzero(logged)
    return ids[rows], steps[cols], values[rows, cols]


def _copy_points(conn: Connection, payload: bytes) -> bool:
    """``COPY`` a binary stream into ``points`` in a savepoint of the caller's transaction.

    Returns False, with nothing stored and the transaction usable, when a row's key is
    stored already.
    """
    with psycopg_of(conn, pgcopy.COPY_POINTS) as driver, driver.cursor() as cursor:
        cursor.execute("SAVEPOINT normwatch_copy_points")
        try:
            with cursor.copy(pgcopy.COPY_POINTS) as copy:
                copy.write(payload)
        except psycopg.errors.UniqueViolation:
            cursor.execute("ROLLBACK TO SAVEPOINT normwatch_copy_points")
            return False
        cursor.execute("RELEASE SAVEPOINT normwatch_copy_points")
    return True


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


def _insert_points_pg(
    conn: Connection,
    run_key: int,
    segment: int,
    mids: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
) -> None:
    """The slow path of a batch that overlaps stored points: only the new ones are stored."""
    statement = (
        "INSERT INTO points (run_key, metric_id, segment, step, value) "
        "SELECT %(rk)s, m, %(seg)s, s, v FROM unnest(%(mids)s, %(steps)s, %(vals)s) AS t(m, s, v) "
        "ON CONFLICT DO NOTHING"
    )
    params = {
        "rk": run_key,
        "seg": segment,
        "mids": _pg_array(mids),
        "steps": _pg_array(steps),
        "vals": _pg_array(values),
    }
    with psycopg_of(conn, statement) as driver, _array_cursor(driver) as cursor:
        cursor.execute(statement, params)


class _Int8Array(bytes):
    """A ``bigint[]`` parameter already in Postgres' binary array format."""


class _Float8Array(bytes):
    """A ``float8[]`` parameter already in Postgres' binary array format."""


class _Int8ArrayDumper(Dumper):
    format = Format.BINARY
    oid = pgcopy.INT8_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


class _Float8ArrayDumper(_Int8ArrayDumper):
    oid = pgcopy.FLOAT8_ARRAY_OID


def _pg_array(values: npt.NDArray[np.int64] | npt.NDArray[np.float64]) -> bytes:
    """An array parameter (NaN as NULL) for a cursor from `_array_cursor`: psycopg adapts
    a list element by element in Python, hundreds of times slower for thousands of them."""
    wrap = _Int8Array if values.dtype.kind == "i" else _Float8Array
    return wrap(pgcopy.encode_array(values))


def _array_cursor(driver: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """A cursor that sends `_pg_array` parameters as they are."""
    cursor = driver.cursor()
    cursor.adapters.register_dumper(_Int8Array, _Int8ArrayDumper)
    cursor.adapters.register_dumper(_Float8Array, _Float8ArrayDumper)
    return cursor


def _nan_to_none(values: npt.NDArray[np.float64]) -> list[float | None]:
    """Values as Python floats, NaN as None (stored as NULL)."""
    out: list[float | None] = values.tolist()
    if np.isnan(values).any():
        out = [None if v != v else v for v in out]
    return out


def update_latest(
    session: Session, run_key: int, batch: MetricBatch, metric_ids: dict[str, int]
) -> int | None:
    """Move each metric's and the run's last step forward; returns the batch's last step.

    A metric's row only moves forward: a late batch of earlier steps leaves it alone. On
    Postgres it is one statement for the whole batch, after taking the run's row lock:
    concurrent batches of one run then update its metric rows one after the other, and
    cannot deadlock on them whatever order the plan visits them in.
    """
    if len(batch.steps) == 0:
        return None
    ids, steps, values = _latest_rows(batch, metric_ids)
    conn = session.connection()
    if len(ids) > 0 and conn.dialect.name == "postgresql":
        params = {
            "rk": run_key,
            "ids": _pg_array(ids),
            "steps": _pg_array(steps),
            "vals": _pg_array(values),
        }
        with psycopg_of(conn, _UPDATE_LATEST) as driver, _array_cursor(driver) as cursor:
            cursor.execute("SELECT 1 FROM runs WHERE key = %(rk)s FOR NO KEY UPDATE", params)
            # Planned with the real arrays every time: a generic plan guesses a few rows
            # where there are thousands, and may rescan the unnest once per metric.
            cursor.execute(_UPDATE_LATEST, params, prepare=False)
    elif len(ids) > 0:
        conn.exec_driver_sql(
            "UPDATE metrics SET last_step = ?, last_value = ? "
            "WHERE id = ? AND (last_step IS NULL OR last_step <= ?)",
            [
                (step, value, mid, step)
                for mid, step, value in zip(
                    ids.tolist(), steps.tolist(), _nan_to_none(values), strict=True
                )
            ],
        )
    return int(batch.steps.max())


_UPDATE_LATEST = (
    "UPDATE metrics AS m SET last_step = u.step, last_value = u.value "
    "FROM unnest(%(ids)s, %(steps)s, %(vals)s) AS u(id, step, value) "
    "WHERE m.id = ANY(%(ids)s) AND m.id = u.id "
    "AND (m.last_step IS NULL OR m.last_step <= u.step)"
)


def _latest_rows(
    batch: MetricBatch, metric_ids: dict[str, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each logged metric's id, last logged step and its value, in id order."""
    order = np.argsort(batch.steps, kind="stable")
    rows = np.arange(len(batch.names))
    if batch.all_logged:
        last = np.full(len(rows), order[-1])
    else:
        logged = batch.logged[:, order]
        # The last True of each row is the first True of the row reversed.
        last = order[len(order) - 1 - np.argmax(logged[:, ::-1], axis=1)]
        rows = np.flatnonzero(logged.any(axis=1))
        last = last[rows]
    ids = np.fromiter(
        (metric_ids[batch.names[i]] for i in rows.tolist()), dtype=np.int64, count=len(rows)
    )
    steps, values = batch.steps[last], batch.values[rows, last]
    by_id = np.argsort(ids, kind="stable")
    return ids[by_id], steps[by_id], values[by_id]


def forget_latest(session: Session, run_key: int) -> None:
    """A new segment starts the run's "latest values" afresh."""
    session.execute(
        update(Metric).where(Metric.run_key == run_key).values(last_step=None, last_value=None)
    )


def touch_run(session: Session, run_key: int, last_step: int | None, now: datetime) -> None:
    values: dict[str, object] = {"last_seen": now}
    if last_step is not None:
        values["last_step"] = func.coalesce(
            func.max(Run.last_step, last_step)
            if session.connection().dialect.name == "sqlite"
            else func.greatest(Run.last_step, last_step),
            last_step,
        )
    session.execute(update(Run).where(Run.key == run_key).values(**values))


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
    """All stored (step, value) of one metric in the lineage, ascending by step."""
    clauses = []
    params: dict[str, object] = {"rk": run_key, "mid": metric_id}
    for i, (seg, lo, hi) in enumerate(lineage.ranges):
        parts = [f"segment = :seg{i}"]
        params[f"seg{i}"] = seg
        if lo is not None:
            parts.append(f"step >= :lo{i}")
            params[f"lo{i}"] = lo
        if hi is not None:
            parts.append(f"step < :hi{i}")
            params[f"hi{i}"] = hi
        clauses.append("(" + " AND ".join(parts) + ")")
    where = "run_key = :rk AND metric_id = :mid AND (" + " OR ".join(clauses or ["FALSE"]) + ")"
    if start is not None:
        where += " AND step >= :start"
        params["start"] = start
    if end is not None:
        where += " AND step <= :end"
        params["end"] = end
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        # Two bytea aggregates of big-endian int8/float8 decode with one frombuffer each:
        # ~5x faster than building a million Python tuples.
        packed = conn.execute(
            text(
                "SELECT string_agg(int8send(step), ''::bytea), "
                "string_agg(float8send(coalesce(value, 'NaN'::float8)), ''::bytea) "
                f"FROM (SELECT step, value FROM points WHERE {where} ORDER BY step) AS ordered"
            ),
            params,
        ).one()
        if packed[0] is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        steps = np.frombuffer(packed[0], dtype=">i8").astype(np.int64)
        values = np.frombuffer(packed[1], dtype=">f8").astype(np.float64)
    else:
        # The sqlite3 cursor's plain tuples convert to an array in one call; SQLAlchemy's
        # Row objects would go through NumPy's slow generic-sequence path.
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(
                "SELECT step, ifnull(value, 0.0), value IS NULL FROM points "
                f"WHERE {where} ORDER BY step",
                params,
            )
            rows = cursor.fetchall()
        finally:
            cursor.close()
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        table = np.array(rows, dtype=np.float64)
        steps = table[:, 0].astype(np.int64)  # steps < 2**53 are exact in float64
        values = np.where(table[:, 2] != 0, np.nan, table[:, 1])
    if len(steps) > 1 and not bool(np.all(steps[1:] > steps[:-1])):
        # The aggregate is fed in subquery order in practice; never rely on it blindly.
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    return steps, values


def metrics_of(session: Session, run_key: int) -> list[Metric]:
    return list(
        session.scalars(select(Metric).where(Metric.run_key == run_key).order_by(Metric.name))
    )


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


def point_count(session: Session, run_key: int) -> int:
    return int(
        session.scalar(select(func.count()).select_from(Point).where(Point.run_key == run_key)) or 0
    )


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
