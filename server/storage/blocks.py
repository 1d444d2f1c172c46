"""Hot blocks: the points of one series from one batch, as one row.

A batch of ``S`` steps × ``M`` metrics is stored as ``M`` rows of the ``blocks`` table, not
``S · M`` rows of one point each: a row's fixed cost in Postgres (tuple header, index
entry, WAL record, about 100 bytes and a few microseconds) is then paid once per metric
and batch, and a trainer that sends 25 steps a request pays it once per 25 points.

A block holds its first and last step, its point count and the value at its last step as
columns (the series' latest value is read from them), and its points as two blobs:

- ``steps``: the steps as big-endian ``int8``, or NULL when they are evenly spaced
  (``first_step``, ``first_step + stride``, …, ``last_step``; the usual batch), so a
  regular block stores no steps at all;
- ``data``: the values as big-endian ``float8``, NaN and ±Infinity bit for bit.

Big-endian is Postgres' own binary order (``int8send``, ``float8send``), so SQL can build
and read blocks itself (a migration does). The points of one series' blocks never share a
step: ingest drops the points of a batch that are stored already (see
:func:`.points.write_points`).

>>> import numpy as np
>>> block = encode(np.array([10, 20, 30]), np.array([0.5, float("nan"), 2.0]))
>>> block.steps is None, block.first_step, block.last_step, block.count
(True, 10, 30, 3)
>>> decode(block.first_step, block.last_step, block.count, block.steps, block.data).steps
array([10, 20, 30])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..batch import MetricBatch
from .chunks import Points

__all__ = ["Block", "decode", "decode_many", "decode_rows", "encode", "full_batch", "of_batch"]


@dataclass(frozen=True)
class Block:
    """One series' points from one batch, as the ``blocks`` row stores them."""

    metric_id: int
    first_step: int
    last_step: int
    count: int
    last_value: float
    steps: bytes | None
    data: bytes


def encode(
    steps: npt.NDArray[np.int64], values: npt.NDArray[np.float64], metric_id: int = 0
) -> Block:
    """A block of ascending, distinct ``steps`` (at least one) and their ``values``."""
    count = len(steps)
    if count == 0 or count != len(values):
        raise ValueError(f"a block needs one value a step and at least one, got {count}")
    first, last = int(steps[0]), int(steps[-1])
    blob: bytes | None = None
    if count > 2:
        stride = (last - first) // (count - 1)
        regular = stride * (count - 1) == last - first and bool(np.all(np.diff(steps) == stride))
        if not regular:
            blob = steps.astype(">i8").tobytes()
    return Block(
        metric_id, first, last, count, float(values[-1]), blob, values.astype(">f8").tobytes()
    )


def decode(first: int, last: int, count: int, steps: bytes | None, data: bytes) -> Points:
    """The points of a stored block."""
    values = np.frombuffer(data, dtype=">f8").astype(np.float64)
    if steps is not None:
        return Points(np.frombuffer(steps, dtype=">i8").astype(np.int64), values)
    if count == 1:
        return Points(np.array([first], dtype=np.int64), values)
    stride = (last - first) // (count - 1)
    return Points(np.arange(first, last + 1, stride, dtype=np.int64), values)


def decode_many(rows: list[tuple[int, int, int, bytes | None, bytes]]) -> Points:
    """The points of several blocks of one series, ascending by step.

    ``rows`` are ``(first_step, last_step, count, steps, data)``, in any order.
    """
    _, points = decode_rows([(0, *row) for row in rows])
    return points


