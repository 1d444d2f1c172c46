"""A chunk's outline: for each of its 64-point buckets, the first point and the largest.

The bucket summary (:mod:`.chunks`) says everything a chart needs, but it is compressed and
ten fields wide, and a read that wants one value a column from fifty series (the layer
grid's largest value, attribution's first shared step) would spend most of its time
inflating it. The outline is the part of the summary such reads use, stored beside it
uncompressed: per bucket the step and value of its first point and of its largest
(non-NaN) point, so that decoding a thousand chunks' outlines is one ``frombuffer``.

Layout: one byte saying how steps and values are kept, then the largest points' steps and
values, then the first points' steps and values:

- :data:`_NARROW32`, the usual case: ``uint32`` offsets from the chunk's first step and
  ``float32`` values, for a float32 chunk (the summary holds each value in its
  `chunks.readable` form, which the float32 gives back). 16 bytes a bucket: 1,025 bytes for
  a chunk of 64 buckets. A read gets these values merely widened, flagged ``narrow``, as
  it gets a float32 chunk's points.
- :data:`_NARROW`: ``uint32`` offsets and ``float64`` values (a float64 chunk, and every
  outline written before float32 ones were): 24 bytes a bucket.
- :data:`_WIDE`: ``int64`` steps and ``float64`` values, for a chunk spanning more than 2³²
  steps: 32 bytes a bucket.

A bucket whose values are all NaN repeats its first point as its largest, with value NaN.
An outline stays under the size where Postgres would compress it or move it out of line,
and a read asks for the half it needs (`part_sql`), 512 or 768 bytes a chunk; the kinds
differ in length for the same number of buckets, which is how both the SQL and
`decode_parts` tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .chunks import FANOUT, NO_STEP, ChunkFormatError, readable

_NARROW, _WIDE, _NARROW32 = 0, 1, 2
_STEP_TYPES: dict[int, np.dtype[Any]] = {
    _NARROW: np.dtype("<u4"),
    _WIDE: np.dtype("<i8"),
    _NARROW32: np.dtype("<u4"),
}
_VALUE_TYPES: dict[int, np.dtype[Any]] = {
    _NARROW: np.dtype("<f8"),
    _WIDE: np.dtype("<f8"),
    _NARROW32: np.dtype("<f4"),
}
_BUCKET_BYTES = {
    kind: 2 * (_STEP_TYPES[kind].itemsize + _VALUE_TYPES[kind].itemsize) for kind in _STEP_TYPES
}
_U32_MAX = int(np.iinfo(np.uint32).max)


Pick = Literal["first", "max"]


@dataclass(frozen=True)
class Picked:
    """One point a bucket from many outlines, in order: which row each came from."""

    row: npt.NDArray[np.int64]
    steps: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    narrow: npt.NDArray[np.bool_]
    """Which values are float32 merely widened (from a float32 outline): their shortest
    decimal form is `chunks.readable` of them, as for a float32 chunk's points."""


def _layout(kind: int, n: int) -> np.dtype[np.void]:
    steps_type, values_type = _STEP_TYPES[kind], _VALUE_TYPES[kind]
    return np.dtype(
        [
            ("kind", "u1"),
            ("max_step", steps_type, (n,)),
            ("max", values_type, (n,)),
            ("first_step", steps_type, (n,)),
            ("first", values_type, (n,)),
        ]
    )


def _survives_float32(values: npt.NDArray[np.float64]) -> bool:
    """Whether every value is the `readable` form of its float32, bit for bit (NaN payloads
    included): true of every value a float32 chunk's summary holds."""
    with np.errstate(all="ignore"):
        back = readable(values.astype(np.float32))
    return bool((back.view(np.uint64) == values.view(np.uint64)).all())


def encode(buckets: npt.NDArray[np.void]) -> bytes:
    """The outline of a chunk whose bucket summary is ``buckets`` (`chunks.summarize`)."""
    firsts = buckets["first_step"].astype(np.int64)
    maxes = np.where(buckets["max_step"] == NO_STEP, firsts, buckets["max_step"])
    base = int(firsts[0])
    kind = _NARROW if int(max(firsts.max(), maxes.max())) - base <= _U32_MAX else _WIDE
    first_values = np.ascontiguousarray(buckets["first"], dtype=np.float64)
    max_values = np.ascontiguousarray(buckets["max"], dtype=np.float64)
    if kind == _NARROW and _survives_float32(first_values) and _survives_float32(max_values):
        kind = _NARROW32
    out = np.zeros(1, dtype=_layout(kind, len(buckets)))
    shift = 0 if kind == _WIDE else base
    out["kind"] = kind
    out["max_step"][0], out["max"][0] = maxes - shift, max_values
    out["first_step"][0], out["first"][0] = firsts - shift, first_values
    return out.tobytes()


