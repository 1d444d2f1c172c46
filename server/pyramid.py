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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, bindparam, text
from sqlalchemy.orm import Session

from . import chunks, storage
from .chunks import FANOUT, Points
from .compaction import LEVELS

_EMPTY = Points(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))


@dataclass(frozen=True)
class Gathered:
    """Candidate points of a range: every point where detail matters, summaries elsewhere."""

    points: Points
    total: int
    """How many stored points the range holds."""
    summarized: bool
    """True when some points are stood for by their bucket's extremes."""


def extent(
    session: Session, run_key: int, metric_id: int, lineage: storage.Lineage
) -> tuple[int, int] | None:
    """First and last stored step of the metric in the lineage (None when it has none)."""
    conn = session.connection()
    lo: int | None = None
    hi: int | None = None
    for seg, seg_lo, seg_hi in lineage.ranges:
        params = {"rk": run_key, "mid": metric_id, "seg": seg}
        row = conn.execute(
            text(
                "SELECT min(first_step), max(last_step) FROM rollups WHERE run_key = :rk "
                "AND metric_id = :mid AND segment = :seg AND level = :top"
            ),
            {**params, "top": LEVELS},
        ).one()
        hot = conn.execute(
            text(
                "SELECT min(step), max(step) FROM points WHERE run_key = :rk "
                "AND metric_id = :mid AND segment = :seg"
            ),
            params,
        ).one()
        firsts = [v for v in (row[0], hot[0]) if v is not None]
        lasts = [v for v in (row[1], hot[1]) if v is not None]
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
    lineage: storage.Lineage,
    start: int | None,
    end: int | None,
    pixel_steps: float,
) -> Gathered:
    """Candidates in ``[start, end]`` for a chart whose pixel is ``pixel_steps`` steps wide.

    ``pixel_steps`` 0 asks for every stored point (no summaries).
    """
    conn = session.connection()
    parts: list[Points] = []
    hot_parts: list[Points] = []
    total = 0
    summarized = False
    for seg, seg_lo, seg_hi in lineage.ranges:
        a = max(x for x in (start, seg_lo, np.iinfo(np.int64).min) if x is not None)
        b = min(
            x
            for x in (end, None if seg_hi is None else seg_hi - 1, np.iinfo(np.int64).max)
            if x is not None
        )
        if a > b:
            continue
        walk = _Walk(conn, run_key, metric_id, seg, int(a), int(b), pixel_steps)
        walk.run()
        parts.extend(walk.parts)
        total += walk.total
        summarized = summarized or walk.summarized
        hs, hv = storage.read_points(
            session, run_key, metric_id, storage.Lineage(((seg, seg_lo, seg_hi),)), start, end
        )
        if len(hs):
            hot_parts.append(Points(hs, hv))
    compacted = _concat(parts)
    hot = _concat(hot_parts)
    if len(hot) and len(compacted):
        dup = np.isin(hot.steps, compacted.steps, assume_unique=True)
        hot = hot.take(~dup)
    total += len(hot)
    merged = _concat([compacted, hot])
    if len(merged) > 1:
        steps, first = np.unique(merged.steps, return_index=True)
        merged = Points(steps, merged.values[first])
    return Gathered(merged, total, summarized)


def read_all(
    session: Session,
    run_key: int,
    metric_id: int,
    lineage: storage.Lineage,
    start: int | None,
    end: int | None,
) -> Points:
    """Every stored point in the range (hot and compacted), ascending by step."""
    return gather(session, run_key, metric_id, lineage, start, end, 0.0).points


def _concat(parts: list[Points]) -> Points:
    parts = [p for p in parts if len(p)]
    if not parts:
        return _EMPTY
    if len(parts) == 1:
        return parts[0]
    return Points(
        np.concatenate([p.steps for p in parts]), np.concatenate([p.values for p in parts])
    )


