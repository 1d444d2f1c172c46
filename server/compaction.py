"""Background compaction: hot points into chunks, and the summary pyramid above them.

Points arrive in the write-optimised ``blocks`` table (a row a series and batch, see
:mod:`normwatch.server.blocks`). A run is compacted once its newest step is
:attr:`Policy.chunk_points` steps past the last compaction, by age (at most
:attr:`Policy.max_age_s` after the last compaction, at a time of the run's own within that
period, so that runs come due one after another rather than together), or once it has been quiet
for :attr:`Policy.idle_s`: every hot block of the run that starts at or below a cut step
then moves into per-series chunks (:mod:`normwatch.server.chunks`), the rollup rows above
those chunks are updated, and each metric's latest value moves forward to what the blocks
held.

Crash safety and idempotence come from one rule: a group of series is compacted in **one
transaction** that deletes the hot blocks it read (``DELETE … RETURNING``), writes the
chunks and rollups, and moves each series' watermark. A kill at any instant leaves either all of it
or none. A point that lands at or below a series' watermark later (a re-sent batch, a
late import) is merged into the chunk that covers its step on the next pass, the stored
value winning, so nothing is stored twice. Several workers or replicas share the work: a run
is leased (``compactions.lease_until``) by one of them at a time, and on Postgres the
series rows are locked as well.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, Engine, bindparam, func, or_, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from . import blocks, chunks, memory, storage
from .chunks import FANOUT, Points
from .config import Settings
from .models import Compaction, Run, UtcDateTime, utcnow
from .telemetry import Sample

log = logging.getLogger("normwatch.compaction")

LEVELS = 2
"""Rollup levels above the chunks (fanout 64 each): level 2 buckets hold 64² chunks."""

NO_CUT = 2**63 - 1
"""A cut above every step: compact all of a series."""


@dataclass(frozen=True)
class Policy:
    chunk_points: int = 4096
    precision: str = "float32"
    """``float32`` (default, about 4 bytes a point) or ``float64`` (lossless)."""
    max_age_s: float = 300.0
    idle_s: float = 60.0
    metrics_per_transaction: int = 24
    """The fewest metrics a transaction takes; more while their points fit the next."""
    max_metrics_per_transaction: int = 2048
    """The most: a transaction's statements name each of its metrics (three bound
    parameters a metric in the largest), and a statement may carry at most 65,535."""
    points_per_transaction: int = 100_000
    lease_s: float = 300.0

    def __post_init__(self) -> None:
        if self.precision not in ("float32", "float64"):
            raise ValueError(f"precision must be float32 or float64, got {self.precision!r}")
        if self.chunk_points < FANOUT:
            raise ValueError(f"chunk_points must be at least {FANOUT}, got {self.chunk_points}")


@dataclass
class PassReport:
    """What one compaction pass did."""

    runs: int = 0
    series: int = 0
    points: int = 0
    chunks_written: int = 0
    errors: int = 0
    seconds: float = 0.0


@dataclass
class _State:
    chunks: int = 0
    through: int | None = None
    tail_count: int = 0
    points: int = 0
    exists: bool = False


@dataclass
class _Rollup:
    buckets: npt.NDArray[np.void]
    changed: bool = False


@dataclass
class _SeriesWork:
    metric_id: int
    state: _State
    written: dict[int, Points] = field(default_factory=dict)


# --- choosing what to compact ---------------------------------------------------------


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


# --- compacting ---------------------------------------------------------------------------


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
    tail_chunks = _load_tails(conn, run_key, segment, tails)
    works: list[_SeriesWork] = []
    for mid in sorted(hot):
        work = _SeriesWork(mid, states.get(mid, _State()))
        tail = tails.get(mid)
        pre = {tail: tail_chunks[mid]} if tail is not None and mid in tail_chunks else None
        _place(conn, policy, run_key, segment, work, hot[mid], pre)
        works.append(work)
        report.series += 1
        report.points += len(hot[mid])
    rollups = _load_rollups(conn, run_key, segment, works)
    chunk_rows: list[dict[str, object]] = []
    for work in works:
        for seq in sorted(work.written):
            pts = work.written[seq]
            data, buckets = chunks.pack(pts, policy.precision)
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
                    "buckets": chunks.encode_buckets(buckets),
                }
            )
            _set_slot(rollups, work.metric_id, 1, seq, chunks.merge_buckets(buckets))
    # Each changed row rolls up into the level above, one level at a time for the whole
    # group (a pass per series over every row of the group was quadratic in its size).
    for level in range(1, LEVELS):
        changed = [(key, row) for key, row in rollups.items() if key[1] == level and row.changed]
        for (mid, _, seq), row in sorted(changed, key=lambda item: item[0]):
            _set_slot(rollups, mid, level + 1, seq, chunks.merge_buckets(row.buckets))
    report.chunks_written += len(chunk_rows)
    conn.execute(
        text(
            "INSERT INTO chunks (run_key, metric_id, segment, seq, first_step, last_step, count, "
            "data, buckets) VALUES (:rk, :mid, :seg, :seq, :first, :last, :count, :data, :buckets) "
            "ON CONFLICT (run_key, metric_id, segment, seq) DO UPDATE SET "
            "first_step = excluded.first_step, last_step = excluded.last_step, "
            "count = excluded.count, data = excluded.data, buckets = excluded.buckets"
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
            "buckets": chunks.encode_buckets(row.buckets),
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
            storage.psycopg_of(conn, _TAKE_HOT_PG) as driver,
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
    values, params = storage.values_table(("BIGINT", "BIGINT", "DOUBLE PRECISION"), rows)
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
) -> dict[int, _State]:
    lock = " FOR UPDATE" if conn.dialect.name == "postgresql" else ""
    rows = conn.execute(
        text(
            "SELECT metric_id, chunks, through, tail_count, points FROM series "
            "WHERE run_key = :rk AND segment = :seg AND metric_id IN :mids" + lock
        ).bindparams(bindparam("mids", expanding=True)),
        {"rk": run_key, "seg": segment, "mids": metric_ids},
    )
    return {
        int(mid): _State(int(n), through, int(tail), int(points), True)
        for mid, n, through, tail, points in rows
    }


def _place(
    conn: Connection,
    policy: Policy,
    run_key: int,
    segment: int,
    work: _SeriesWork,
    hot: Points,
    preloaded: dict[int, Points] | None = None,
) -> None:
    """Decide which chunks ``hot`` goes into; fills ``work.written`` and moves the state.

    ``preloaded`` holds chunks already read (the series' unfinished tail chunk, usually).
    """
    state = work.state
    if len(hot) > 1 and not bool(np.all(np.diff(hot.steps) > 0)):
        steps, first = np.unique(hot.steps, return_index=True)
        hot = Points(steps, hot.values[first])
    loaded: dict[int, Points] = dict(preloaded or {})

    def chunk(seq: int) -> Points | None:
        if seq not in loaded:
            row = conn.execute(
                text(
                    "SELECT data FROM chunks WHERE run_key = :rk AND metric_id = :mid "
                    "AND segment = :seg AND seq = :seq"
                ),
                {"rk": run_key, "mid": work.metric_id, "seg": segment, "seq": seq},
            ).one_or_none()
            if row is None or row[0] is None:
                return None
            loaded[seq] = chunks.decode(bytes(row[0]))
        return work.written.get(seq, loaded[seq])

    if state.through is not None:
        late = hot.steps <= state.through
        if late.any():
            firsts = np.array(
                [
                    int(r[0])
                    for r in conn.execute(
                        text(
                            "SELECT first_step FROM chunks WHERE run_key = :rk AND "
                            "metric_id = :mid AND segment = :seg ORDER BY seq"
                        ),
                        {"rk": run_key, "mid": work.metric_id, "seg": segment},
                    )
                ],
                dtype=np.int64,
            )
            owner = np.clip(np.searchsorted(firsts, hot.steps[late], side="right") - 1, 0, None)
            late_pts = hot.take(late)
            for seq in np.unique(owner).tolist():
                mine = owner == seq
                old = chunk(int(seq))
                if old is None:  # summaries only (retention): the late point is dropped
                    continue
                merged = chunks.merge_points(
                    old, Points(late_pts.steps[mine], late_pts.values[mine])
                )
                state.points += len(merged) - len(old)
                work.written[int(seq)] = merged
            hot = hot.take(~late)
            if state.chunks - 1 in work.written:
                state.tail_count = len(work.written[state.chunks - 1])
    if len(hot) == 0:
        return
    last = int(hot.steps[-1])
    if state.chunks > 0 and state.tail_count < policy.chunk_points:
        room = policy.chunk_points - state.tail_count
        tail = chunk(state.chunks - 1)
        if tail is not None:
            merged = chunks.merge_points(tail, hot.take(slice(0, room)))
            state.points += len(merged) - len(tail)
            work.written[state.chunks - 1] = merged
            state.tail_count = len(merged)
            hot = hot.take(slice(room, None))
    for lo in range(0, len(hot), policy.chunk_points):
        piece = hot.take(slice(lo, lo + policy.chunk_points))
        work.written[state.chunks] = piece
        state.chunks += 1
        state.tail_count = len(piece)
        state.points += len(piece)
    state.through = last if state.through is None else max(state.through, last)


_KEYS_PER_QUERY = 512
"""Most keys OR'ed in one statement (a power of two: see `storage.padded`)."""


def _any_key(
    columns: Sequence[str], keys: Sequence[tuple[int, ...]]
) -> tuple[str, dict[str, object]]:
    """``(a = :k0_0 AND b = :k0_1) OR …`` for ``keys`` (`storage.padded`), and its parameters."""
    params: dict[str, object] = {}
    terms = []
    for i, key in enumerate(storage.padded(keys)):
        parts = []
        for j, (column, value) in enumerate(zip(columns, key, strict=True)):
            params[f"k{i}_{j}"] = value
            parts.append(f"{column} = :k{i}_{j}")
        terms.append("(" + " AND ".join(parts) + ")")
    return " OR ".join(terms), params


def _load_tails(
    conn: Connection, run_key: int, segment: int, tails: dict[int, int]
) -> dict[int, Points]:
    """The chunks ``{metric: seq}`` names that still hold their points, by metric."""
    out: dict[int, Points] = {}
    keys = sorted(tails.items())
    for i in range(0, len(keys), _KEYS_PER_QUERY):
        clause, params = _any_key(("metric_id", "seq"), keys[i : i + _KEYS_PER_QUERY])
        params.update(rk=run_key, seg=segment)
        rows = conn.execute(
            text(
                "SELECT metric_id, data FROM chunks WHERE run_key = :rk AND segment = :seg "
                f"AND ({clause})"
            ),
            params,
        )
        for mid, data in rows:
            if data is not None:
                # Widened, not readable: the tail is merged and packed again as it is.
                out[int(mid)] = chunks.decode_raw(bytes(data))[0]
    return out


def _load_rollups(
    conn: Connection, run_key: int, segment: int, works: list[_SeriesWork]
) -> dict[tuple[int, int, int], _Rollup]:
    """The rollup rows the written chunks fall under, keyed by (metric, level, seq)."""
    wanted: set[tuple[int, int, int]] = set()
    for work in works:
        for seq in work.written:
            for level in range(1, LEVELS + 1):
                wanted.add((work.metric_id, level, seq // FANOUT**level))
    out: dict[tuple[int, int, int], _Rollup] = {}
    keys = sorted(wanted)
    for i in range(0, len(keys), _KEYS_PER_QUERY):
        clause, params = _any_key(("metric_id", "level", "seq"), keys[i : i + _KEYS_PER_QUERY])
        params.update(rk=run_key, seg=segment)
        rows = conn.execute(
            text(
                "SELECT metric_id, level, seq, buckets FROM rollups WHERE run_key = :rk "
                f"AND segment = :seg AND ({clause})"
            ),
            params,
        )
        for mid, level, seq, blob in rows:
            out[(int(mid), int(level), int(seq))] = _Rollup(
                chunks.decode_buckets(bytes(blob)).copy()
            )
    return out


def _set_slot(
    rollups: dict[tuple[int, int, int], _Rollup],
    metric_id: int,
    level: int,
    child: int,
    summary: npt.NDArray[np.void],
) -> None:
    """Put a child's one-bucket summary into its slot of the level's rollup row."""
    key = (metric_id, level, child // FANOUT)
    slot = child % FANOUT
    row = rollups.get(key)
    if row is None:
        row = rollups[key] = _Rollup(np.zeros(0, dtype=chunks.BUCKET))
    if slot < len(row.buckets):
        row.buckets[slot] = summary[0]
    elif slot == len(row.buckets):
        row.buckets = np.concatenate([row.buckets, summary])
    else:
        raise RuntimeError(
            f"rollup level {level} row {key[2]} of metric {metric_id} has {len(row.buckets)} "
            f"slots; cannot fill slot {slot}"
        )
    row.changed = True


# --- how far behind it is ---------------------------------------------------------------


def lag_samples(session: Session) -> Iterator[Sample]:
    """Compaction backlog gauges for ``/metrics``, read at scrape time."""
    c = Compaction
    pending = (
        Run.last_step.is_not(None),
        or_(c.run_key.is_(None), c.through.is_(None), c.through < Run.last_step),
    )
    count, oldest = session.execute(
        select(func.count(), func.min(func.coalesce(c.compacted_at, Run.created_at)))
        .select_from(Run)
        .outerjoin(c, c.run_key == Run.key)
        .where(*pending)
    ).one()
    age = 0.0 if oldest is None else max((utcnow() - oldest).total_seconds(), 0.0)
    yield Sample(
        "normwatch_compaction_pending_runs",
        float(count),
        "Runs with points not compacted yet.",
    )
    yield Sample(
        "normwatch_compaction_lag_seconds",
        age,
        "Time since the least recently compacted run with pending points was last compacted.",
    )
    hot = session.connection().execute(text("SELECT sum(count) FROM blocks")).scalar_one()
    yield Sample("normwatch_hot_points", float(hot or 0), "Points not compacted yet.")


# --- the hot table's dead rows -------------------------------------------------------------

VACUUM_THRESHOLD = 50_000
VACUUM_SCALE = 0.2
VACUUM_COST_DELAY_MS = 2


def vacuum_due(live_rows: int, dead_rows: int) -> bool:
    """Whether the hot table's dead rows have passed autovacuum's own trigger."""
    return dead_rows >= VACUUM_THRESHOLD + VACUUM_SCALE * live_rows


def vacuum_hot_table(sessions: sessionmaker[Session]) -> tuple[int, float] | None:
    """``VACUUM`` the ``blocks`` table when its dead rows pass autovacuum's own trigger
    (50,000 + 0.2 × the live rows, by the statistics Postgres keeps); the dead rows it
    found and the seconds it took, or None when nothing was due (or not on Postgres).

    Every point passes through ``blocks`` once, so the table deletes about as many rows as
    it takes in. Autovacuum (on by default) reclaims them; where it is off or falls behind,
    the dead rows piled up (2.6 GB for 3M live rows after 10 minutes of the soak) and made
    every insert and read of the table dearer. The compactor, which made the dead rows,
    then vacuums the table itself, throttled the way autovacuum is (cost delay 2 ms), and
    skips it while another vacuum holds it. Where autovacuum keeps up, this never comes due.
    """
    with sessions() as session:
        engine = session.get_bind()
    if not isinstance(engine, Engine) or engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables "
                "WHERE relid = 'blocks'::regclass"
            )
        ).first()
        conn.rollback()
    if row is None or not vacuum_due(row[0], row[1]):
        return None
    t0 = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"SET vacuum_cost_delay = {VACUUM_COST_DELAY_MS}"))
        try:
            conn.execute(text("VACUUM (SKIP_LOCKED) blocks"))
        finally:
            conn.execute(text("RESET vacuum_cost_delay"))
    return int(row[1]), time.perf_counter() - t0


