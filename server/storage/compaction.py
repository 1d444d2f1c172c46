"""Background compaction: hot points into chunks, and the summary pyramid above them.

Points arrive in the write-optimised ``blocks`` table (a row a series and batch, see
:mod:`.blocks`). A run is compacted once its newest step is
:attr:`Policy.chunk_points` steps past the last compaction, by age (at most
:attr:`Policy.max_age_s` after the last compaction, at a time of the run's own within that
period, so that runs come due one after another rather than together), or once it has been quiet
for :attr:`Policy.idle_s`: every hot block of the run that starts at or below a cut step
then moves into per-series chunks (:mod:`.chunks`), the rollup rows above
those chunks are updated, and each metric's latest value moves forward to what the blocks
held.

Crash safety and idempotence come from one rule: a group of series is compacted in **one
transaction** that deletes the hot blocks it read (``DELETE … RETURNING``), writes the
chunks and rollups, and moves each series' watermark. A kill at any instant leaves either all of it
or none. A point that lands at or below a series' watermark later (a re-sent batch, a
late import) is merged into the chunk that covers its step on the next pass, the stored
value winning, so nothing is stored twice. Several workers or replicas share the work: a run
is leased (``compactions.lease_until``) by one of them at a time, and on Postgres the
series rows are locked as well."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from sqlalchemy import Connection, bindparam, text
from sqlalchemy.orm import Session, sessionmaker

from . import blocks, chunks, outline, summary_codec
from .chunks import LEVELS, Points
from .placement import SeriesState, SeriesWork, load_rollups, load_tails, place, set_slot
from .policy import PassReport, Policy
from .sql import psycopg_of, values_table

log = logging.getLogger("normwatch.compaction")


def compact_run(
    sessions: sessionmaker[Session],
    policy: Policy,
    run_key: int,
    segment: int,
    cut: int,
    report: PassReport | None = None,
) -> PassReport:
    """Compact the run's hot points of ``segment`` at or below ``cut``.

    The work goes in transactions of a few metrics and a window of steps, about
    :attr:`Policy.points_per_transaction` points each, so a large backlog (an import, a
    run first seen after a long outage) never holds locks for long: on SQLite, ingest
    waits for each transaction's write lock.
    """
    report = report if report is not None else PassReport()
    with sessions() as session:
        conn = session.connection()
        mids = [
            int(r[0])
            for r in conn.execute(
                text("SELECT id FROM metrics WHERE run_key = :rk ORDER BY id"), {"rk": run_key}
            )
        ]
        lo, hi, hot = conn.execute(
            text(
                "SELECT min(first_step), max(last_step), sum(count) FROM blocks "
                "WHERE run_key = :rk AND segment = :seg"
            ),
            {"rk": run_key, "seg": segment},
        ).one()
    if lo is None or not mids:
        return report
    end = min(int(hi), cut)
    # Many short series (a live run's last minutes) go in as few transactions as the point
    # budget allows: most of a transaction's cost is per statement, not per point.
    per_metric = max(1, int(hot) // len(mids))
    per = max(policy.metrics_per_transaction, policy.points_per_transaction // per_metric)
    per = min(per, policy.max_metrics_per_transaction)
    for i in range(0, len(mids), per):
        group = mids[i : i + per]
        chunks_per_window = policy.points_per_transaction // (len(group) * policy.chunk_points)
        window = policy.chunk_points * max(1, chunks_per_window)
        upper = int(lo) + window - 1
        while True:
            with sessions() as session, session.begin():
                compact_group(session, policy, run_key, segment, group, min(upper, end), report)
            if upper >= end:
                break
            upper += window
    return report


def compact_group(
    session: Session,
    policy: Policy,
    run_key: int,
    segment: int,
    metric_ids: Sequence[int],
    cut: int,
    report: PassReport,
) -> None:
    """One transaction: move a group of series' hot points at or below ``cut`` into chunks."""
    conn = session.connection()
    hot = _take_hot(conn, run_key, segment, list(metric_ids), cut)
    if not hot:
        return
    _move_latest(conn, run_key, segment, hot)
    states = _load_states(conn, run_key, segment, sorted(hot))
    # Unfinished tail chunks grow with the new points: read them all in one go.
    tails = {
        mid: st.chunks - 1
        for mid, st in states.items()
        if st.chunks > 0 and st.tail_count < policy.chunk_points
    }
    tail_chunks, exact_tails = load_tails(conn, run_key, segment, tails, policy.precision)
    works: list[SeriesWork] = []
    for mid in sorted(hot):
        work = SeriesWork(mid, states.get(mid, SeriesState()))
        tail = tails.get(mid)
        pre = {tail: tail_chunks[mid]} if tail is not None and mid in tail_chunks else None
        if tail is not None and mid in exact_tails:
            work.exact.add(tail)
        place(conn, policy, run_key, segment, work, hot[mid], pre)
        works.append(work)
        report.series += 1
        report.points += len(hot[mid])
    rollups = load_rollups(conn, run_key, segment, works)
    chunk_rows: list[dict[str, object]] = []
    for work in works:
        for seq in sorted(work.written):
            pts = work.written[seq]
            data, buckets = chunks.pack(pts, work.precision_of(seq, policy.precision))
            chunk_rows.append(
                {
                    "rk": run_key,
                    "mid": work.metric_id,
                    "seg": segment,
                    "seq": seq,
                    "first": int(pts.steps[0]),
                    "last": int(pts.steps[-1]),
                    "count": len(pts),
                    "data": data,
                    "buckets": summary_codec.encode_buckets(buckets),
                    "outline": outline.encode(buckets, chunks.holds_float32(data)),
                }
            )
            set_slot(rollups, work.metric_id, 1, seq, chunks.merge_buckets(buckets))
    # Each changed row rolls up into the level above, one level at a time for the whole
    # group (a pass per series over every row of the group was quadratic in its size).
    for level in range(1, LEVELS):
        changed = [(key, row) for key, row in rollups.items() if key[1] == level and row.changed]
        for (mid, _, seq), row in sorted(changed, key=lambda item: item[0]):
            set_slot(rollups, mid, level + 1, seq, chunks.merge_buckets(row.buckets))
    report.chunks_written += len(chunk_rows)
    conn.execute(
        text(
            "INSERT INTO chunks (run_key, metric_id, segment, seq, first_step, last_step, count, "
            "data, buckets, outline) VALUES (:rk, :mid, :seg, :seq, :first, :last, :count, :data, "
            ":buckets, :outline) ON CONFLICT (run_key, metric_id, segment, seq) DO UPDATE SET "
            "first_step = excluded.first_step, last_step = excluded.last_step, "
            "count = excluded.count, data = excluded.data, buckets = excluded.buckets, "
            "outline = excluded.outline"
        ),
        chunk_rows,
    )
    rollup_rows = [
        {
            "rk": run_key,
            "mid": mid,
            "seg": segment,
            "level": level,
            "seq": seq,
            "first": int(row.buckets["first_step"][0]),
            "last": int(row.buckets["last_step"][-1]),
            "count": int(row.buckets["count"].sum()),
            "buckets": summary_codec.encode_buckets(row.buckets),
        }
        for (mid, level, seq), row in sorted(rollups.items())
        if row.changed
    ]
    conn.execute(
        text(
            "INSERT INTO rollups (run_key, metric_id, segment, level, seq, first_step, last_step, "
            "count, buckets) VALUES (:rk, :mid, :seg, :level, :seq, :first, :last, :count, "
            ":buckets) ON CONFLICT (run_key, metric_id, segment, level, seq) DO UPDATE SET "
            "first_step = excluded.first_step, last_step = excluded.last_step, "
            "count = excluded.count, buckets = excluded.buckets"
        ),
        rollup_rows,
    )
    conn.execute(
        text(
            "INSERT INTO series (run_key, metric_id, segment, chunks, through, tail_count, points) "
            "VALUES (:rk, :mid, :seg, :chunks, :through, :tail, :points) "
            "ON CONFLICT (run_key, metric_id, segment) DO UPDATE SET chunks = excluded.chunks, "
            "through = excluded.through, tail_count = excluded.tail_count, "
            "points = excluded.points"
        ),
        [
            {
                "rk": run_key,
                "mid": w.metric_id,
                "seg": segment,
                "chunks": w.state.chunks,
                "through": w.state.through,
                "tail": w.state.tail_count,
                "points": w.state.points,
            }
            for w in works
        ],
    )


