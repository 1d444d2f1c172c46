"""When a run reached its steps: the marks behind the x axis by wall time.

A metric batch that moves its run on leaves a mark, (segment, its last step, the unix time
it was logged), so that a chart can draw against time by interpolating between marks. The
marks are thinned as they are written: one at most every `MIN_GAP_S` seconds, and one at
most every `SPAN_SHARE` of the segment's time so far, so that a week-long run at a batch a
second keeps tens of thousands of marks, not hundreds of thousands; the first batch after a
restart of the server always leaves one. Reading brings at most `MAX_MARKS`, evenly thinned.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt
from sqlalchemy import text
from sqlalchemy.orm import Session

from ..db import PerEngine
from .runs import lineage_of, segments_of

__all__ = [
    "MAX_MARKS",
    "MIN_GAP_S",
    "SPAN_SHARE",
    "ClockThinning",
    "clock_of",
    "clock_thinning",
    "mark",
]

MIN_GAP_S = 1.0
SPAN_SHARE = 1 / 2000
MAX_MARKS = 20_000
_REMEMBERED = 4096


class ClockThinning:
    """The first and last mark written of recently seen segments, to thin marks without a
    read. At most `_REMEMBERED` segments, the least recently marked forgotten first (a
    forgotten segment's next batch leaves a mark: one more row, nothing lost)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[int, int], tuple[float, float]] = OrderedDict()

    def due(self, run_key: int, segment: int, at: float) -> bool:
        """Whether a batch logged at ``at`` leaves a mark; if so it is taken as written."""
        key = (run_key, segment)
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                first, last = seen
                gap = max(MIN_GAP_S, (at - first) * SPAN_SHARE)
                if last <= at < last + gap:
                    return False
                first = min(first, at)
            else:
                first = at
            self._seen[key] = (first, at)
            self._seen.move_to_end(key)
            while len(self._seen) > _REMEMBERED:
                self._seen.popitem(last=False)
            return True


clock_thinning = PerEngine(ClockThinning)
"""This process's `ClockThinning` for a database."""


def mark(session: Session, run_key: int, segment: int, step: int, at: float) -> None:
    """Record that the run's ``segment`` reached ``step`` at unix time ``at`` (a mark
    already there for that step stays)."""
    session.execute(
        text(
            "INSERT INTO run_clock (run_key, segment, step, at) "
            "VALUES (:k, :s, :step, :at) ON CONFLICT DO NOTHING"
        ),
        {"k": run_key, "s": segment, "step": step, "at": at},
    )


def clock_of(
    session: Session, run_key: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The run's marks along its latest history (a restart from an earlier step hides the
    marks its segment superseded), as steps ascending and their unix times; at most
    `MAX_MARKS`, every n-th kept (and the last) when there are more."""
    rows = session.execute(
        text("SELECT segment, step, at FROM run_clock WHERE run_key = :k ORDER BY step, segment"),
        {"k": run_key},
    ).all()
    if not rows:
        return np.empty(0, dtype=np.int64), np.empty(0)
    segments = np.array([r[0] for r in rows], dtype=np.int64)
    steps = np.array([r[1] for r in rows], dtype=np.int64)
    at = np.array([r[2] for r in rows], dtype=np.float64)
    keep = np.zeros(len(rows), dtype=bool)
    for segment, lo, hi in lineage_of(segments_of(session, run_key)).ranges:
        inside = segments == segment
        if lo is not None:
            inside &= steps >= lo
        if hi is not None:
            inside &= steps < hi
        keep |= inside
    steps, at = steps[keep], at[keep]
    if len(steps) > MAX_MARKS:
        picked = np.unique(np.linspace(0, len(steps) - 1, MAX_MARKS).round().astype(np.int64))
        steps, at = steps[picked], at[picked]
    return steps, at
