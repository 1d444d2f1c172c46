"""Each metric's last value, minimum and maximum over the whole run, for many runs at once:
what a runs table shows in its metric columns.

A page of runs × a few metric names is read in a fixed number of statements, whatever the
number of runs: their segments, their metric rows (the last value compaction took in),
the top level of each series' summary pyramid (one bucket per 64² chunks, each with its
minimum and maximum) and their hot blocks (the points not compacted yet). The extremes
therefore cost a few summary rows a series, not its points.

Where a restart from an earlier checkpoint hides part of a segment (the latest lineage,
:func:`.runs.lineage_of`), a top-level bucket may straddle the hidden part's edge; such a
series (a restarted run's, only) is read by a walk of its pyramid down to that edge
(:func:`.pyramid.gather`), so its extremes stay those of the points a chart shows. Hot
points at or below a series' compacted watermark are left out: they are re-sent points
that wait for the next compaction, where the stored value wins.

NaN is no minimum or maximum (a series of NaN only has neither); a last value logged as
NaN is NaN.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from . import blocks, pyramid
from .chunks import LEVELS, NO_STEP
from .runs import Lineage, lineage_of
from .sql import any_key, fetch
from .summary_codec import decode_bucket_rows

__all__ = ["SeriesStats", "run_stats"]

_KEYS_PER_QUERY = 256
"""Series named in one statement at most: a page of runs × its columns is one or two."""


@dataclass(frozen=True)
class SeriesStats:
    """One metric of one run over its latest lineage."""

    last_step: int | None
    """The last step logged in the run's current segment (None: none yet)."""
    last: float | None
    """The value at ``last_step`` (NaN where NaN was logged; None without a step)."""
    min: float | None
    """The smallest value that is not NaN (None: there is none)."""
    max: float | None
    """The largest value that is not NaN (None: there is none)."""


@dataclass
class _Series:
    run_key: int
    metric_id: int
    name: str
    last_step: int | None
    last: float | None
    low: float = math.inf
    high: float = -math.inf
    cut: bool = False

    def take(self, values: npt.NDArray[np.float64]) -> None:
        """Widen the extremes by ``values`` (NaN left out)."""
        finite = values[~np.isnan(values)]
        if len(finite):
            self.low = min(self.low, float(finite.min()))
            self.high = max(self.high, float(finite.max()))

    def stats(self) -> SeriesStats:
        found = self.low <= self.high
        return SeriesStats(
            self.last_step, self.last, self.low if found else None, self.high if found else None
        )


def run_stats(
    session: Session, runs: Sequence[tuple[int, int]], names: Sequence[str]
) -> dict[tuple[int, str], SeriesStats]:
    """Each of ``names`` that each of ``runs`` (``(run_key, current segment)``) logged, by
    ``(run_key, name)``: its last value, minimum and maximum (`SeriesStats`). A name the
    run never logged is absent."""
    if not runs or not names:
        return {}
    conn = session.connection()
    keys = [int(k) for k, _ in runs]
    current = {int(k): int(s) for k, s in runs}
    lineages = _lineages(session, keys)
    series: dict[tuple[int, int], _Series] = {}
    rows = conn.execute(
        text(
            "SELECT id, run_key, name, last_step, last_value FROM metrics "
            "WHERE run_key IN :keys AND name IN :names"
        ).bindparams(bindparam("keys", expanding=True), bindparam("names", expanding=True)),
        {"keys": keys, "names": list(dict.fromkeys(names))},
    ).all()
    for mid, rk, name, step, value in rows:
        last = None if step is None else (math.nan if value is None else float(value))
        series[(int(rk), int(mid))] = _Series(
            int(rk), int(mid), name, None if step is None else int(step), last
        )
    ids = sorted(series)
    for lo in range(0, len(ids), _KEYS_PER_QUERY):
        part = ids[lo : lo + _KEYS_PER_QUERY]
        _summaries(session, part, series, lineages)
        _hot(session, part, series, lineages, current)
    for s in series.values():
        if s.cut:
            s.low, s.high = math.inf, -math.inf
            whole = pyramid.gather(
                session, s.run_key, s.metric_id, lineages[s.run_key], None, None, math.inf
            )
            s.take(whole.finish().values)
    return {(s.run_key, s.name): s.stats() for s in series.values()}


