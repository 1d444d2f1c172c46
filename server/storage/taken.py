"""Which of a batch's points the series already hold, hot or compacted.

A point is (run, segment, metric, step) and keeps the first value stored for it: ingest
asks this module which of a batch's points are new before it writes anything, so that a
later value (a re-sent batch, a restart's replay without a new segment, a step logged
twice) is neither stored nor left for compaction to drop, and is counted in the answer.

A live trainer's batch (every step past the run's last one) never comes here. Any other
costs a query over the hot blocks that overlap its steps, one over its series'
compaction watermarks and, when some of its steps are at or below a watermark, one over
those series' chunks from the one that owns the batch's first step on. The hot blocks are
read first: a compaction that commits between the two statements has moved
the points read hot into chunks the second statement sees, so none is missed (each
statement sees what was committed when it began).

A point at a step compacted into a chunk whose points retention dropped (only its
summaries are kept) cannot be compared with anything: it is not stored, as compaction
would not store it either (:func:`.placement.place`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from ..batch import MetricBatch
from . import blocks, chunks
from .sql import KEYS_PER_QUERY, fetch, values_table

__all__ = ["unstored"]


def unstored(
    session: Session, run_key: int, segment: int, batch: MetricBatch, metric_ids: dict[str, int]
) -> npt.NDArray[np.bool_]:
    """Which of the batch's points (``batch.logged``'s shape) no series holds yet: False
    where the metric has a stored value at that step, hot or compacted."""
    rows_of = {metric_ids[name]: i for i, name in enumerate(batch.names) if name in metric_ids}
    keep = np.ones(batch.logged.shape, dtype=np.bool_)
    if not rows_of or not len(batch.steps):
        return keep
    conn = session.connection()
    lo, hi = int(batch.steps.min()), int(batch.steps.max())
    places = _Places(batch.steps, rows_of)
    places.clear(keep, *_hot_points(conn, run_key, segment, rows_of, lo, hi))
    through = _watermarks(conn, run_key, segment, rows_of, lo)
    if through:
        held, lost = _compacted(conn, run_key, segment, through, lo, hi)
        places.clear(keep, *held)
        for mid, (firsts, dropped) in lost.items():
            # Retention kept only summaries there: the chunk a late point would join decides.
            owner = np.clip(np.searchsorted(firsts, batch.steps, side="right") - 1, 0, None)
            keep[rows_of[mid]] &= ~((batch.steps <= through[mid]) & dropped[owner])
    return keep


class _Places:
    """Where stored points fall in a batch: the row of their metric, the column of their
    step (one sort of the batch's steps serves every metric)."""

    def __init__(self, steps: npt.NDArray[np.int64], rows_of: dict[int, int]) -> None:
        self._order = np.argsort(steps, kind="stable")
        self._sorted = steps[self._order]
        self._ids = np.array(sorted(rows_of), dtype=np.int64)
        self._rows = np.array([rows_of[mid] for mid in self._ids.tolist()], dtype=np.int64)

    def clear(
        self, keep: npt.NDArray[np.bool_], mids: npt.NDArray[np.int64], steps: npt.NDArray[np.int64]
    ) -> None:
        """Set ``keep`` False at the batch's points that the stored ``(mids, steps)`` hold."""
        if not len(steps):
            return
        at = np.minimum(np.searchsorted(self._sorted, steps), len(self._sorted) - 1)
        which = np.minimum(np.searchsorted(self._ids, mids), len(self._ids) - 1)
        hit = (self._sorted[at] == steps) & (self._ids[which] == mids)
        keep[self._rows[which[hit]], self._order[at[hit]]] = False


def _hot_points(
    conn: Connection, run_key: int, segment: int, rows_of: dict[int, int], lo: int, hi: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The hot points of ``lo..hi`` of the batch's series: each one's metric id and step.

    One query over the batch's range of metric ids: a range of the key's second column
    bounds the index scan whatever the planner knows of the table (blocks of other metrics
    in the range are skipped here). The blocks are cut to ``lo..hi`` before anything is
    decoded, and decoded all together.
    """
    taken = conn.execute(
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
            "lo": lo,
            "hi": hi,
        },
    ).all()
    mine = [tuple(row) for row in taken if int(row[0]) in rows_of]
    mids, points = blocks.decode_rows(mine, between=(lo, hi))
    return mids, points.steps


def _watermarks(
    conn: Connection, run_key: int, segment: int, rows_of: dict[int, int], lo: int
) -> dict[int, int]:
    """Each series' last compacted step, for those compacted at or past ``lo``: the only
    series whose chunks can hold one of the batch's steps."""
    rows = conn.execute(
        text(
            "SELECT metric_id, through FROM series WHERE run_key = :rk AND segment = :seg "
            "AND metric_id BETWEEN :lo_id AND :hi_id AND through >= :lo"
        ),
        {"rk": run_key, "seg": segment, "lo_id": min(rows_of), "hi_id": max(rows_of), "lo": lo},
    )
    return {int(mid): int(through) for mid, through in rows if int(mid) in rows_of}


def _chunks_from(table: str, dialect: str) -> str:
    """The statement that reads, for each series of ``table`` (``VALUES`` of metric ids),
    its chunks from the one that owns step ``:lo`` (the last starting at or below it, else
    the first) to the last starting at or below ``:hi``.

    Each series' owner is probed back from its newest chunk (an index range, stopping at
    the first match); its chunks are then read as an index range from there. On Postgres
    a ``LATERAL`` subquery kept from being flattened (``OFFSET 0``) makes that range one
    index scan a series: as a plain join the planner may read every chunk of the table
    and join by hash. SQLite has no ``LATERAL`` and plans the join as a loop over the
    series, the chunks found through the key.
    """
    # SQLite must be told to take the owners first; on Postgres the LATERAL does that, and
    # a plain CTE stays inside the one statement Citus routes to the run's shard.
    materialized = "" if dialect == "postgresql" else " MATERIALIZED"
    owners = (
        f"WITH u(id) AS ({table}), o(id, seq) AS{materialized} (SELECT DISTINCT u.id, "
        "COALESCE((SELECT c.seq FROM chunks c WHERE c.run_key = :rk AND c.metric_id = u.id "
        "AND c.segment = :seg AND c.first_step <= :lo ORDER BY c.seq DESC LIMIT 1), 0) "
        "FROM u) "
    )
    if dialect == "postgresql":
        return owners + (
            "SELECT x.metric_id, x.seq, x.first_step, x.data FROM o CROSS JOIN LATERAL "
            "(SELECT c.metric_id, c.seq, c.first_step, c.data FROM chunks c "
            "WHERE c.run_key = :rk AND c.metric_id = o.id AND c.segment = :seg "
            "AND c.seq >= o.seq AND c.first_step <= :hi OFFSET 0) x"
        )
    return owners + (
        "SELECT c.metric_id, c.seq, c.first_step, c.data FROM o JOIN chunks c "
        "ON c.run_key = :rk AND c.metric_id = o.id AND c.segment = :seg AND c.seq >= o.seq "
        "WHERE c.first_step <= :hi"
    )


Lost = dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]]
"""Per series with a chunk whose points retention dropped: the first steps of its chunks
read, and which of them lost their points."""


