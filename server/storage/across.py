"""Reads across many series of one run at once, one statement a segment for all of them.

The layer grid wants each column's largest value from fifty series, attribution each
column's first step that fifty series share, the depth profile the points near one step.
A chart read per series costs a pyramid walk and three statements each; these read every
series' chunks in one statement and their hot blocks in another. A chunk whose 64-point
buckets are narrower than a column is stood for by its outline (each bucket's first and
largest point, :mod:`.outline`): a point a bucket, and each a stored point. A chunk with
wider buckets, or cut by the range's edge, comes with its points.

Hot points are merged in; one whose step lies inside a compacted chunk's span is left out,
as a chart read leaves out a point re-sent after its step was compacted (it waits hot for
the next compaction, where the stored value wins; a late point for a step the chunk never
had shows from that compaction on).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from . import blocks, chunks, outline
from .chunks import FANOUT, LEVELS, Points
from .outline import Pick
from .points import ascending, clip
from .runs import Lineage
from .sql import fetch, padded

_I64 = np.iinfo(np.int64)


Piece = tuple[Points, bool]
"""Points of one series, and whether their values are float32 merely widened."""


@dataclass(frozen=True)
class Read:
    series: list[Points]
    """Per metric id asked for, in that order: its points, ascending by step."""
    narrow: list[npt.NDArray[np.bool_] | None]
    """Per series, which values are float32 merely widened (None: none is); give the ones
    you keep their shortest-decimal form with `chunks.readable`, as a chart read does."""
    exact: bool
    """True when every stored point of the range is among them (no outline stood in)."""


def read(
    session: Session,
    run_key: int,
    metric_ids: list[int],
    lineage: Lineage,
    start: int | None,
    end: int | None,
    width: float,
    pick: Pick,
) -> Read:
    """The points of ``metric_ids`` in ``[start, end]`` for columns ``width`` steps wide:
    where a chunk's buckets are narrower than that, each bucket's ``pick`` point only.

    ``width`` 0 reads every stored point.
    """
    pieces: dict[int, list[Piece]] = defaultdict(list)
    exact = True
    for seg, seg_lo, seg_hi in lineage.ranges:
        a = max(x for x in (start, seg_lo, _I64.min) if x is not None)
        b = min(x for x in (end, None if seg_hi is None else seg_hi - 1, _I64.max) if x is not None)
        if a <= b and metric_ids:
            got = _segment(session, run_key, metric_ids, seg, int(a), int(b), width, pick, pieces)
            exact = exact and got
    joined = [_joined(pieces.get(i, [])) for i in range(len(metric_ids))]
    return Read([p for p, _ in joined], [n for _, n in joined], exact)


def extent(
    session: Session, run_key: int, metric_ids: list[int], lineage: Lineage
) -> tuple[int, int] | None:
    """First and last stored step of any of ``metric_ids`` in the lineage (None when they
    have none): `pyramid.extent` of them all, in one statement a segment."""
    lo: int | None = None
    hi: int | None = None
    if not metric_ids:
        return None
    where, ids = _in_list(metric_ids)
    for seg, seg_lo, seg_hi in lineage.ranges:
        params: dict[str, int] = {**ids, "rk": run_key, "seg": seg, "top": LEVELS}
        key = f"run_key = :rk AND segment = :seg AND metric_id IN {where}"
        [row] = fetch(
            session.connection(),
            f"SELECT (SELECT min(first_step) FROM rollups WHERE {key} AND level = :top), "
            f"(SELECT max(last_step) FROM rollups WHERE {key} AND level = :top), "
            f"(SELECT min(first_step) FROM blocks WHERE {key}), "
            f"(SELECT max(last_step) FROM blocks WHERE {key})",
            params,
        )
        firsts = [int(v) for v in (row[0], row[2]) if v is not None]
        lasts = [int(v) for v in (row[1], row[3]) if v is not None]
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


def _in_list(ids: list[int]) -> tuple[str, dict[str, int]]:
    """``IN (:m0, …)`` over ``ids`` (`padded`, so statements repeat), and its parameters."""
    part = padded(ids)
    return (
        "(" + ", ".join(f":m{i}" for i in range(len(part))) + ")",
        {f"m{i}": int(v) for i, v in enumerate(part)},
    )


def _segment(
    session: Session,
    run_key: int,
    metric_ids: list[int],
    seg: int,
    a: int,
    b: int,
    width: float,
    pick: Pick,
    pieces: dict[int, list[Piece]],
) -> bool:
    """Add one segment's points to ``pieces`` (by index into ``metric_ids``); whether
    they are every stored point."""
    conn = session.connection()
    where, ids = _in_list(metric_ids)
    params: dict[str, float] = {**ids, "rk": run_key, "seg": seg, "a": a, "b": b, "w": width}
    index = {mid: i for i, mid in enumerate(metric_ids)}
    rows = fetch(
        conn,
        f"SELECT metric_id, first_step, last_step, count, {outline.part_sql(pick)}, "
        "CASE WHEN outline IS NULL OR first_step < :a OR last_step > :b "
        f"OR (last_step - first_step) * {FANOUT} >= :w * count THEN data END "
        f"FROM chunks WHERE run_key = :rk AND segment = :seg AND metric_id IN {where} "
        "AND last_step >= :a AND first_step <= :b ORDER BY metric_id, first_step",
        params,
    )
    if rows:
        mids, firsts, lasts, counts, summaries, datas = zip(*rows, strict=True)
    else:
        mids, firsts, lasts, counts, summaries, datas = (), (), (), (), (), ()
    owners = np.fromiter((index[m] for m in mids), np.int64, len(rows))
    first_steps = np.fromiter(firsts, np.int64, len(rows))
    last_steps = np.fromiter(lasts, np.int64, len(rows))
    for k in [k for k, data in enumerate(datas) if data is not None]:
        points, narrow = chunks.decode_raw(bytes(datas[k]))
        pieces[int(owners[k])].append((clip(points, a, b), narrow))
    outlined = [k for k, (s, d) in enumerate(zip(summaries, datas, strict=True)) if d is None and s]
    exact = not outlined
    if outlined:
        got = outline.decode_parts(
            [summaries[k] for k in outlined],
            first_steps[outlined].tolist(),
            last_steps[outlined].tolist(),
            [counts[k] for k in outlined],
            pick,
        )
        owner = owners[outlined][got.row]
        steps, values, widened = got.steps, got.values, got.narrow
        inside = (steps >= a) & (steps <= b)
        if not inside.all():
            steps, values, owner, widened = (
                steps[inside],
                values[inside],
                owner[inside],
                widened[inside],
            )
        # Rows came by metric id then step, so each series' buckets are one run (cut
        # again where outlines of float32 and float64 values meet).
        cuts = np.flatnonzero((np.diff(owner) != 0) | (np.diff(widened) != 0)) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(owner)], strict=True):
            if hi > lo:
                points = Points(steps[lo:hi], values[lo:hi])
                pieces[int(owner[lo])].append((points, bool(widened[lo])))
    hot = fetch(
        conn,
        "SELECT metric_id, first_step, last_step, count, steps, data FROM blocks "
        f"WHERE run_key = :rk AND segment = :seg AND metric_id IN {where} "
        "AND first_step <= :b AND last_step >= :a",
        params,
    )
    if hot:
        hot_mids, points = blocks.decode_rows([tuple(r) for r in hot], between=(a, b))
        for mid in np.unique(hot_mids).tolist():
            i = index[mid]
            lo, hi = np.searchsorted(hot_mids, [mid, mid + 1])
            mine = clip(points.take(slice(int(lo), int(hi))), a, b)
            own = owners == i
            mine = mine.take(~_inside_any(mine.steps, first_steps[own], last_steps[own]))
            if len(mine):
                pieces[i].append((mine, False))
    return exact


def _inside_any(
    steps: npt.NDArray[np.int64], firsts: npt.NDArray[np.int64], lasts: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Which ``steps`` lie inside one of the spans ``[firsts[k], lasts[k]]`` (ascending and
    not overlapping, as one series' chunks are)."""
    at = np.searchsorted(firsts, steps, side="right") - 1
    return (at >= 0) & (steps <= lasts[np.maximum(at, 0)]) if len(firsts) else at < -1


def _joined(parts: list[Piece]) -> tuple[Points, npt.NDArray[np.bool_] | None]:
    """Pieces of one series as one ascending set of points, and which are narrow."""
    if not parts:
        return Points(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)), None
    return ascending([p for p, _ in parts], [n for _, n in parts])
