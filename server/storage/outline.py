"""A chunk's outline: for each of its 64-point buckets, the first point and the largest.

The bucket summary (:mod:`.chunks`) says everything a chart needs, but it is compressed and
ten fields wide, and a read that wants one value a column from fifty series (the layer
grid's largest value, attribution's first shared step) would spend most of its time
inflating it. The outline is the part of the summary such reads use, stored beside it
uncompressed: per bucket the step and value of its first point and of its largest
(non-NaN) point, so that decoding a thousand chunks' outlines is one ``frombuffer``.

Layout: one byte saying which kind it is, then the largest points' steps and values, then
the first points' steps and values, each an array of one entry a bucket:

- :data:`_EVEN`: a float32 chunk of evenly spaced steps (the opt-in precision). The largest
  point's place in its bucket (``uint8``) and its value, then the first point's value,
  ``float32``: the steps follow from the chunk's first and last step and count. 9 bytes a
  bucket, 577 for a chunk of 64 buckets.
- :data:`_NARROW32`: a float32 chunk of uneven steps: ``uint32`` offsets from the chunk's
  first step and ``float32`` values, 16 bytes a bucket.
- :data:`_NARROW`: ``uint32`` offsets and ``float64`` values (a float64 chunk, and every
  outline written before float32 ones were): 24 bytes a bucket.
- :data:`_WIDE`: ``int64`` steps and ``float64`` values, for a chunk spanning more than 2³²
  steps: 32 bytes a bucket.
- :data:`_EVEN_EXACT` and :data:`_NARROW_EXACT`: a float64 chunk whose outline values a
  float32 holds exactly (what a JAX trainer logs: float32 values, arriving as their exact
  float64), as :data:`_EVEN` and :data:`_NARROW32` but read as the float32s merely widened,
  which *is* each value, bit for bit. Each half of a bucket carries one more byte that says
  nothing but the kind (``tag``), so that the halves' lengths, which is all a read sees,
  differ from every other kind's: 11 and 18 bytes a bucket.

A float32 chunk's summary holds each value in its `chunks.readable` form, which the float32
gives back; a read gets the float32 kinds' values merely widened, flagged ``narrow``, as it
gets a float32 chunk's points. The exact kinds' values come back widened and not flagged:
they are what was logged. A bucket whose values are all NaN repeats its first point as
its largest, with value NaN. An outline stays under the size where Postgres would compress
it or move it out of line, and a read asks for the half it needs (`part_sql`); the kinds
differ in length for the same number of buckets, which is how both the SQL and
`decode_parts` tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from .chunks import FANOUT, NO_STEP, ChunkFormatError, readable

_NARROW, _WIDE, _NARROW32, _EVEN, _EVEN_EXACT, _NARROW_EXACT = 0, 1, 2, 3, 4, 5
_U32_MAX = int(np.iinfo(np.uint32).max)

Pick = Literal["first", "max"]

# Each kind's arrays in order, each one entry a bucket; a pick's part is its two (or, for
# an even chunk's first points, one) consecutive arrays.
_FIELDS: dict[int, list[tuple[str, str]]] = {
    _NARROW: [("max_step", "<u4"), ("max", "<f8"), ("first_step", "<u4"), ("first", "<f8")],
    _WIDE: [("max_step", "<i8"), ("max", "<f8"), ("first_step", "<i8"), ("first", "<f8")],
    _NARROW32: [("max_step", "<u4"), ("max", "<f4"), ("first_step", "<u4"), ("first", "<f4")],
    _EVEN: [("max_step", "u1"), ("max", "<f4"), ("first", "<f4")],
    _EVEN_EXACT: [
        ("max_step", "u1"),
        ("max_tag", "u1"),
        ("max", "<f4"),
        ("first_tag", "u1"),
        ("first", "<f4"),
    ],
    _NARROW_EXACT: [
        ("max_step", "<u4"),
        ("max_tag", "u1"),
        ("max", "<f4"),
        ("first_step", "<u4"),
        ("first_tag", "u1"),
        ("first", "<f4"),
    ],
}
_PARTS = (_EVEN, _NARROW32, _NARROW, _EVEN_EXACT, _NARROW_EXACT)
"""The kinds a read takes a part of (a wide outline comes whole)."""
_FLOAT32 = (_EVEN, _NARROW32)
"""Kinds whose values are float32s standing for their shortest decimals (`chunks.readable`)."""
_EXACT32 = (_EVEN_EXACT, _NARROW_EXACT)
"""Kinds whose values are float32s standing for themselves."""
_EVEN_KINDS = (_EVEN, _EVEN_EXACT)


def _bucket_bytes(kind: int) -> int:
    return sum(np.dtype(t).itemsize for _, t in _FIELDS[kind])


def _part_fields(kind: int, pick: Pick) -> list[tuple[str, str]]:
    return [(name, t) for name, t in _FIELDS[kind] if name.startswith(pick)]


def _part_at(kind: int, pick: Pick) -> tuple[int, int]:
    """Bytes a bucket before the part (after the kind byte), and in it."""
    names = [name for name, _ in _FIELDS[kind]]
    first = next(i for i, name in enumerate(names) if name.startswith(pick))
    sizes = [np.dtype(t).itemsize for _, t in _FIELDS[kind]]
    inside = sum(np.dtype(t).itemsize for _, t in _part_fields(kind, pick))
    return sum(sizes[:first]), inside


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
    return np.dtype([("kind", "u1"), *[(name, t, (n,)) for name, t in _FIELDS[kind]]])


def _survives_float32(values: npt.NDArray[np.float64]) -> bool:
    """Whether every value is the `readable` form of its float32, bit for bit (NaN payloads
    included): true of every value a float32 chunk's summary holds."""
    with np.errstate(all="ignore"):
        back = readable(values.astype(np.float32))
    return bool((back.view(np.uint64) == values.view(np.uint64)).all())