class _Walk:
    """One segment's part of a read: the pyramid from the top level down to chunk data."""

    def __init__(
        self, conn: Connection, run_key: int, metric_id: int, segment: int, a: int, b: int, w: float
    ) -> None:
        self.conn = conn
        self.key = {"rk": run_key, "mid": metric_id, "seg": segment}
        self.a, self.b, self.w = a, b, w
        self.parts: list[Points] = []
        self.total = 0
        self.summarized = False

    def _classify(
        self, buckets: npt.NDArray[np.void]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Which buckets to use whole (summary) and which to open."""
        first, last = buckets["first_step"], buckets["last_step"]
        overlap = (last >= self.a) & (first <= self.b)
        inside = (first >= self.a) & (last <= self.b)
        narrow = ((last - first) < self.w) | (buckets["count"] == 1)
        use = overlap & inside & narrow
        return use, overlap & ~use

    def _emit(self, buckets: npt.NDArray[np.void]) -> None:
        if len(buckets):
            self.parts.append(chunks.bucket_points(buckets))
            self.total += int(buckets["count"].sum())
            if bool((buckets["count"] > 1).any()):
                self.summarized = True

    def run(self) -> None:
        # Rollup levels, top down: each bucket of a level-L row is one level-(L-1) unit.
        rows: list[tuple[int, bytes]] = [
            (int(seq), bytes(blob))
            for seq, blob in self.conn.execute(
                text(
                    "SELECT seq, buckets FROM rollups WHERE run_key = :rk AND metric_id = :mid "
                    "AND segment = :seg AND level = :level AND last_step >= :a "
                    "AND first_step <= :b ORDER BY seq"
                ),
                {**self.key, "level": LEVELS, "a": self.a, "b": self.b},
            )
        ]
        for level in range(LEVELS, 0, -1):
            children: list[int] = []
            for seq, blob in rows:
                buckets = chunks.decode_buckets(blob)
                use, open_ = self._classify(buckets)
                self._emit(buckets[use])
                children.extend((seq * FANOUT + np.flatnonzero(open_)).tolist())
            if not children:
                return
            if level > 1:
                rows = self._rows(
                    "SELECT seq, buckets FROM rollups WHERE run_key = :rk AND metric_id = :mid "
                    "AND segment = :seg AND level = :level AND seq IN :seqs ORDER BY seq",
                    children,
                    level=level - 1,
                )
        self._chunks(children)

    def _rows(self, sql: str, seqs: list[int], **extra: int) -> list[tuple[int, bytes]]:
        stmt = text(sql).bindparams(bindparam("seqs", expanding=True))
        out: list[tuple[int, bytes]] = []
        for i in range(0, len(seqs), 2000):
            out.extend(
                (int(s), bytes(b))
                for s, b in self.conn.execute(
                    stmt, {**self.key, **extra, "seqs": seqs[i : i + 2000]}
                )
            )
        return out

    def _chunks(self, seqs: list[int]) -> None:
        """Chunk level: 64-point buckets, and the points themselves where those don't do."""
        need_data: dict[int, npt.NDArray[np.bool_]] = {}
        summaries: dict[int, npt.NDArray[np.void]] = {}
        for seq, blob in self._rows(
            "SELECT seq, buckets FROM chunks WHERE run_key = :rk AND metric_id = :mid "
            "AND segment = :seg AND seq IN :seqs ORDER BY seq",
            seqs,
        ):
            buckets = chunks.decode_buckets(blob)
            use, open_ = self._classify(buckets)
            self._emit(buckets[use])
            if open_.any():
                need_data[seq] = open_
                summaries[seq] = buckets
        if not need_data:
            return
        stmt = text(
            "SELECT seq, data FROM chunks WHERE run_key = :rk AND metric_id = :mid "
            "AND segment = :seg AND seq IN :seqs"
        ).bindparams(bindparam("seqs", expanding=True))
        for seq, data in self.conn.execute(stmt, {**self.key, "seqs": sorted(need_data)}):
            open_ = need_data[int(seq)]
            if data is None:  # retention kept the summaries only: they stand in for the points
                buckets = summaries[int(seq)][open_]
                pts = chunks.bucket_points(buckets)
                keep = (pts.steps >= self.a) & (pts.steps <= self.b)
                self.parts.append(pts.take(keep))
                self.total += int(keep.sum())
                self.summarized = True
                continue
            pts = chunks.decode(bytes(data))
            member = np.repeat(open_, FANOUT)[: len(pts)]
            keep = member & (pts.steps >= self.a) & (pts.steps <= self.b)
            self.parts.append(pts.take(keep))
            self.total += int(keep.sum())
