"""Hot points in and out. The hot paths bypass the ORM.

A batch goes in as one hot block a metric (:mod:`.blocks`): on Postgres one binary
``COPY`` per batch (:mod:`.pgcopy`), on SQLite one ``executemany``. Batches of one run are
stored one after the other under the run's row lock; a batch whose steps all lie past the
run's last step (a live trainer's) goes straight in, and any other first drops the points
that its series hold already, hot or compacted (:mod:`.taken`), so the first value stored
for a point stands and a re-sent batch stores nothing twice. NaN in a value column is
stored as NULL, since SQLite cannot hold a NaN; inside the blocks' blobs it is kept bit
for bit."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from sqlalchemy import bindparam, func, select, text
from sqlalchemy.orm import Session

from ..batch import MetricBatch
from ..models import Block
from . import blocks, pgcopy, taken
from .chunks import Points
from .runs import Lineage, lineage_of
from .sql import psycopg_of, values_table


def write_points(
    session: Session,
    run_key: int,
    segment: int,
    batch: MetricBatch,
    metric_ids: dict[str, int],
    *,
    fresh: bool = False,
) -> npt.NDArray[np.bool_] | None:
    """Store a batch's logged values as hot blocks, except those of points stored already;
    returns which of the batch's points were left out for that (``batch.logged``'s shape),
    or None when none was.

    ``fresh`` says that no stored point of the segment can share a step with the batch
    (every step lies past the segment's last one, read under `lock_run`): the batch then
    goes in without looking. Otherwise the points its series hold already are dropped
    first (:func:`.taken.unstored`).
    """
    if batch.point_count == 0:
        return None
    keep = None if fresh else taken.unstored(session, run_key, segment, batch, metric_ids)
    left_out = None
    if keep is not None:
        left_out = batch.logged & ~keep
        if not left_out.any():
            keep = left_out = None
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
        return left_out
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
    return left_out


_IDS_PER_QUERY = 512


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


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


def series_keys(
    session: Session, run_key: int, names: Sequence[str]
) -> tuple[Lineage, dict[str, int]]:
    """The run's latest lineage and the ids of ``names`` it has, in one round trip: what
    every chart read needs before it can look at a point."""
    statement = "SELECT 0, segment, start_step, NULL FROM segments WHERE run_key = :rk"
    params: dict[str, object] = {"rk": run_key}
    if names:  # an empty expanding IN compares the name with an integer on Postgres
        statement += (
            " UNION ALL SELECT 1, id, NULL, name FROM metrics WHERE run_key = :rk "
            "AND name IN :names"
        )
        params["names"] = list(names)
    query = text(statement)
    if names:
        query = query.bindparams(bindparam("names", expanding=True))
    rows = session.connection().execute(query, params)
    segments: list[tuple[int, int | None]] = []
    ids: dict[str, int] = {}
    for kind, key, start, name in rows:
        if kind == 0:
            segments.append((int(key), None if start is None else int(start)))
        else:
            ids[name] = int(key)
    return lineage_of(segments), ids


def point_count(session: Session, run_key: int) -> int:
    """How many of the run's points are hot (not compacted yet)."""
    return int(session.scalar(select(func.sum(Block.count)).where(Block.run_key == run_key)) or 0)


EMPTY = Points(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))


def concat_points(parts: list[Points]) -> Points:
    parts = [p for p in parts if len(p)]
    if not parts:
        return EMPTY
    if len(parts) == 1:
        return parts[0]
    return Points(
        np.concatenate([p.steps for p in parts]), np.concatenate([p.values for p in parts])
    )


Flags = bool | npt.NDArray[np.bool_]


def ascending(
    parts: list[Points], flags: Sequence[Flags] | None = None
) -> tuple[Points, npt.NDArray[np.bool_] | None]:
    """The union by step of ``parts``, ascending; where a step repeats, the earlier part wins.

    ``flags`` mark points (a bool for a whole part, or one per point) and follow them; the
    result's flags are None when none is set. Parts that are each ascending and do not
    interleave (the pieces of a read) are only put in order and joined; anything else is
    sorted.
    """
    marks = [
        np.broadcast_to(np.asarray(f, np.bool_), len(p))
        for p, f in zip(parts, flags or [False] * len(parts), strict=True)
    ]
    kept = [(p, m) for p, m in zip(parts, marks, strict=True) if len(p)]
    flagged = any(m.any() for _, m in kept)
    by_first = sorted(kept, key=lambda pm: int(pm[0].steps[0]))
    merged = concat_points([p for p, _ in by_first])
    steps = merged.steps
    if len(steps) < 2 or bool((steps[1:] > steps[:-1]).all()):
        return merged, np.concatenate([m for _, m in by_first]) if flagged else None
    merged = concat_points([p for p, _ in kept])
    steps, first = np.unique(merged.steps, return_index=True)
    mask = np.concatenate([m for _, m in kept])[first] if flagged else None
    return Points(steps, merged.values[first]), mask
