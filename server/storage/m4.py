"""M4 downsampling: keep each bucket's first, last, minimum and maximum point.

A chart of N pixel columns drawn from the first, last, min and max of each column's
points is pixel-identical to one drawn from every point (Jugel et al., "M4: A
Visualization-Oriented Time Series Data Aggregation", VLDB 2014), so a one-step
spike survives at every zoom level, unlike "every k-th point" or reservoir sampling.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def m4_select(steps: IntArray, values: FloatArray, buckets: int, start: int, end: int) -> IntArray:
    """Indices of the points M4 keeps, in ascending step order.

    ``steps`` must be sorted ascending and lie in ``[start, end]``. The step range is cut
    into ``buckets`` equal-width buckets; from each non-empty bucket the first, last,
    minimum and maximum points are kept (at most 4 · buckets indices). NaN is ignored
    by min/max; a bucket holding a NaN also keeps its first NaN, so a non-finite value
    is never hidden (at most one extra point per such bucket). ±Infinity takes part in
    min/max as the extreme it is.

    >>> s = np.arange(10, dtype=np.int64); v = np.zeros(10); v[7] = 9.0
    >>> m4_select(s, v, 1, 0, 9).tolist()
    [0, 7, 9]
    """
    n = len(steps)
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    if n == 0:
        return np.empty(0, dtype=np.int64)
    bucket = bucket_of(steps, buckets, int(start), int(end))
    # Start index of each run of equal bucket ids (steps are sorted, so buckets are too).
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], n] - 1

    nan = np.isnan(values)
    low = np.where(nan, np.inf, values)
    high = np.where(nan, -np.inf, values)
    keep = [starts, ends]
    keep.append(_segment_argext(low, starts, np.minimum, nan))
    keep.append(_segment_argext(high, starts, np.maximum, nan))
    if nan.any():
        nan_idx = np.flatnonzero(nan)
        owner = np.searchsorted(starts, nan_idx, side="right") - 1
        first_in_bucket = np.r_[True, owner[1:] != owner[:-1]]
        keep.append(nan_idx[first_in_bucket])
    selected = np.unique(np.concatenate(keep))
    return selected[selected >= 0]


def bucket_of(steps: IntArray, buckets: int, start: int, end: int) -> IntArray:
    """Each step's bucket, ``⌊(step − start) · buckets / (end − start + 1)⌋``, exactly.

    In integers, not floats: with steps near 2**53 and beyond, a float quotient put points
    at a bucket's edge into its neighbour. Where the product could pass 2**63, the buckets'
    first steps are worked out in Python's unbounded integers instead.
    """
    span = end - start + 1
    bucket: IntArray
    if (span - 1) * buckets < 2**63:
        bucket = (steps - np.int64(start)) * np.int64(buckets) // np.int64(span)
    else:
        # Bucket k's first step is start + ⌈k · span / buckets⌉.
        firsts = [start + -(-k * span // buckets) for k in range(1, buckets)]
        bucket = np.searchsorted(np.array(firsts, dtype=np.int64), steps, side="right")
    clipped: IntArray = np.clip(bucket, 0, buckets - 1).astype(np.int64, copy=False)
    return clipped


def _segment_argext(
    vals: FloatArray, starts: IntArray, op: np.ufunc, nan: npt.NDArray[np.bool_]
) -> IntArray:
    """Index of the first extreme value of each segment; -1 for an all-NaN segment."""
    ext = op.reduceat(vals, starts)
    seg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(vals)]))
    hit = (vals == ext[seg]) & ~nan
    hit_idx = np.flatnonzero(hit)
    out = np.full(len(starts), -1, dtype=np.int64)
    if len(hit_idx):
        hit_seg = seg[hit_idx]
        first = np.r_[True, hit_seg[1:] != hit_seg[:-1]]
        out[hit_seg[first]] = hit_idx[first]
    return out
