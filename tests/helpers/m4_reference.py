"""The brute-force M4 reference: which points `m4_select` must keep.

It cuts ``[start, end]`` into N equal-width step buckets with exact integer arithmetic and,
in each, takes the first and last point, the first point holding the minimum and the first
holding the maximum (NaN ignored, ±Infinity taking part as the extremes they are) and the
first NaN, as `m4_select` documents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Series:
    steps: IntArray
    values: FloatArray
    start: int
    end: int
    buckets: int

    def __repr__(self) -> str:
        return (
            f"Series(n={len(self.steps)}, start={self.start}, end={self.end}, "
            f"buckets={self.buckets}, steps={self.steps[:6].tolist()}..., "
            f"values={self.values[:6].tolist()}...)"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # hypothesis would print every field in full


def bucket_of(step: int, start: int, end: int, buckets: int) -> int:
    """The bucket of ``step``: floor((step - start) · N / (end - start + 1)), exactly."""
    return (step - start) * buckets // (end - start + 1)


def reference(series: Series) -> dict[int, set[int]]:
    """Per non-empty bucket, the indices M4 must keep."""
    members: dict[int, list[int]] = {}
    for i, step in enumerate(series.steps.tolist()):
        members.setdefault(bucket_of(step, series.start, series.end, series.buckets), []).append(i)
    values = series.values.tolist()
    keep: dict[int, set[int]] = {}
    for bucket, idx in members.items():
        chosen = {idx[0], idx[-1]}
        numbers = [i for i in idx if not math.isnan(values[i])]
        if numbers:
            low = min(values[i] for i in numbers)
            high = max(values[i] for i in numbers)
            chosen.add(next(i for i in numbers if values[i] == low))
            chosen.add(next(i for i in numbers if values[i] == high))
        nans = [i for i in idx if math.isnan(values[i])]
        if nans:
            chosen.add(nans[0])
        keep[bucket] = chosen
    return keep
