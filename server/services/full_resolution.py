"""Every stored point of the metrics an analysis reads, within a bound.

Analytics (derived series, transitions, spikes) are computed from every stored point of
their inputs over the requested range, never from what a chart was downsampled to. This
module finds the metrics (names and globs, with the alert rules' glob syntax) and reads
their points, counting as it goes: past ``MAX_ANALYSIS_POINTS`` a request is refused with a
hint to narrow the range, so no analysis can hold a worker's memory hostage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from ..alerts.selectors import metric_matches
from ..aliases import EMPTY, AliasMap
from ..analytics.derived import Name
from ..errors import TooLarge
from ..models import Run
from ..storage import pyramid
from ..storage.metric_ids import metric_names
from ..storage.points import series_keys

MAX_ANALYSIS_POINTS = 20_000_000
"""Stored points one request may read at full resolution (16 bytes each in memory)."""

StepArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass
class Reader:
    """Reads one run's metrics at full resolution over ``[start, end]``, counting points."""

    session: Session
    run: Run
    start: int | None
    end: int | None
    budget: int = MAX_ANALYSIS_POINTS
    read: int = 0
    _names: list[str] | None = None
    aliases: AliasMap = EMPTY
    """The project's aliases: a canonical name the run did not store reads its alias."""

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
            return list(self.aliases.matching(pattern.pattern, self.names()).values())
        if not pattern.is_glob:
            return [pattern.pattern] if pattern.pattern in self.names() else []
        return [name for name in self.names() if metric_matches(pattern.pattern, name)]

    def series(self, names: Sequence[str]) -> dict[str, tuple[StepArray, FloatArray]]:
        """Every stored point of each name (float32-compacted values merely widened)."""
        lineage, ids = series_keys(self.session, self.run.key, list(names))
        out = {}
        for name in names:
            mid = ids.get(name)
            if mid is None:
                out[name] = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
                continue
            got = pyramid.gather(
                self.session, self.run.key, mid, lineage, self.start, self.end, 0.0
            )
            self.read += len(got.points)
            if self.read > self.budget:
                raise TooLarge(
                    f"this analysis would read more than {self.budget:,} stored points; "
                    "narrow the range (start, end) or name fewer metrics"
                )
            out[name] = (got.points.steps, got.points.values)
        return out
