"""Where compacted points go: each series' chunks (the unfinished tail grows, a late point
joins the chunk that covers its step) and the rollup rows of the summary pyramid above them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, text

from . import chunks, summary_codec
from .chunks import FANOUT, LEVELS, Points
from .policy import Policy
from .sql import KEYS_PER_QUERY, any_key, fetch


@dataclass
class SeriesState:
    chunks: int = 0
    through: int | None = None
    tail_count: int = 0
    points: int = 0
    exists: bool = False


@dataclass
class Rollup:
    buckets: npt.NDArray[np.void]
    changed: bool = False


@dataclass
class SeriesWork:
    metric_id: int
    state: SeriesState
    written: dict[int, Points] = field(default_factory=dict)
    exact: set[int] = field(default_factory=set)
    """Chunks among ``written`` that were stored as float64: they are packed as float64
    again whatever the compaction precision, since rounding them would lose what they
    kept (see `precision_of`)."""

    def precision_of(self, seq: int, precision: str) -> str:
        """The precision chunk ``seq`` is packed at under a policy of ``precision``."""
        return "float64" if seq in self.exact else precision


def place(
    conn: Connection,
    policy: Policy,
    run_key: int,
    segment: int,
    work: SeriesWork,
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
            if not chunks.holds_float32(bytes(row[0])):
                work.exact.add(seq)
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


def load_tails(
    conn: Connection, run_key: int, segment: int, tails: dict[int, int], precision: str
) -> tuple[dict[int, Points], set[int]]:
    """The chunks ``{metric: seq}`` names that still hold their points, by metric, ready to
    be merged and packed again at ``precision``; and the metrics whose tail is float64
    (it stays float64, see `SeriesWork.exact`).

    A float32 tail packed again as float32 keeps its values merely widened (packing rounds
    them to the same float32s); one packed as float64 (a chunk of the earlier float32
    default, growing under the lossless one) takes their :func:`chunks.readable` form, the
    values its reads gave, so no read of an old point changes."""
    out: dict[int, Points] = {}
    exact: set[int] = set()
    keys = sorted(tails.items())
    for i in range(0, len(keys), KEYS_PER_QUERY):
        clause, params = any_key(("metric_id", "seq"), keys[i : i + KEYS_PER_QUERY])
        params.update(rk=run_key, seg=segment)
        rows = fetch(
            conn,
            "SELECT metric_id, data FROM chunks WHERE run_key = :rk AND segment = :seg "
            f"AND ({clause})",
            params,
            prepare=False,
        )
        for mid, data in rows:
            if data is not None:
                points, narrow = chunks.decode_raw(bytes(data))
                if narrow and precision != "float32":
                    points = Points(points.steps, chunks.readable(points.values.astype(np.float32)))
                if not narrow:
                    exact.add(int(mid))
                out[int(mid)] = points
    return out, exact


def load_rollups(
    conn: Connection, run_key: int, segment: int, works: list[SeriesWork]
) -> dict[tuple[int, int, int], Rollup]:
    """The rollup rows the written chunks fall under, keyed by (metric, level, seq)."""
    wanted: set[tuple[int, int, int]] = set()
    for work in works:
        for seq in work.written:
            for level in range(1, LEVELS + 1):
                wanted.add((work.metric_id, level, seq // FANOUT**level))
    out: dict[tuple[int, int, int], Rollup] = {}
    keys = sorted(wanted)
    for i in range(0, len(keys), KEYS_PER_QUERY):
        clause, params = any_key(("metric_id", "level", "seq"), keys[i : i + KEYS_PER_QUERY])
        params.update(rk=run_key, seg=segment)
        rows = fetch(
            conn,
            "SELECT metric_id, level, seq, buckets FROM rollups WHERE run_key = :rk "
            f"AND segment = :seg AND ({clause})",
            params,
            prepare=False,
        )
        for mid, level, seq, blob in rows:
            out[(int(mid), int(level), int(seq))] = Rollup(
                summary_codec.decode_buckets(bytes(blob)).copy()
            )
    return out


def set_slot(
    rollups: dict[tuple[int, int, int], Rollup],
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
        row = rollups[key] = Rollup(np.zeros(0, dtype=chunks.BUCKET))
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