def _held_by_float32(values: npt.NDArray[np.float64]) -> bool:
    """Whether a float32 holds every value exactly, bit for bit (NumPy's NaN included)."""
    with np.errstate(all="ignore"):
        back = values.astype(np.float32).astype(np.float64)
    return bool((back.view(np.uint64) == values.view(np.uint64)).all())


def stride_of(first_step: int, last_step: int, count: int) -> int:
    """The spacing of an evenly spaced chunk's steps (1 for a chunk of one point)."""
    return (last_step - first_step) // (count - 1) if count > 1 else 1


def _even_places(
    buckets: npt.NDArray[np.void], firsts: npt.NDArray[np.int64], maxes: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint8] | None:
    """Each bucket's largest point's place in it, if the chunk's steps are evenly spaced."""
    counts = buckets["count"].astype(np.int64)
    base, last = int(firsts[0]), int(buckets["last_step"][-1])
    stride = stride_of(base, last, int(counts.sum()))
    if stride <= 0 or base + stride * (int(counts.sum()) - 1) != last:
        return None
    slots = np.arange(len(buckets), dtype=np.int64) * FANOUT
    if not np.array_equal(firsts, base + slots * stride):
        return None
    if not np.array_equal(buckets["last_step"], firsts + (counts - 1) * stride):
        return None
    offsets = maxes - firsts
    places = offsets // stride
    if bool((offsets % stride).any()) or bool(((places < 0) | (places >= counts)).any()):
        return None
    return places.astype(np.uint8)


def encode(buckets: npt.NDArray[np.void], float32: bool | None = None) -> bytes:
    """The outline of a chunk whose bucket summary is ``buckets`` (`chunks.summarize`).

    ``float32``: whether the chunk's values are float32 (its summary's values then are the
    `readable` forms of float32s), when the caller knows; None looks at the values."""
    firsts = buckets["first_step"].astype(np.int64)
    maxes = np.where(buckets["max_step"] == NO_STEP, firsts, buckets["max_step"])
    base = int(firsts[0])
    first_values = np.ascontiguousarray(buckets["first"], dtype=np.float64)
    max_values = np.ascontiguousarray(buckets["max"], dtype=np.float64)
    n = len(buckets)
    if float32 is None:
        float32 = _survives_float32(first_values) and _survives_float32(max_values)
    exact32 = not float32 and _held_by_float32(first_values) and _held_by_float32(max_values)
    if float32 or exact32:
        places = _even_places(buckets, firsts, maxes)
        if places is not None:
            kind = _EVEN if float32 else _EVEN_EXACT
            out = np.zeros(1, dtype=_layout(kind, n))
            out["kind"] = kind
            out["max_step"][0], out["max"][0], out["first"][0] = places, max_values, first_values
            return out.tobytes()
    kind = _NARROW if int(max(firsts.max(), maxes.max())) - base <= _U32_MAX else _WIDE
    if kind == _NARROW and float32:
        kind = _NARROW32
    elif kind == _NARROW and exact32:
        kind = _NARROW_EXACT
    out = np.zeros(1, dtype=_layout(kind, n))
    shift = 0 if kind == _WIDE else base
    out["kind"] = kind
    out["max_step"][0], out["max"][0] = maxes - shift, max_values
    out["first_step"][0], out["first"][0] = firsts - shift, first_values
    return out.tobytes()


