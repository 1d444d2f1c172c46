"""Series reads over hot points, compacted chunks and the summary pyramid.

A read of steps ``[a, b]`` for a chart ``w`` steps a pixel wide walks the pyramid top down:
a bucket wholly inside the range and narrower than a pixel stands for its points by its
first, last, minimum and maximum (and first NaN), each a real stored point; a wider bucket,
or one cut by the range's edge, is opened one level down. Chunks are decoded only where a
pixel is narrower than 64 points or at the two edges, so a read costs what the chart has
pixels, not what the run has steps. The hot (not yet compacted) points are read as they are
and merged in; where a step is in both, the compacted point wins.

M4 on the merged candidates then keeps each pixel's first, last, minimum and maximum, as it
would on every raw point: exactly, where buckets fall within pixels, and at worst choosing a
pixel's extreme from a bucket that spans two neighbouring pixels. A spike is always some
bucket's maximum, so it is never lost.

A read costs two queries of the pyramid, whatever the number of rows it opens: one for the
rollup rows of every level (a row's own first and last step and count say whether the
walk will open it), one for the chunks (consecutive ones asked for as a range of ``seq``),
with their data where their buckets are about a pixel wide or wider, or the chunk is cut
by the range's edge, since those will be opened. Each level's rows are decoded and
classified as one array, and the blobs come in the driver's binary format.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from . import blocks, chunks
from .chunks import FANOUT, LEVELS, Points
from .points import clip, read_points
from .runs import Lineage
from .sql import padded, psycopg_of

_EMPTY = Points(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
_I64 = np.iinfo(np.int64)
_RUNS_PER_QUERY = 256
_NAMED = re.compile(r"(?<!:):(\w+)")
_HOT_LEVEL = -1
_HOT = (
    f"SELECT {_HOT_LEVEL}, count, steps, data, first_step, last_step FROM blocks "
    "WHERE run_key = :rk AND metric_id = :mid AND segment = :seg "
    "AND first_step <= :b AND last_step >= :a"
)
"""The hot blocks of a range, in the columns of the rollup query they are joined to."""

Buckets = npt.NDArray[np.void]
SeqArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Gathered:
    """Candidate points of a range: every point where detail matters, summaries elsewhere."""

    points: Points
    """Candidates by step. Values from float32 chunks are merely widened (see `finish`)."""
    total: int
    """How many stored points the range holds."""
    summarized: bool
    """True when some points are stood for by their bucket's extremes."""
    narrow: npt.NDArray[np.bool_] | None = None
    """Which candidates came widened from float32 (None: none did)."""

    def finish(self, keep: npt.NDArray[np.int64] | None = None) -> Points:
        """The candidates ``keep`` picks (all by default), float32 ones in their
        shortest-decimal form (`chunks.readable`).

        That form keeps order and equality, so choosing points (M4) before it gives the same
        points as after; it costs about 0.2 µs a value, so it is paid for the few points a
        chart gets rather than for all of a zoom's candidates.
        """
        points = self.points if keep is None else self.points.take(keep)
        if self.narrow is None:
            return points
        narrow = self.narrow if keep is None else self.narrow[keep]
        if not narrow.any():
            return points
        values = points.values.copy()
        values[narrow] = chunks.readable(values[narrow].astype(np.float32))
        return Points(points.steps, values)