_TAKE_HOT = (
    "DELETE FROM blocks WHERE run_key = :rk AND metric_id BETWEEN :lo AND :hi "
    "AND segment = :seg AND first_step <= :cut "
    "RETURNING metric_id, first_step, last_step, count, steps, data"
)


_TAKE_HOT_PG = (
    "DELETE FROM blocks WHERE run_key = %(rk)s AND metric_id BETWEEN %(lo)s AND %(hi)s "
    "AND segment = %(seg)s AND first_step <= %(cut)s "
    "RETURNING metric_id, first_step, last_step, count, steps, data"
)


def _take_hot(
    conn: Connection, run_key: int, segment: int, metric_ids: list[int], cut: int
) -> dict[int, Points]:
    """Delete the group's hot blocks that start at or below ``cut``; their points by metric.

    ``metric_ids`` are consecutive ids of the run's metrics (a slice of them in id order), so
    they go as one range: a range of the key's second column bounds the index scan whatever
    the planner knows of the table, where ``IN (...)`` on a table never analysed (a new
    database, autovacuum off) became a filter over every hot block of the run.
    """
    params = {"rk": run_key, "seg": segment, "lo": min(metric_ids), "hi": max(metric_ids)}
    params["cut"] = cut
    taken: list[tuple[int, int, int, int, bytes | None, bytes]]
    if conn.dialect.name == "postgresql":
        # Tens of thousands of small rows: psycopg's own tuples, in binary, cost a third of
        # what SQLAlchemy rows (then turned into tuples) did.
        with (
            psycopg_of(conn, _TAKE_HOT_PG) as driver,
            driver.cursor(binary=True) as cursor,
        ):
            cursor.execute(_TAKE_HOT_PG, params)
            taken = cursor.fetchall()
    else:
        taken = [tuple(r) for r in conn.execute(text(_TAKE_HOT), params)]
    if not taken:
        return {}
    mids, points = blocks.decode_rows(taken)
    bounds = np.flatnonzero(np.r_[True, mids[1:] != mids[:-1], True])
    return {
        int(mids[lo]): points.take(slice(int(lo), int(hi)))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    }