def first_layout(head: bytes) -> bool:
    """Whether an outline, from its first byte, is of the first layout (uint32 offsets,
    float64 values), which a float32 chunk no longer gets."""
    return bool(head) and head[0] == _NARROW


def part_sql(pick: Pick) -> str:
    """A SQL expression over a ``chunks`` row: the part of its outline that ``pick`` needs,
    or the whole outline for a chunk spanning more than 2³² steps. Which kind a stored
    outline is follows from its length and the row's bucket count."""
    n = f"((count + {FANOUT - 1}) / {FANOUT})"
    cases = []
    for kind in _PARTS:
        before, inside = _part_at(kind, pick)
        cases.append(
            f"WHEN length(outline) = 1 + {_bucket_bytes(kind)} * {n} "
            f"THEN substr(outline, 2 + {before} * {n}, {inside} * {n})"
        )
    return f"CASE {' '.join(cases)} ELSE outline END"


def buckets_in(count: int) -> int:
    """How many buckets the outline of a chunk of ``count`` points holds."""
    return -(-count // FANOUT)


def decode_parts(
    blobs: Sequence[bytes],
    first_steps: Sequence[int],
    last_steps: Sequence[int],
    counts: Sequence[int],
    pick: Pick,
) -> Picked:
    """The points of `part_sql` values (each with its chunk's first and last step and point
    count), in order. Parts of the same kind and size are decoded together."""
    sizes = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
    points = np.asarray(counts, dtype=np.int64)
    buckets = -(-points // FANOUT)
    kinds = np.full(len(blobs), -1, dtype=np.int64)
    for kind in _PARTS:
        kinds[(kinds < 0) & (sizes == buckets * _part_at(kind, pick)[1])] = kind
    kinds[(kinds < 0) & (sizes == 1 + buckets * _bucket_bytes(_WIDE))] = _WIDE
    if bool((kinds < 0).any()) or bool((buckets <= 0).any()):
        raise ChunkFormatError("chunk outline not a whole number of buckets")
    total = int(buckets.sum())
    out = Picked(
        np.repeat(np.arange(len(blobs), dtype=np.int64), buckets),
        np.empty(total, np.int64),
        np.empty(total, np.float64),
        np.repeat(np.isin(kinds, _FLOAT32), buckets),
    )
    starts = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum(buckets, out=starts[1:])
    bases = np.asarray(first_steps, dtype=np.int64)
    lasts = np.asarray(last_steps, dtype=np.int64)
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
            out.steps[at] = block[f"{pick}_step"].ravel()
            out.values[at] = block[pick].ravel()
            continue
        part = np.frombuffer(
            joined, dtype=np.dtype([(name, t, (n,)) for name, t in _part_fields(kind, pick)])
        )
        base = bases[lo:hi, np.newaxis]
        if kind in _EVEN_KINDS:
            count = points[lo:hi]
            stride = np.where(
                count > 1, (lasts[lo:hi] - bases[lo:hi]) // np.maximum(count - 1, 1), 1
            )
            place = np.arange(n, dtype=np.int64) * FANOUT
            if pick == "max":
                place = place + part["max_step"].astype(np.int64)
            out.steps[at] = (base + place * stride[:, np.newaxis]).ravel()
        else:
            out.steps[at] = (part[f"{pick}_step"].astype(np.int64) + base).ravel()
        out.values[at] = part[pick].ravel()
    return out


def decode(blob: bytes, first_step: int, last_step: int, count: int) -> dict[Pick, Picked]:
    """Both halves of one whole outline (for tests and tools), in their readable form."""
    kind = blob[0]
    if kind not in _FIELDS or (len(blob) - 1) != _bucket_bytes(kind) * buckets_in(count):
        raise ChunkFormatError("chunk outline of an unknown kind or not whole buckets")
    out: dict[Pick, Picked] = {}
    for pick in ("first", "max"):
        if kind == _WIDE:
            part = blob
        else:
            before, inside = _part_at(kind, pick)
            n = buckets_in(count)
            part = blob[1 + before * n : 1 + (before + inside) * n]
        got = decode_parts([part], [first_step], [last_step], [count], pick)
        values = readable(got.values.astype(np.float32)) if kind in _FLOAT32 else got.values
        out[pick] = Picked(got.row, got.steps, values, np.zeros(len(values), dtype=np.bool_))
    return out