def extent(
    session: Session, run_key: int, metric_id: int, lineage: Lineage
) -> tuple[int, int] | None:
    """First and last stored step of the metric in the lineage (None when it has none)."""
    if not lineage.ranges:
        return None
    # One round trip: four scalar subqueries a segment, each a walk down a primary key.
    params: dict[str, int] = {"rk": run_key, "mid": metric_id, "top": LEVELS}
    columns: list[str] = []
    for i, (seg, _, _) in enumerate(lineage.ranges):
        params[f"s{i}"] = seg
        key = f"run_key = :rk AND metric_id = :mid AND segment = :s{i}"
        columns += [
            f"(SELECT min(first_step) FROM rollups WHERE {key} AND level = :top)",
            f"(SELECT max(last_step) FROM rollups WHERE {key} AND level = :top)",
            f"(SELECT min(first_step) FROM blocks WHERE {key})",
            f"(SELECT max(last_step) FROM blocks WHERE {key})",
        ]
    [row] = _fetch(session.connection(), "SELECT " + ", ".join(columns), params)
    lo: int | None = None
    hi: int | None = None
    for i, (_, seg_lo, seg_hi) in enumerate(lineage.ranges):
        top_first, top_last, hot_first, hot_last = row[4 * i : 4 * i + 4]
        firsts = [int(v) for v in (top_first, hot_first) if v is not None]
        lasts = [int(v) for v in (top_last, hot_last) if v is not None]
        if not firsts:
            continue
        first, last = min(firsts), max(lasts)
        if seg_lo is not None:
            first = max(first, seg_lo)
        if seg_hi is not None:
            last = min(last, seg_hi - 1)
        if first > last:
            continue
        lo = first if lo is None else min(lo, first)
        hi = last if hi is None else max(hi, last)
    return None if lo is None or hi is None else (lo, hi)


def gather(
    session: Session,
    run_key: int,
    metric_id: int,
    lineage: Lineage,
    start: int | None,
    end: int | None,
    pixel_steps: float,
) -> Gathered:
    """Candidates in ``[start, end]`` for a chart whose pixel is ``pixel_steps`` steps wide.

    ``pixel_steps`` 0 asks for every stored point (no summaries).
    """
    conn = session.connection()
    parts: list[Points] = []
    part_narrow: list[npt.NDArray[np.bool_] | None] = []
    hot_parts: list[Points] = []
    total = 0
    summarized = False
    for seg, seg_lo, seg_hi in lineage.ranges:
        a = max(x for x in (start, seg_lo, _I64.min) if x is not None)
        b = min(x for x in (end, None if seg_hi is None else seg_hi - 1, _I64.max) if x is not None)
        if a > b:
            continue
        walk = _Walk(conn, run_key, metric_id, seg, int(a), int(b), pixel_steps)
        walk.run()
        found, narrow = walk.points()
        parts.append(found)
        part_narrow.append(narrow)
        total += walk.total
        summarized = summarized or walk.summarized
        if walk.hot is None:
            hs, hv = read_points(
                session, run_key, metric_id, Lineage(((seg, seg_lo, seg_hi),)), start, end
            )
            walk.hot = Points(hs, hv)
        hot_parts.append(walk.without_compacted(walk.hot))
    compacted = _concat(parts)
    compacted_narrow = None
    if any(n is not None for n in part_narrow):
        compacted_narrow = np.concatenate(
            [
                np.zeros(len(p), np.bool_) if n is None else n
                for p, n in zip(parts, part_narrow, strict=True)
            ]
        )
    hot = _concat(hot_parts)
    if len(hot) and len(compacted):
        dup = np.isin(hot.steps, compacted.steps, assume_unique=True)
        hot = hot.take(~dup)
    total += len(hot)
    if compacted_narrow is None:
        return Gathered(_ascending([compacted, hot])[0], total, summarized)
    points, narrow = _ascending([compacted, hot], [compacted_narrow, False])
    return Gathered(points, total, summarized, narrow)


def read_all(
    session: Session,
    run_key: int,
    metric_id: int,
    lineage: Lineage,
    start: int | None,
    end: int | None,
) -> Points:
    """Every stored point in the range (hot and compacted), ascending by step."""
    return gather(session, run_key, metric_id, lineage, start, end, 0.0).finish()


def _concat(parts: list[Points]) -> Points:
    parts = [p for p in parts if len(p)]
    if not parts:
        return _EMPTY
    if len(parts) == 1:
        return parts[0]
    return Points(
        np.concatenate([p.steps for p in parts]), np.concatenate([p.values for p in parts])
    )


Flags = bool | npt.NDArray[np.bool_]


