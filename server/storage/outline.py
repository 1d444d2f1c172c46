"""A chunk's outline: for each of its 64-point buckets, the first point and the largest.

The bucket summary (:mod:`.chunks`) says everything a chart needs, but it is compressed and
ten fields wide, and a read that wants one value a column from fifty series (the layer
grid's largest value, attribution's first shared step) would spend most of its time
inflating it. The outline is the part of the summary such reads use, stored beside it
uncompressed: per bucket the step and value of its first point and of its largest
(non-NaN) point, so that decoding a thousand chunks' outlines is one ``frombuffer``.

Layout: one byte saying how steps are kept (:data:`_NARROW`: ``uint32`` offsets from the
chunk's first step, the usual case; :data:`_WIDE`: ``int64`` steps, for a chunk spanning
more than 2³² steps), then the largest points' steps and values (``float64``, as the
summary holds them), then the first points' steps and values. A bucket whose values are
all NaN repeats its first point as its largest, with value NaN. At 64 buckets a chunk
that is 1,537 bytes, under the size where Postgres would compress and move it out of line;
and a read asks for the half it needs (`part_sql`), 768 bytes a chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from .chunks import FANOUT, NO_STEP, ChunkFormatError

_NARROW, _WIDE = 0, 1
_STEP_TYPES = {_NARROW: np.dtype("<u4"), _WIDE: np.dtype("<i8")}
_U32_MAX = int(np.iinfo(np.uint32).max)


Pick = Literal["first", "max"]


@dataclass(frozen=True)
class Picked:
    """One point a bucket from many outlines, in order: which row each came from."""

    row: npt.NDArray[np.int64]
    steps: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]


def _layout(kind: int, n: int) -> np.dtype[np.void]:
    steps_type = _STEP_TYPES[kind]
    return np.dtype(
        [
            ("kind", "u1"),
            ("max_step", steps_type, (n,)),
            ("max", "<f8", (n,)),
            ("first_step", steps_type, (n,)),
            ("first", "<f8", (n,)),
        ]
    )


def encode(buckets: npt.NDArray[np.void]) -> bytes:
    """The outline of a chunk whose bucket summary is ``buckets`` (`chunks.summarize`)."""
    firsts = buckets["first_step"].astype(np.int64)
    maxes = np.where(buckets["max_step"] == NO_STEP, firsts, buckets["max_step"])
    base = int(firsts[0])
    kind = _NARROW if int(max(firsts.max(), maxes.max())) - base <= _U32_MAX else _WIDE
    out = np.zeros(1, dtype=_layout(kind, len(buckets)))
    shift = base if kind == _NARROW else 0
    out["kind"] = kind
    out["max_step"][0], out["max"][0] = maxes - shift, buckets["max"]
    out["first_step"][0], out["first"][0] = firsts - shift, buckets["first"]
    return out.tobytes()


def part_sql(pick: Pick) -> str:
    """A SQL expression over a ``chunks`` row: the part of its outline that ``pick`` needs
    (steps then values), or the whole outline for a chunk spanning more than 2³² steps."""
    n = f"((count + {FANOUT - 1}) / {FANOUT})"
    at = "2" if pick == "max" else f"2 + 12 * {n}"
    return (
        f"CASE WHEN last_step - first_step <= {_U32_MAX} "
        f"THEN substr(outline, {at}, 12 * {n}) ELSE outline END"
    )


def decode_parts(blobs: Sequence[bytes], first_steps: Sequence[int], pick: Pick) -> Picked:
    """The points of `part_sql` values (each with its chunk's first step), in order.
    Parts of the same size are decoded together."""
    sizes = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
    # A part is 12 bytes a bucket; a whole (wide) outline 1 + 32.
    whole = sizes % 2 == 1
    if bool((sizes[~whole] % 12).any()) or bool(((sizes[whole] - 1) % 32).any()):
        raise ChunkFormatError("chunk outline not a whole number of buckets")
    counts = np.where(whole, (sizes - 1) // 32, sizes // 12)
    total = int(counts.sum())
    out = Picked(
        np.repeat(np.arange(len(blobs), dtype=np.int64), counts),
        np.empty(total, np.int64),
        np.empty(total, np.float64),
    )
    starts = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    bases = np.asarray(first_steps, dtype=np.int64)
    cuts = np.flatnonzero(np.diff(sizes) != 0) + 1
    bounds = [0, *cuts.tolist(), len(blobs)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        n = int(counts[lo])
        if n == 0:
            continue
        at = slice(int(starts[lo]), int(starts[hi]))
        joined = b"".join(blobs[lo:hi])
        if whole[lo]:
            block = np.frombuffer(joined, dtype=_layout(_WIDE, n))
            if bool((block["kind"] != _WIDE).any()):
                raise ChunkFormatError("a whole chunk outline should be a wide one")
            steps, values = block[f"{pick}_step"], block[pick]
            out.steps[at] = steps.ravel()
        else:
            part = np.dtype([("steps", "<u4", (n,)), ("values", "<f8", (n,))])
            block = np.frombuffer(joined, dtype=part)
            steps, values = block["steps"], block["values"]
            out.steps[at] = (steps.astype(np.int64) + bases[lo:hi, np.newaxis]).ravel()
        out.values[at] = values.ravel()
    return out


def decode(blob: bytes, first_step: int) -> dict[Pick, Picked]:
    """Both halves of one whole outline (for tests and tools)."""
    kind = blob[0]
    n = (len(blob) - 1) // (12 if kind == _NARROW else 16) // 2
    if kind not in _STEP_TYPES or len(blob) != _layout(kind, n).itemsize:
        raise ChunkFormatError("chunk outline of an unknown kind or not whole buckets")
    block = np.frombuffer(blob, dtype=_layout(kind, n))
    shift = first_step if kind == _NARROW else 0
    row = np.zeros(n, dtype=np.int64)
    return {
        pick: Picked(row, block[f"{pick}_step"][0].astype(np.int64) + shift, block[pick][0].copy())
        for pick in ("first", "max")
    }