def _compacted(
    conn: Connection, run_key: int, segment: int, through: dict[int, int], lo: int, hi: int
) -> tuple[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]], Lost]:
    """The compacted points of the ``through`` series that can be at a step of ``lo..hi``
    (each one's metric id and step), and the series some of whose chunks there lost their
    points to retention.

    A late point goes into the last chunk that starts at or below its step (the first
    chunk for a step below them all, see :func:`.placement.place`), so the chunks read are
    that chunk of ``lo`` and the ones after it that start at or below ``hi``: an index
    range a series, found by probing back from its newest chunk.
    """
    ids = sorted(through)
    found: dict[int, list[tuple[int, int, bytes | None]]] = {}
    for start in range(0, len(ids), KEYS_PER_QUERY):
        part = ids[start : start + KEYS_PER_QUERY]
        table, params = values_table(("BIGINT",), [(mid,) for mid in part])
        params.update({"rk": run_key, "seg": segment, "lo": lo, "hi": hi})
        rows = fetch(conn, _chunks_from(table, conn.dialect.name), params, prepare=False)
        for mid, seq, first, data in rows:
            found.setdefault(int(mid), []).append((int(seq), int(first), data))
    mids: list[npt.NDArray[np.int64]] = []
    steps: list[npt.NDArray[np.int64]] = []
    lost: Lost = {}
    for mid, rows in found.items():
        for _, _, data in rows:
            if data is not None:
                held = chunks.decode_raw(bytes(data))[0].steps
                a, b = np.searchsorted(held, [lo, hi + 1])  # a chunk's steps ascend
                held = held[int(a) : int(b)]
                steps.append(held)
                mids.append(np.full(len(held), mid, dtype=np.int64))
        if any(data is None for _, _, data in rows):
            rows.sort()
            firsts = np.array([first for _, first, _ in rows], dtype=np.int64)
            lost[mid] = (firsts, np.array([data is None for _, _, data in rows], dtype=np.bool_))
    if not steps:
        empty = np.empty(0, dtype=np.int64)
        return (empty, empty), lost
    return (np.concatenate(mids), np.concatenate(steps)), lost
