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

The walk of one segment is :mod:`.walk`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from . import chunks
from .chunks import LEVELS, Points
from .points import ascending, concat_points, read_points
from .runs import Lineage
from .sql import fetch
from .walk import Walk

_I64 = np.iinfo(np.int64)


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
    [row] = fetch(session.connection(), "SELECT " + ", ".join(columns), params)
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
        walk = Walk(conn, run_key, metric_id, seg, int(a), int(b), pixel_steps)
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
    compacted = concat_points(parts)
    compacted_narrow = None
    if any(n is not None for n in part_narrow):
        compacted_narrow = np.concatenate(
            [
                np.zeros(len(p), np.bool_) if n is None else n
                for p, n in zip(parts, part_narrow, strict=True)
            ]
        )
    hot = concat_points(hot_parts)
    if len(hot) and len(compacted):
        dup = np.isin(hot.steps, compacted.steps, assume_unique=True)
        hot = hot.take(~dup)
    total += len(hot)
    if compacted_narrow is None:
        return Gathered(ascending([compacted, hot])[0], total, summarized)
    points, narrow = ascending([compacted, hot], [compacted_narrow, False])
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
