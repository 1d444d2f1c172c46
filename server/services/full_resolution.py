"""Every stored point of the metrics an analysis reads, within a bound.

Analytics (derived series, transitions, spikes) are computed from every stored point of
their inputs over the requested range, never from what a chart was downsampled to. This
module finds the metrics (names and globs, with the alert rules' glob syntax, matched
against an index of the run's names that is kept across requests) and reads their points,
counting as it goes: past ``MAX_ANALYSIS_SERIES`` series or ``MAX_ANALYSIS_POINTS`` points
used a request is refused (422) with a hint to narrow it, so no analysis can hold a worker's
time or memory hostage.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from ..alerts.selectors import NameIndex
from ..aliases import EMPTY, AliasMap
from ..aliases.resolution import matching_visible
from ..analytics.derived import Name
from ..analytics.hierarchy import outermost
from ..errors import Invalid
from ..models import Run
from ..storage import pyramid
from ..storage.metric_ids import metric_names
from ..storage.points import series_keys
from ..storage.runs import Lineage

MAX_ANALYSIS_POINTS = 20_000_000
"""Points one request may use at full resolution, counted for every series each time an
expression or analysis uses it (16 bytes a point in memory)."""

MAX_ANALYSIS_SERIES = 2_048
"""Stored series one request may read at full resolution (each read is a query)."""

StepArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
SeriesArrays = tuple[StepArray, FloatArray]


@dataclass
class Budget:
    """What one request may read and use at full resolution, shared by its readers (a
    comparison reads several runs): ``points`` used, a series counting again each time it
    is used, and ``series`` read from storage. Past either the request is refused
    (`Invalid`, 422) with the limit and a hint."""

    points: int = MAX_ANALYSIS_POINTS
    series: int = MAX_ANALYSIS_SERIES
    used_points: int = 0
    _series_read: set[tuple[int, str]] = field(default_factory=set)

    def charge(self, points: int) -> None:
        """Count ``points`` used; refuse the request once they pass the limit."""
        self.used_points += points
        if self.used_points > self.points:
            raise Invalid(
                f"this analysis would use more than {self.points:,} stored points; "
                "narrow the range (start, end) or name fewer metrics"
            )

    def reading(self, run_key: int, names: Sequence[str]) -> None:
        """Count the series of ``names`` about to be read (a series read again, over
        another range, counts once); refuse them, before any is read, past the limit."""
        new = {(run_key, name) for name in names} - self._series_read
        if len(self._series_read) + len(new) > self.series:
            raise Invalid(
                f"this request would read {len(self._series_read) + len(new):,} series at "
                f"full resolution, more than the {self.series:,} one request may read; "
                "name a narrower glob or fewer metrics (or runs)"
            )
        self._series_read |= new


@dataclass
class Reader:
    """Reads one run's metrics at full resolution over ``[start, end]``, within a `Budget`
    (its own, or the request's when given).

    A series read once is kept for the request: expressions that share inputs read them
    once, and every use counts against the budget's points.
    """

    session: Session
    run: Run
    start: int | None
    end: int | None
    budget: Budget = field(default_factory=Budget)
    _names: list[str] | None = None
    aliases: AliasMap = EMPTY
    """The project's aliases: a canonical name the run did not store reads its alias."""
    lineage: Lineage | None = None
    """The history read (None: the run's latest; an export may ask for an earlier one)."""
    _kept: dict[str, SeriesArrays] = field(default_factory=dict)

    def names(self) -> list[str]:
        if self._names is None:
            self._names = metric_names(self.session, self.run.key)
        return self._names

    def matching(self, pattern: Name) -> list[str]:
        """The run's metrics a name or glob stands for (a name: itself, if logged, else
        its stored alias; a glob: the stored names and canonical names it matches)."""
        if self.aliases:
            if not pattern.is_glob:
                source = self.aliases.resolve(pattern.pattern, set(self.names()))
                return [] if source is None else [source]
            visible = self.aliases.visible(self.names())
            found = matching_visible(pattern.pattern, visible, name_index(list(visible)))
            return list(found.values())
        if not pattern.is_glob:
            return [pattern.pattern] if pattern.pattern in self.names() else []
        return name_index(self.names()).matching(pattern.pattern)

    def counted(self, pattern: Name) -> list[str]:
        """`matching`, with a glob's names each counted once (the hierarchy rule,
        `.analytics.hierarchy.outermost`, on the names as the run shows them: a total seen
        through its alias gives way to its parts as a stored total does)."""
        if not pattern.is_glob:
            return self.matching(pattern)
        if self.aliases:
            visible = self.aliases.visible(self.names())
            found = matching_visible(pattern.pattern, visible, name_index(list(visible)))
            return [found[name] for name in outermost(found)]
        return outermost(name_index(self.names()).matching(pattern.pattern))

    def series(self, names: Sequence[str]) -> dict[str, SeriesArrays]:
        """Every stored point of each name, each value as every other read gives it
        (`pyramid.Gathered.finish`: the export, `history` and a series at full resolution),
        so that an analysis names the same number for the same point."""
        wanted = [name for name in dict.fromkeys(names) if name not in self._kept]
        self.budget.reading(self.run.key, wanted)
        if wanted:
            lineage, ids = series_keys(self.session, self.run.key, wanted)
            lineage = self.lineage or lineage
            for name in wanted:
                mid = ids.get(name)
                if mid is None:
                    self._kept[name] = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
                    continue
                got = pyramid.gather(
                    self.session, self.run.key, mid, lineage, self.start, self.end, 0.0
                )
                self.budget.charge(len(got.points))
                points = got.finish()
                self._kept[name] = (points.steps, points.values)
        out = {name: self._kept[name] for name in names}
        self.budget.charge(sum(len(out[name][0]) for name in names if name not in wanted))
        return out


MAX_INDEXED_NAMES = 1_000_000
"""Metric names the kept indexes of `name_index` hold at most, all runs together."""


class _KeptIndexes:
    """`NameIndex` objects by the names they index, least recently used dropped first once
    they hold more than `MAX_INDEXED_NAMES` names. Thread-safe."""

    def __init__(self) -> None:
        self._indexes: OrderedDict[tuple[str, ...], NameIndex] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, names: Sequence[str]) -> NameIndex:
        key = tuple(names)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
        index = NameIndex(key)  # outside the lock: joining many names takes a while
        with self._lock:
            if key not in self._indexes:
                self._indexes[key] = index
                self._size += len(key)
            while self._size > MAX_INDEXED_NAMES and len(self._indexes) > 1:
                dropped, _ = self._indexes.popitem(last=False)
                self._size -= len(dropped)
        return index


_kept_indexes = _KeptIndexes()


def name_index(names: Sequence[str]) -> NameIndex:
    """The `NameIndex` of ``names``, kept across requests while the names stay the same
    (a run's names only grow, so a new metric makes a new index); what each glob matched
    is kept with it, so a glob repeated across requests is matched once."""
    return _kept_indexes.get(names)