def _move_latest(conn: Connection, run_key: int, segment: int, hot: dict[int, Points]) -> None:
    """Each metric's latest value moves forward to the last of its taken points, if the
    segment is still the run's current one (a restart starts the latest values afresh)."""
    rows = [
        (mid, int(pts.steps[-1]), _stored_value(pts.values[-1]))
        for mid, pts in sorted(hot.items())
        if len(pts)
    ]
    if not rows:
        return
    # One statement for the group: a row of VALUES a metric.
    values, params = values_table(("BIGINT", "BIGINT", "DOUBLE PRECISION"), rows)
    conn.execute(
        text(
            f"WITH u(id, step, value) AS ({values}) UPDATE metrics "
            "SET last_step = u.step, last_value = u.value FROM u "
            "WHERE metrics.id = u.id AND metrics.run_key = :rk "
            "AND (metrics.last_step IS NULL OR metrics.last_step < u.step) "
            "AND EXISTS (SELECT 1 FROM runs WHERE key = :rk AND segment = :seg)"
        ),
        {**params, "rk": run_key, "seg": segment},
    )


def _stored_value(value: float) -> float | None:
    """A value for a column: NaN as NULL."""
    return None if value != value else float(value)


def _load_states(
    conn: Connection, run_key: int, segment: int, metric_ids: list[int]
) -> dict[int, SeriesState]:
    lock = " FOR UPDATE" if conn.dialect.name == "postgresql" else ""
    rows = conn.execute(
        text(
            "SELECT metric_id, chunks, through, tail_count, points FROM series "
            "WHERE run_key = :rk AND segment = :seg AND metric_id IN :mids" + lock
        ).bindparams(bindparam("mids", expanding=True)),
        {"rk": run_key, "seg": segment, "mids": metric_ids},
    )
    return {
        int(mid): SeriesState(int(n), through, int(tail), int(points), True)
        for mid, n, through, tail, points in rows
    }
