"""Spikes found over a whole run, kept for as long as the run's data stays the same.

A metric's spikes are found over the whole run, from every stored point, whatever range a
chart shows (`analytics.spike_report`): a page load, each zoom and each refresh of a run
page asked for the same answer again, a full-resolution read of a million points and a
scan of them each time. What a range changes is only which spikes are listed and the share
of the range's steps inside them. So each metric's spikes, the share of its steps in them
and its logged steps are kept (`.kept`) under the run's data version.

A kept answer still counts against the request's `Budget` as the read did, so a request
is refused or not whether its spikes were kept or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..analytics import spikes as spike_finder
from ..storage.versions import DataVersion
from .full_resolution import Reader, StepArray
from .kept import kept

FloatArray = npt.NDArray[np.float64]

__all__ = ["FoundSpikes", "found_spikes", "spikes_of"]


@dataclass(frozen=True)
class FoundSpikes:
    """One metric's spikes over the whole run, the share of its logged steps in them, its
    typical noise SD (`spikes.noise_sd`), and its logged steps (an arithmetic run as its
    first step, stride and count)."""

    spikes: list[spike_finder.Spike]
    fraction: float
    noise: float
    below: list[spike_finder.Spike] | None
    """The spikes at the next lower threshold (`spikes.lower_threshold`), where found."""
    points: int
    """Stored points read to find them."""
    first: int
    stride: int
    steps: StepArray | None
    """The logged steps, where they are no arithmetic run (else None)."""

    @classmethod
    def of(
        cls,
        steps: StepArray,
        spikes: list[spike_finder.Spike],
        noise: float = 0.0,
        below: list[spike_finder.Spike] | None = None,
    ) -> FoundSpikes:
        fraction = spike_finder.fraction_in_spikes(steps, spikes)
        n = len(steps)
        stride = int(steps[1] - steps[0]) if n > 1 else 1
        regular = n < 2 or bool((np.diff(steps) == stride).all())
        first = int(steps[0]) if n else 0
        listed = None if regular else steps.copy()
        return cls(spikes, fraction, noise, below, n, first, stride, listed)

    def steps_between(self, start: int | None, end: int | None) -> StepArray:
        """The logged steps in ``[start, end]`` (either end None: open)."""
        if self.steps is not None:
            lo = 0 if start is None else int(np.searchsorted(self.steps, start, side="left"))
            hi = (
                len(self.steps)
                if end is None
                else int(np.searchsorted(self.steps, end, side="right"))
            )
            return self.steps[lo:hi]
        # Indices i with start <= first + stride * i <= end, in Python's integers.
        lo = 0 if start is None else max(0, -(-(start - self.first) // self.stride))
        hi = self.points if end is None else min(self.points, (end - self.first) // self.stride + 1)
        if hi <= lo:
            return np.empty(0, dtype=np.int64)
        return self.first + self.stride * np.arange(lo, hi, dtype=np.int64)

    def nbytes(self) -> int:
        spikes = len(self.spikes) + len(self.below or ())
        return 256 + 96 * spikes + (0 if self.steps is None else self.steps.nbytes)


def spikes_of(steps: StepArray, values: FloatArray, threshold: float) -> FoundSpikes:
    """A series' spikes at ``threshold`` and at the next lower threshold, its share of
    steps in them and its noise: what is kept of it."""
    spikes = spike_finder.find_spikes(steps, values, threshold=threshold)
    lower = spike_finder.lower_threshold(threshold)
    below = None if lower is None else spike_finder.find_spikes(steps, values, threshold=lower)
    return FoundSpikes.of(steps, spikes, spike_finder.noise_sd(values), below)


def found_spikes(
    reader: Reader, name: str, version: DataVersion, threshold: float = spike_finder.THRESHOLD
) -> FoundSpikes:
    """The spikes of the run's stored metric ``name`` over the whole run (``reader`` reads
    the whole run) at ``threshold`` noise SDs, and at the next lower threshold, kept for
    ``version``; the read counts against the reader's budget, kept or not."""
    read: list[FoundSpikes] = []

    def find() -> FoundSpikes:
        steps, values = reader.series([name])[name]
        read.append(spikes_of(steps, values, threshold))
        return read[0]

    found = kept(version, ("spikes", name, threshold), find, FoundSpikes.nbytes)
    if not read:
        reader.budget.reading(reader.run.key, [name])
        reader.budget.charge(found.points)
    return found
