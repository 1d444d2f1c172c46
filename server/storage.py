"""All SQL lives here. The hot paths (points in, series out) bypass the ORM.

Points go in as one array insert per batch on Postgres (``unnest`` of typed arrays,
``ON CONFLICT DO NOTHING`` so a re-sent batch stores nothing twice) and as one
``executemany`` on SQLite. NaN is stored as NULL on both, since SQLite cannot hold a
NaN and "not logged" is never stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt
from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from .batch import MetricBatch
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


def resolve_metric_ids(session: Session, run_key: int, names: Sequence[str]) -> dict[str, int]:
    """Ids for ``names`` in the run, creating the missing ones."""
    if not names:
        return {}
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.execute(
            text(
                "INSERT INTO metrics (run_key, name) SELECT :rk, unnest(CAST(:names AS text[])) "
                "ON CONFLICT (run_key, name) DO NOTHING"
            ),
            {"rk": run_key, "names": list(names)},
        )
        rows = conn.execute(
            text("SELECT name, id FROM metrics WHERE run_key = :rk AND name = ANY(:names)"),
            {"rk": run_key, "names": list(names)},
        )
    else:
        conn.execute(
            text("INSERT OR IGNORE INTO metrics (run_key, name) VALUES (:rk, :name)"),
            [{"rk": run_key, "name": n} for n in names],
        )
        rows = conn.execute(
            select(Metric.name, Metric.id).where(
                Metric.run_key == run_key, Metric.name.in_(list(names))
            )
        )
    return {name: mid for name, mid in rows}


def write_points(
    session: Session, run_key: int, segment: int, batch: MetricBatch, metric_ids: dict[str, int]
) -> int:
    """Store a batch's logged values; returns how many points it carried."""
    mids: list[npt.NDArray[np.int64]] = []
    steps: list[npt.NDArray[np.int64]] = []
    values: list[npt.NDArray[np.float64]] = []
    for col in batch.columns:
        mask = col.logged
        n = int(mask.sum())
        if n == 0:
            continue
        mids.append(np.full(n, metric_ids[col.name], dtype=np.int64))
        steps.append(batch.steps[mask])
        values.append(col.values[mask])
    if not mids:
        return 0
    mid_arr = np.concatenate(mids)
    step_arr = np.concatenate(steps)
    val_list: list[float | None] = np.concatenate(values).tolist()
    val_list = [None if v != v else v for v in val_list]  # NaN → NULL
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(
            "INSERT INTO points (run_key, metric_id, segment, step, value) "
            "SELECT %(rk)s, m, %(seg)s, s, v FROM unnest("
            "%(mids)s::bigint[], %(steps)s::bigint[], %(vals)s::float8[]) AS t(m, s, v) "
            "ON CONFLICT DO NOTHING",
            {
                "rk": run_key,
                "seg": segment,
                "mids": mid_arr.tolist(),
                "steps": step_arr.tolist(),
                "vals": val_list,
            },
        )
    else:
        conn.exec_driver_sql(
            "INSERT OR IGNORE INTO points (run_key, metric_id, segment, step, value) "
            "VALUES (?, ?, ?, ?, ?)",
            list(
                zip(
                    [run_key] * len(val_list),
                    mid_arr.tolist(),
                    [segment] * len(val_list),
                    step_arr.tolist(),
                    val_list,
                    strict=True,
                )
            ),
        )
    return len(val_list)


def update_latest(
    session: Session, run_key: int, batch: MetricBatch, metric_ids: dict[str, int]
) -> int | None:
    """Move each metric's and the run's last step forward; returns the batch's last step."""
    if len(batch.steps) == 0:
        return None
    order = np.argsort(batch.steps)
    latest: list[dict[str, object]] = []
    for col in batch.columns:
        logged = np.flatnonzero(col.logged[order])
        if len(logged) == 0:
            continue
        i = int(order[logged[-1]])
        v = float(col.values[i])
        latest.append(
            {"mid": metric_ids[col.name], "step": int(batch.steps[i]), "val": None if v != v else v}
        )
    if latest:
        # A fixed lock order: concurrent batches of one run must not deadlock on metric rows.
        latest.sort(key=lambda row: row["mid"])  # type: ignore[arg-type,return-value]
        session.connection().execute(
            text(
                "UPDATE metrics SET last_step = :step, last_value = :val "
                "WHERE id = :mid AND (last_step IS NULL OR last_step <= :step)"
            ),
            latest,
        )
    return int(batch.steps.max())


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
