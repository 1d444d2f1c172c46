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
from ..errors import Invalid
from ..models import Run
from ..storage import pyramid
from ..storage.metric_ids import metric_names
from ..storage.points import series_keys

MAX_ANALYSIS_POINTS = 20_000_000
"""Points one request may use at full resolution, counted for every series each time an
expression or analysis uses it (16 bytes a point in memory)."""

MAX_ANALYSIS_SERIES = 2_048
"""Stored series one request may read at full resolution (each read is a query)."""

StepArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
SeriesArrays = tuple[StepArray, FloatArray]


@dataclass
class Reader:
    """Reads one run's metrics at full resolution over ``[start, end]``, within a budget.

    A series read once is kept for the request: expressions that share inputs read them
    once. Every use counts against ``budget`` points, and at most ``max_series`` distinct
    series are read; past either the request is refused (`Invalid`, 422) with the limit's
    name and a hint.
    """

    session: Session
    run: Run
    start: int | None
    end: int | None
    budget: int = MAX_ANALYSIS_POINTS
    read: int = 0
    """Points used so far (a kept series counts again at each use)."""
    _names: list[str] | None = None
    aliases: AliasMap = EMPTY
    """The project's aliases: a canonical name the run did not store reads its alias."""
    max_series: int = MAX_ANALYSIS_SERIES
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

    def series(self, names: Sequence[str]) -> dict[str, SeriesArrays]:
        """Every stored point of each name (float32-compacted values merely widened)."""
        wanted = [name for name in dict.fromkeys(names) if name not in self._kept]
        if len(self._kept) + len(wanted) > self.max_series:
            raise Invalid(
                f"this request would read {len(self._kept) + len(wanted):,} series at full "
                f"resolution, more than the {self.max_series:,} one request may read; "
                "name a narrower glob or fewer metrics"
            )
        if wanted:
            lineage, ids = series_keys(self.session, self.run.key, wanted)
            for name in wanted:
                mid = ids.get(name)
                if mid is None:
                    self._kept[name] = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
                    continue
                got = pyramid.gather(
                    self.session, self.run.key, mid, lineage, self.start, self.end, 0.0
                )
                self.charge(len(got.points))
                self._kept[name] = (got.points.steps, got.points.values)
        out = {name: self._kept[name] for name in names}
        self.charge(sum(len(out[name][0]) for name in names if name not in wanted))
        return out

    def charge(self, points: int) -> None:
        """Count ``points`` used; refuse the request once they pass the budget."""
        self.read += points
        if self.read > self.budget:
            raise Invalid(
                f"this analysis would use more than {self.budget:,} stored points; "
                "narrow the range (start, end) or name fewer metrics"
            )


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