def _ascending(
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
    merged = _concat([p for p, _ in by_first])
    steps = merged.steps
    if len(steps) < 2 or bool((steps[1:] > steps[:-1]).all()):
        return merged, np.concatenate([m for _, m in by_first]) if flagged else None
    merged = _concat([p for p, _ in kept])
    steps, first = np.unique(merged.steps, return_index=True)
    mask = np.concatenate([m for _, m in kept])[first] if flagged else None
    return Points(steps, merged.values[first]), mask


def _fetch(conn: Connection, sql: str, params: Mapping[str, float]) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (``:name`` parameters), through the driver itself on Postgres.

    There they come in binary format, so summary and chunk blobs arrive as stored rather
    than as hex text: a zoomed-out read fetches a few hundred kilobytes of them, and the
    hex costs the server and the client about three times as long as the bytes. Errors come
    out as SQLAlchemy's would (``OperationalError`` for a lost connection, then invalidated).
    """
    if not isinstance(conn.connection.driver_connection, psycopg.Connection):
        return [tuple(r) for r in conn.execute(text(sql), params)]
    with psycopg_of(conn, sql) as driver, driver.cursor(binary=True) as cursor:
        cursor.execute(_pyformat(sql), params)
        return cursor.fetchall()


@functools.lru_cache(maxsize=256)
def _pyformat(sql: str) -> str:
    """``:name`` parameters as psycopg's ``%(name)s``."""
    return _NAMED.sub(r"%(\1)s", sql)


def _running_total(counts: npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """0 and the running sums of ``counts``: where each row's items start, then the total."""
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _seq_runs(seqs: SeqArray) -> list[tuple[int, int]]:
    """Ascending ``seqs`` as inclusive ranges of consecutive numbers."""
    cut = np.flatnonzero(np.diff(seqs) != 1)
    lows = np.concatenate((seqs[:1], seqs[cut + 1]))
    highs = np.concatenate((seqs[cut], seqs[-1:]))
    return list(zip(lows.tolist(), highs.tolist(), strict=True))


def _unpack(rows: list[tuple[int, bytes]]) -> tuple[Buckets, npt.NDArray[np.int64]]:
    """Rows' buckets as one array, and where each row's start in it (then their total)."""
    if not rows:
        return np.zeros(0, dtype=chunks.BUCKET), np.zeros(1, dtype=np.int64)
    buckets, counts = chunks.decode_bucket_rows([blob for _, blob in rows])
    return buckets, _running_total(counts)


def _children(rows: list[tuple[int, bytes]], offsets: npt.NDArray[np.int64]) -> SeqArray:
    """Each bucket's number one level down: its row's ``seq`` · 64 + its slot in the row."""
    counts = np.diff(offsets)
    row = np.repeat(np.arange(len(rows)), counts)
    seqs = np.fromiter((seq for seq, _ in rows), dtype=np.int64, count=len(rows))
    return seqs[row] * FANOUT + np.arange(offsets[-1], dtype=np.int64) - offsets[row]


class _Walk:
    """One segment's part of a read: the pyramid from the top level down to chunk data."""

    def __init__(
        self, conn: Connection, run_key: int, metric_id: int, segment: int, a: int, b: int, w: float
    ) -> None:
        self.conn = conn
        self.key = {"rk": run_key, "mid": metric_id, "seg": segment}
        self.a, self.b, self.w = a, b, w
        self.used: list[Buckets] = []
        self.parts: list[Points] = []
        self.narrow: list[bool] = []
        """Per part: its values are float32 widened, not yet in shortest-decimal form."""
        self.total = 0
        self.summarized = False
        self.hot: Points | None = None
        """The hot points of the range, when they came with the rollups (Postgres)."""

    def _classify(self, buckets: Buckets) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Which buckets to use whole (summary) and which to open."""
        first, last = buckets["first_step"], buckets["last_step"]
        overlap = (last >= self.a) & (first <= self.b)
        inside = (first >= self.a) & (last <= self.b)
        narrow = ((last - first) < self.w) | (buckets["count"] == 1)
        use = overlap & inside & narrow
        return use, overlap & ~use

    def _use(self, buckets: Buckets, use: npt.NDArray[np.bool_]) -> None:
        """Keep ``buckets[use]`` as summaries (all of them, uncopied, in a zoomed-out read)."""
        if not use.all():
            buckets = buckets[use]
        if len(buckets):
            self.used.append(buckets)
            counts = buckets["count"]
            self.total += int(counts.sum())
            if bool((counts > 1).any()):
                self.summarized = True

    def without_compacted(self, hot: Points) -> Points:
        """``hot`` less the points whose step is compacted already (and stood for by one of
        the summaries the walk used): a point re-sent after its step was compacted waits
        hot for the next compaction, where the stored value wins; a read must not count or
        draw it meanwhile. Points in opened chunks are matched by step in `gather`; here
        only the few late points inside a summary cost a look at their chunks' steps.
        """
        if not self.used or not len(hot):
            return hot
        used = self.used[0] if len(self.used) == 1 else np.concatenate(self.used)
        order = np.argsort(used["first_step"], kind="stable")
        firsts, lasts = used["first_step"][order], used["last_step"][order]
        at = np.searchsorted(firsts, hot.steps, side="right") - 1
        inside = (at >= 0) & (hot.steps <= lasts[np.maximum(at, 0)])
        if not inside.any():
            return hot
        late = hot.steps[inside]
        rows = _fetch(
            self.conn,
            "SELECT first_step, last_step, data FROM chunks WHERE run_key = :rk "
            "AND metric_id = :mid AND segment = :seg AND first_step <= :hi AND last_step >= :lo",
            {**self.key, "lo": int(late.min()), "hi": int(late.max())},
        )
        stored = np.zeros(len(late), dtype=np.bool_)
        for first, last, data in rows:
            if data is None:  # thinned by retention: its steps are no longer known one by one
                stored |= (late >= first) & (late <= last)
            else:
                stored |= np.isin(late, chunks.decode(bytes(data)).steps)
        compacted = np.zeros(len(hot), dtype=np.bool_)
        compacted[inside] = stored
        return hot.take(~compacted) if compacted.any() else hot

    def points(self) -> tuple[Points, npt.NDArray[np.bool_] | None]:
        """What the walk found, ascending by step, and which of it is widened float32."""
        # Each level's summaries are in step order, and so are the opened chunks' points.
        summaries = [chunks.bucket_points(b) for b in self.used]
        return _ascending(summaries + self.parts, [False] * len(summaries) + self.narrow)

    def run(self) -> None:
        # Every rollup row the walk can need, in one query: the top level's rows in the
        # range, and a lower level's rows whose own bucket one level up will be opened.
        # That bucket's first and last step and count are the row's own columns, and a
        # bucket that is opened has every bucket above it opened too (it is cut by the
        # range's edge or a pixel wide, and so is every bucket that holds it).
        sql = (
            "SELECT level, seq, buckets, NULL::bytea, NULL::bigint, NULL::bigint "
            "FROM rollups WHERE run_key = :rk "
            "AND metric_id = :mid AND segment = :seg AND last_step >= :a AND first_step <= :b "
            "AND (level = :top OR NOT (first_step >= :a AND last_step <= :b "
            "AND (last_step - first_step < :w OR count = 1)))"
        )
        postgres = self.conn.dialect.name == "postgresql"
        if postgres:
            # The hot blocks come in the same round trip.
            sql = f"({sql}) UNION ALL ({_HOT})"
        else:
            sql = sql.replace("NULL::bytea, NULL::bigint, NULL::bigint", "NULL, NULL, NULL")
        fetched: dict[int, dict[int, bytes]] = {}
        hot: list[tuple[int, int, int, bytes | None, bytes]] = []
        for level, seq, blob, data, first, last in _fetch(
            self.conn, sql, {**self.key, "top": LEVELS, "a": self.a, "b": self.b, "w": self.w}
        ):
            if level == _HOT_LEVEL:
                hot.append((first, last, seq, blob, data))
            else:
                fetched.setdefault(int(level), {})[int(seq)] = bytes(blob)
        if postgres:
            self.hot = clip(blocks.decode_many(hot), self.a, self.b)
        rows = sorted(fetched.get(LEVELS, {}).items())
        for level in range(LEVELS, 0, -1):
            # Each bucket of a level-L row is one level-(L-1) unit.
            buckets, offsets = _unpack(rows)
            use, open_ = self._classify(buckets)
            self._use(buckets, use)
            if not open_.any():
                return
            children = _children(rows, offsets)[open_]
            if level == 1:
                self._chunks(children, buckets[open_])
                return
            have = fetched.get(level - 1, {})
            rows = [(seq, have[seq]) for seq in children.tolist() if seq in have]
            if len(rows) < len(children):  # not expected; the rows' columns disagree
                missing = np.array([s for s in children.tolist() if s not in have], np.int64)
                rows += self._blobs(
                    "SELECT seq, buckets FROM rollups WHERE run_key = :rk AND metric_id = :mid "
                    "AND segment = :seg AND level = :level",
                    missing,
                    level=level - 1,
                )
                rows.sort()

    def _rows(self, sql: str, seqs: SeqArray, **extra: int) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` numbered ``seqs``, ascending by ``seq``.

        Consecutive numbers go as one ``BETWEEN``, so a level costs one query however many
        rows it opens.
        """
        runs = _seq_runs(np.sort(seqs))
        out: list[tuple[Any, ...]] = []
        for i in range(0, len(runs), _RUNS_PER_QUERY):
            part = padded(runs[i : i + _RUNS_PER_QUERY])
            params: dict[str, int] = {**self.key, **extra}
            for j, (lo, hi) in enumerate(part):
                params[f"lo{j}"], params[f"hi{j}"] = lo, hi
            ranges = " OR ".join(f"seq BETWEEN :lo{j} AND :hi{j}" for j in range(len(part)))
            out += _fetch(self.conn, f"{sql} AND ({ranges}) ORDER BY seq", params)
        return out

    def _blobs(self, sql: str, seqs: SeqArray, **extra: int) -> list[tuple[int, bytes]]:
        """``(seq, buckets)`` rows of ``sql`` (see `_rows`)."""
        return [(int(r[0]), bytes(r[1])) for r in self._rows(sql, seqs, **extra)]

    def _chunks(self, seqs: SeqArray, summaries: Buckets) -> None:
        """Chunk level: 64-point buckets, and the points themselves where those don't do.

        ``summaries`` are the chunks' one-bucket summaries, from their level-1 row.
        """
        first, last = summaries["first_step"], summaries["last_step"]
        cut = (first < self.a) | (last > self.b)
        # A chunk's buckets span about (last - first) · 64 / count steps; if that is a
        # pixel or more they will be opened, so the chunk's data comes in the same query.
        wide = (last - first) * FANOUT >= self.w * np.maximum(summaries["count"], 1)
        early = cut | wide
        where = "FROM chunks WHERE run_key = :rk AND metric_id = :mid AND segment = :seg"
        data: dict[int, bytes | None] = {}
        rows: list[tuple[int, bytes]] = []
        if early.any():
            for seq, blob, stored in self._rows(f"SELECT seq, buckets, data {where}", seqs[early]):
                rows.append((int(seq), bytes(blob)))
                data[int(seq)] = None if stored is None else bytes(stored)
        if not early.all():
            rows += self._blobs(f"SELECT seq, buckets {where}", seqs[~early])
            rows.sort()
        buckets, offsets = _unpack(rows)
        use, open_ = self._classify(buckets)
        self._use(buckets, use)
        if not open_.any():
            return
        opened_before = _running_total(open_)
        opened = np.flatnonzero(opened_before[offsets[1:]] > opened_before[offsets[:-1]]).tolist()
        missing = [rows[i][0] for i in opened if rows[i][0] not in data]
        if missing:
            for seq, stored in self._rows(
                f"SELECT seq, data {where}", np.array(missing, dtype=np.int64)
            ):
                data[int(seq)] = None if stored is None else bytes(stored)
        for i in opened:
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            self._open(data[rows[i][0]], buckets[lo:hi], open_[lo:hi])

    def _open(self, blob: bytes | None, buckets: Buckets, open_: npt.NDArray[np.bool_]) -> None:
        """The points of one chunk's opened buckets that lie in the range."""
        if blob is None:  # retention kept the summaries only: they stand in for the points
            pts = chunks.bucket_points(buckets[open_])
            self.summarized = True
            narrow = False
        else:
            pts, narrow = chunks.decode_raw(blob)
            if not open_.all():
                pts = pts.take(np.repeat(open_, FANOUT)[: len(pts)])
        if len(pts) and (pts.steps[0] < self.a or pts.steps[-1] > self.b):
            pts = pts.take((pts.steps >= self.a) & (pts.steps <= self.b))
        self.parts.append(pts)
        self.narrow.append(narrow)
        self.total += len(pts)