def _lineages(session: Session, keys: list[int]) -> dict[int, Lineage]:
    rows = session.connection().execute(
        text("SELECT run_key, segment, start_step FROM segments WHERE run_key IN :keys").bindparams(
            bindparam("keys", expanding=True)
        ),
        {"keys": keys},
    )
    found: dict[int, list[tuple[int, int | None]]] = defaultdict(list)
    for rk, seg, start in rows:
        found[int(rk)].append((int(seg), None if start is None else int(start)))
    return {k: lineage_of(found.get(k, [])) for k in keys}


def _visible(lineage: Lineage, segment: int) -> tuple[float, float] | None:
    """The steps ``[lo, hi]`` of ``segment`` the latest lineage shows (None: none)."""
    for seg, lo, hi in lineage.ranges:
        if seg == segment:
            return (-math.inf if lo is None else lo, math.inf if hi is None else hi - 1)
    return None


def _summaries(
    session: Session,
    part: list[tuple[int, int]],
    series: dict[tuple[int, int], _Series],
    lineages: dict[int, Lineage],
) -> None:
    """Widen each series' extremes by its top-level summary buckets in the lineage; mark
    it ``cut`` where a bucket straddles a hidden part's edge."""
    where, params = any_key(("run_key", "metric_id"), part)
    rows = fetch(
        session.connection(),
        f"SELECT run_key, metric_id, segment, buckets FROM rollups WHERE {where} "
        "AND level = :top ORDER BY run_key, metric_id, segment, seq",
        {**params, "top": LEVELS},
    )
    if not rows:
        return
    buckets, counts = decode_bucket_rows([bytes(r[3]) for r in rows])
    at = 0
    for (rk, mid, seg, _), count in zip(rows, counts.tolist(), strict=True):
        mine = buckets[at : at + count]
        at += count
        s = series[(int(rk), int(mid))]
        shown = _visible(lineages[s.run_key], int(seg))
        if shown is None:
            continue
        first, last = mine["first_step"], mine["last_step"]
        inside = (first >= shown[0]) & (last <= shown[1])
        overlap = (last >= shown[0]) & (first <= shown[1])
        if bool((overlap & ~inside).any()):
            s.cut = True
            continue
        kept = mine[inside]
        s.take(kept["min"][kept["min_step"] != NO_STEP])
        s.take(kept["max"][kept["max_step"] != NO_STEP])


def _hot(
    session: Session,
    part: list[tuple[int, int]],
    series: dict[tuple[int, int], _Series],
    lineages: dict[int, Lineage],
    current: dict[int, int],
) -> None:
    """Widen each series' extremes by its hot points in the lineage above its compacted
    watermark, and move its last value to its newest hot point in the current segment."""
    where, params = any_key(("run_key", "metric_id"), part)
    conn = session.connection()
    through = {
        (int(rk), int(mid), int(seg)): int(upto)
        for rk, mid, seg, upto in fetch(
            conn,
            f"SELECT run_key, metric_id, segment, through FROM series WHERE {where} "
            "AND through IS NOT NULL",
            params,
        )
    }
    rows = fetch(
        conn,
        "SELECT run_key, metric_id, segment, first_step, last_step, count, steps, data "
        f"FROM blocks WHERE {where}",
        params,
    )
    by_series: dict[tuple[int, int, int], list[tuple[int, int, int, bytes | None, bytes]]] = (
        defaultdict(list)
    )
    for rk, mid, seg, first, last, count, steps, data in rows:
        by_series[(int(rk), int(mid), int(seg))].append(
            (
                int(first),
                int(last),
                int(count),
                None if steps is None else bytes(steps),
                bytes(data),
            )
        )
    for (rk, mid, seg), found in by_series.items():
        s = series[(rk, mid)]
        points = blocks.decode_many(found)
        if seg == current[rk] and len(points):
            step = int(points.steps[-1])
            if s.last_step is None or step >= s.last_step:
                s.last_step, s.last = step, float(points.values[-1])
        shown = _visible(lineages[rk], seg)
        if shown is None:
            continue
        lo = max(shown[0], through.get((rk, mid, seg), -math.inf) + 1)
        keep = (points.steps >= lo) & (points.steps <= shown[1])
        s.take(points.values[keep])