# --- the background thread ---------------------------------------------------------------


MAX_PAUSE_S = 5.0
"""Longest rest between two routine runs of a pass."""


class Compactor:
    """Runs :func:`compact_pass` every ``interval_s`` in a daemon thread.

    Between two runs of a pass that were due by their clock it rests ``pace`` times as long
    as the first took (0: no rest); runs that piled up points are taken back to back.

    With ``retention`` (days, mode) it also sweeps old runs (see
    :mod:`normwatch.server.retention`) every ``retention_every_s``.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        policy: Policy,
        *,
        interval_s: float = 5.0,
        pace: float = 1.0,
        retention: tuple[float, str] | None = None,
        retention_every_s: float = 3600.0,
    ) -> None:
        self._sessions = sessions
        self._policy = policy
        self._interval = interval_s
        self._pace = pace
        self._retention = retention
        self._retention_every = retention_every_s
        self._next_sweep = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_report: PassReport | None = None

    @classmethod
    def from_settings(cls, sessions: sessionmaker[Session], settings: Settings) -> Compactor:
        """The compactor that ``settings`` describe (policy, interval, retention)."""
        return cls(
            sessions,
            Policy(
                chunk_points=settings.compaction_chunk_points,
                precision=settings.compaction_precision,
                max_age_s=settings.compaction_max_age_s,
                idle_s=settings.compaction_idle_s,
            ),
            interval_s=settings.compaction_interval_s,
            pace=settings.compaction_pace,
            retention=None
            if settings.retention_days is None
            else (settings.retention_days, settings.retention_mode),
        )

    @property
    def policy(self) -> Policy:
        return self._policy

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="normwatch-compactor", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                report = compact_pass(
                    self._sessions, self._policy, pause=self._pause if self._pace > 0 else None
                )
            except Exception:  # the database is down, say: try again next tick
                log.exception("compaction pass failed")
                continue
            self.last_report = report
            # Statistics reach the dead-row count a moment after the pass that made them:
            # look every pass, not only after one that compacted something.
            self._vacuum_if_bloated()
            if report.points:
                memory.trim()
                log.info(
                    "compacted %d points of %d series in %d runs (%d chunks) in %.2f s",
                    report.points,
                    report.series,
                    report.runs,
                    report.chunks_written,
                    report.seconds,
                )
            if self._retention is not None and time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + self._retention_every
                self._sweep(*self._retention)

    def _pause(self, took_s: float) -> bool:
        """Rest ``pace`` times as long as a routine run took (at most ``MAX_PAUSE_S``), so
        runs that come due together are spread over a few seconds instead of taking the
        CPU from reads and ingest in one burst; False once stopping."""
        return not self._stop.wait(min(took_s * self._pace, MAX_PAUSE_S))

    def _vacuum_if_bloated(self) -> None:
        try:
            vacuumed = vacuum_hot_table(self._sessions)
        except Exception:
            log.exception("vacuum of the hot table failed; it will be retried")
            return
        if vacuumed is not None:
            log.info("vacuumed the hot table (%d dead rows) in %.1f s", *vacuumed)

    def _sweep(self, days: float, mode: str) -> None:
        from . import retention

        try:
            swept = retention.sweep(
                self._sessions, days, "drop" if mode == "drop" else "summaries", self._policy
            )
        except Exception:
            log.exception("retention sweep failed; it will be retried")
            return
        if swept.runs:
            log.info("retention (%s, %g days): %d runs", mode, days, swept.runs)