def decode_rows(
    rows: list[tuple[int, int, int, int, bytes | None, bytes]],
    between: tuple[int, int] | None = None,
) -> tuple[npt.NDArray[np.int64], Points]:
    """The points of many blocks at once: each point's metric id, and the points, ascending
    by (metric id, step).

    ``rows`` are ``(metric_id, first_step, last_step, count, steps, data)``, in any order.
    Evenly spaced steps are rebuilt for all blocks together, so the cost hardly grows with
    the number of blocks. With ``between`` (``(a, b)``), only the points of steps ``a..b``:
    each block is cut to them before anything is decoded, so reading a slice of large
    blocks (a page of an export) costs the slice, not the blocks.
    """
    if between is not None:
        rows = [cut for row in rows if (cut := _cut(row, *between)) is not None]
    if not rows:
        empty = np.empty(0, dtype=np.int64)
        return empty, Points(empty, np.empty(0, dtype=np.float64))
    meta = np.array([r[:4] for r in rows], dtype=np.int64)
    mids, firsts, lasts, counts = meta.T
    values = np.frombuffer(b"".join(bytes(r[5]) for r in rows), dtype=">f8").astype(np.float64)
    starts = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    strides = np.where(counts > 1, (lasts - firsts) // np.maximum(counts - 1, 1), 0)
    within = np.arange(starts[-1], dtype=np.int64) - np.repeat(starts[:-1], counts)
    steps = np.repeat(firsts, counts) + within * np.repeat(strides, counts)
    for i, row in enumerate(rows):
        if row[4] is not None:
            steps[starts[i] : starts[i + 1]] = np.frombuffer(bytes(row[4]), dtype=">i8")
    point_mids = np.repeat(mids, counts)
    order = np.lexsort((steps, point_mids))
    if not bool(np.all(order[1:] > order[:-1])):
        steps, values, point_mids = steps[order], values[order], point_mids[order]
    return point_mids, Points(steps, values)


def _cut(
    row: tuple[int, int, int, int, bytes | None, bytes], a: int, b: int
) -> tuple[int, int, int, int, bytes | None, bytes] | None:
    """A block row cut to its points of steps ``a..b`` (None: it has none there)."""
    mid, first, last, count, steps, data = row
    if first >= a and last <= b:
        return row
    if steps is None:
        stride = (last - first) // (count - 1) if count > 1 else 1
        lo = max(0, -(-(a - first) // stride))
        hi = min(count - 1, (b - first) // stride)
        if hi < lo:
            return None
        kept = bytes(memoryview(data)[lo * 8 : (hi + 1) * 8])
        return mid, first + lo * stride, first + hi * stride, hi - lo + 1, None, kept
    at = np.frombuffer(steps, dtype=">i8")
    lo, hi = int(np.searchsorted(at, a, side="left")), int(np.searchsorted(at, b, side="right"))
    if hi <= lo:
        return None
    cut_steps = bytes(memoryview(steps)[lo * 8 : hi * 8])
    values = bytes(memoryview(data)[lo * 8 : hi * 8])
    return mid, int(at[lo]), int(at[hi - 1]), hi - lo, cut_steps, values


def full_batch(
    batch: MetricBatch, metric_ids: dict[str, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64], bytes | None]:
    """A batch that logged every metric at every step, as its blocks share it: the metric
    ids (batch order), the ascending steps, the values (a row a metric, in step order) and
    the blocks' common ``steps`` field."""
    order = np.argsort(batch.steps, kind="stable")
    steps = batch.steps[order]
    values = batch.values[:, order] if len(order) > 1 else batch.values
    ids = np.fromiter(map(metric_ids.__getitem__, batch.names), np.int64, len(batch.names))
    return ids, steps, values, encode(steps, values[0]).steps


def of_batch(
    batch: MetricBatch,
    metric_ids: dict[str, int],
    keep: npt.NDArray[np.bool_] | None = None,
) -> list[Block]:
    """The batch's blocks, one a metric with at least one point, by metric id.

    ``keep`` (the shape of ``batch.logged``) narrows the points further: False drops one.
    """
    out: list[Block] = []
    if batch.all_logged and keep is None:
        ids, steps, values, shared = full_batch(batch, metric_ids)
        first, last, count = int(steps[0]), int(steps[-1]), len(steps)
        for mid, row in zip(ids.tolist(), values, strict=True):
            out.append(
                Block(mid, first, last, count, float(row[-1]), shared, row.astype(">f8").tobytes())
            )
    else:
        order = np.argsort(batch.steps, kind="stable")
        steps, values = batch.steps[order], batch.values[:, order]
        mask = batch.logged[:, order]
        if keep is not None:
            mask = mask & keep[:, order]
        for i in np.flatnonzero(mask.any(axis=1)).tolist():
            row = mask[i]
            out.append(encode(steps[row], values[i][row], metric_ids[batch.names[i]]))
    out.sort(key=lambda b: b.metric_id)
    return out
