"""One segment's part of a chart read: the summary pyramid walked from the top level down
to chunk data, with the hot blocks of the range fetched in the same round trip.

A read costs two queries of the pyramid, whatever the number of rows it opens: one for the
rollup rows of every level (a row's own first and last step and count say whether the
walk will open it), one for the chunks (consecutive ones asked for as a range of ``seq``),
with their data where their buckets are about a pixel wide or wider, or the chunk is cut
by the range's edge, since those will be opened. Each level's rows are decoded and
classified as one array, and the blobs come in the driver's binary format.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection

from . import blocks, chunks, summary_codec
from .chunks import FANOUT, LEVELS, Points
from .points import ascending, clip
from .sql import fetch, padded

_RUNS_PER_QUERY = 256


_HOT_LEVEL = -1


_HOT = (
    f"SELECT {_HOT_LEVEL}, count, steps, data, first_step, last_step FROM blocks "
    "WHERE run_key = :rk AND metric_id = :mid AND segment = :seg "
    "AND first_step <= :b AND last_step >= :a"
)
"""The hot blocks of a range, in the columns of the rollup query they are joined to."""


Buckets = npt.NDArray[np.void]


SeqArray = npt.NDArray[np.int64]


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
    buckets, counts = summary_codec.decode_bucket_rows([blob for _, blob in rows])
    return buckets, _running_total(counts)


def _children(rows: list[tuple[int, bytes]], offsets: npt.NDArray[np.int64]) -> SeqArray:
    """Each bucket's number one level down: its row's ``seq`` · 64 + its slot in the row."""
    counts = np.diff(offsets)
    row = np.repeat(np.arange(len(rows)), counts)
    seqs = np.fromiter((seq for seq, _ in rows), dtype=np.int64, count=len(rows))
    return seqs[row] * FANOUT + np.arange(offsets[-1], dtype=np.int64) - offsets[row]


class Walk:
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
        rows = fetch(
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
        return ascending(summaries + self.parts, [False] * len(summaries) + self.narrow)

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
        for level, seq, blob, data, first, last in fetch(
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
            out += fetch(self.conn, f"{sql} AND ({ranges}) ORDER BY seq", params)
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