def part_sql(pick: Pick) -> str:
    """A SQL expression over a ``chunks`` row: the part of its outline that ``pick`` needs
    (steps then values), or the whole outline for a chunk spanning more than 2³² steps.
    Which kind a stored outline is follows from its length and the row's bucket count."""
    n = f"((count + {FANOUT - 1}) / {FANOUT})"
    cases = []
    for kind in (_NARROW32, _NARROW):
        half = _BUCKET_BYTES[kind] // 2
        at = "2" if pick == "max" else f"2 + {half} * {n}"
        cases.append(
            f"WHEN length(outline) = 1 + {2 * half} * {n} THEN substr(outline, {at}, {half} * {n})"
        )
    return f"CASE {' '.join(cases)} ELSE outline END"


def buckets_in(count: int) -> int:
    """How many buckets the outline of a chunk of ``count`` points holds."""
    return -(-count // FANOUT)


def decode_parts(
    blobs: Sequence[bytes], first_steps: Sequence[int], buckets_of: Sequence[int], pick: Pick
) -> Picked:
    """The points of `part_sql` values (each with its chunk's first step and number of
    buckets, `buckets_in`), in order. Parts of the same kind and size are decoded together."""
    sizes = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
    buckets = np.asarray(buckets_of, dtype=np.int64)
    kinds = np.full(len(blobs), -1, dtype=np.int64)
    for kind in (_NARROW32, _NARROW):
        kinds[sizes == buckets * (_BUCKET_BYTES[kind] // 2)] = kind
    kinds[(kinds < 0) & (sizes == 1 + buckets * _BUCKET_BYTES[_WIDE])] = _WIDE
    if bool((kinds < 0).any()) or bool((buckets <= 0).any()):
        raise ChunkFormatError("chunk outline not a whole number of buckets")
    total = int(buckets.sum())
    out = Picked(
        np.repeat(np.arange(len(blobs), dtype=np.int64), buckets),
        np.empty(total, np.int64),
        np.empty(total, np.float64),
        np.repeat(kinds == _NARROW32, buckets),
    )
    starts = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum(buckets, out=starts[1:])
    bases = np.asarray(first_steps, dtype=np.int64)
    cuts = np.flatnonzero((np.diff(sizes) != 0) | (np.diff(kinds) != 0)) + 1
    bounds = [0, *cuts.tolist(), len(blobs)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        n, kind = int(buckets[lo]), int(kinds[lo])
        at = slice(int(starts[lo]), int(starts[hi]))
        joined = b"".join(blobs[lo:hi])
        if kind == _WIDE:
            block = np.frombuffer(joined, dtype=_layout(_WIDE, n))
            if bool((block["kind"] != _WIDE).any()):
                raise ChunkFormatError("a whole chunk outline should be a wide one")
            steps, values = block[f"{pick}_step"], block[pick]
            out.steps[at] = steps.ravel()
        else:
            part = np.dtype([("steps", "<u4", (n,)), ("values", _VALUE_TYPES[kind], (n,))])
            block = np.frombuffer(joined, dtype=part)
            steps, values = block["steps"], block["values"]
            out.steps[at] = (steps.astype(np.int64) + bases[lo:hi, np.newaxis]).ravel()
        out.values[at] = values.ravel()
    return out


def decode(blob: bytes, first_step: int) -> dict[Pick, Picked]:
    """Both halves of one whole outline (for tests and tools), in their readable form."""
    kind = blob[0]
    if kind not in _STEP_TYPES or (len(blob) - 1) % _BUCKET_BYTES[kind]:
        raise ChunkFormatError("chunk outline of an unknown kind or not whole buckets")
    n = (len(blob) - 1) // _BUCKET_BYTES[kind]
    block = np.frombuffer(blob, dtype=_layout(kind, n))
    shift = 0 if kind == _WIDE else first_step
    row = np.zeros(n, dtype=np.int64)
    values = {
        pick: (readable(block[pick][0]) if kind == _NARROW32 else block[pick][0].copy())
        for pick in ("first", "max")
    }
    return {
        pick: Picked(
            row,
            block[f"{pick}_step"][0].astype(np.int64) + shift,
            values[pick],
            np.zeros(n, dtype=np.bool_),
        )
        for pick in ("first", "max")
    }
