"""Compacted series: chunk encoding and the bucket summaries of the read pyramid.

A chunk holds consecutive points of one series (run, metric, segment) as two arrays:
steps, stored as a start and a stride when they are evenly spaced (the usual case) and as
compressed deltas otherwise; and values, as float64 by default, bit for bit what was logged
(subnormals, -0.0, NaN payloads and ±Infinity included). The opt-in ``float32`` precision
rounds them to float32 (unless a finite value would overflow it), and chunks of an earlier
default hold float32: both read as the float64 of the float32's shortest decimal
(:func:`readable`). Values and uneven steps are compressed by pcodec where it pays
(float64 values that a float32 holds exactly take as little as in float32; see
docs/storage.md); chunks written before pcodec hold byte-shuffled zlib, and read as they
are.

Every chunk also carries a *bucket summary*: for each run of :data:`FANOUT` consecutive
points, the first, last, minimum and maximum point and the first NaN, each a real stored
(step, value). The rollup levels above hold the same summary for whole chunks and for
groups of :data:`FANOUT` chunks, so a zoomed-out chart reads a few hundred summary rows and
still sees every spike (see :mod:`.pyramid`). How a summary is stored is
:mod:`.summary_codec`'s.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pcodec import ChunkConfig
from pcodec import standalone as pco_standalone

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

FANOUT = 64
"""Points per bucket in a chunk's summary, and children per rollup row at each level."""

LEVELS = 2
"""Rollup levels above the chunks (fanout 64 each): level 2 buckets hold 64² chunks."""

NO_STEP = np.iinfo(np.int64).min
"""Marks a bucket's missing minimum/maximum (all values NaN) or missing NaN."""

BUCKET = np.dtype(
    [
        ("first_step", "<i8"),
        ("last_step", "<i8"),
        ("min_step", "<i8"),
        ("max_step", "<i8"),
        ("nan_step", "<i8"),
        ("count", "<i8"),
        ("first", "<f8"),
        ("last", "<f8"),
        ("min", "<f8"),
        ("max", "<f8"),
    ]
)

_VERSION = 1
_HEADER = struct.Struct(
    "<BBBBIqqI"
)  # version, value kind, step codec, value codec, n, first, stride, steps bytes
_F32, _F64 = 0, 1
_STEPS_STRIDE, _STEPS_DELTA_ZLIB, _STEPS_DELTA_PCO = 0, 1, 2
_RAW, _SHUFFLE_ZLIB, _PCO = 0, 1, 2
_F32_MAX = float(np.finfo(np.float32).max)
_POW10 = 10.0 ** np.arange(64, dtype=np.int64)  # float32 needs shifts 0..53 at most
_PCO_CONFIG = ChunkConfig(compression_level=4)
"""Level 4: within 2 % of the default level 8's size on noisy and real series, at a quarter
of its time a chunk (160 against 600 µs for 4,096 float32 values; zlib took 115)."""


class ChunkFormatError(ValueError):
    """Stored bytes that this version cannot decode."""


@dataclass(frozen=True)
class Points:
    """Steps ascending and strictly increasing, with their values."""

    steps: IntArray
    values: FloatArray

    def __len__(self) -> int:
        return len(self.steps)

    def take(self, which: slice | npt.NDArray[np.bool_] | npt.NDArray[np.int64]) -> Points:
        return Points(self.steps[which], self.values[which])


def shuffle_zlib(raw: bytes, width: int) -> bytes:
    """Group the i-th byte of every item together, then deflate: floats compress far better."""
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)
    return zlib.compress(np.ascontiguousarray(arr.T).tobytes(), 1)


def unshuffle(blob: bytes, width: int) -> bytes:
    arr = np.frombuffer(zlib.decompress(blob), dtype=np.uint8).reshape(width, -1)
    return np.ascontiguousarray(arr.T).tobytes()


def pco(array: npt.NDArray[np.generic]) -> bytes:
    """``array`` compressed by pcodec (lossless for every float bit pattern: NaN payloads,
    -0.0 and infinities come back as they were)."""
    return bytes(pco_standalone.simple_compress(np.ascontiguousarray(array), _PCO_CONFIG))


def unpco(blob: bytes, dtype: str) -> npt.NDArray[np.generic]:
    out = pco_standalone.simple_decompress(blob)
    if out.dtype != np.dtype(dtype):
        raise ChunkFormatError(f"pcodec data of {out.dtype} where {dtype} was expected")
    return out  # type: ignore[no-any-return]


def value_kind(values: FloatArray, precision: str) -> int:
    """float64 unless asked for float32 (lossy) and no finite value would overflow it."""
    if precision != "float32":
        return _F64
    finite = values[np.isfinite(values)]
    if len(finite) and float(np.abs(finite).max()) > _F32_MAX:
        return _F64
    return _F32


def stored_values(values: FloatArray, precision: str) -> FloatArray:
    """The values as a chunk will give them back: as they are at float64, float32-rounded
    (in their :func:`readable` form) at float32."""
    if value_kind(values, precision) == _F32:
        return readable(values.astype(np.float32))
    return values


def readable(values: npt.NDArray[np.float32]) -> FloatArray:
    """float32 values as the float64 of their shortest decimal: 15.37, not 15.369999885559082.

    The result converts back to exactly the same float32, so nothing is lost; a value that
    was logged as ``15.37`` reads back as ``15.37``. Values where the shortest search does not
    land (extreme magnitudes) are widened as they are.
    """
    wide = values.astype(np.float64)
    out = wide.copy()
    todo = np.flatnonzero(np.isfinite(wide) & (wide != 0))
    if not len(todo):
        return out
    v, target = wide[todo], values[todo]
    mag = np.floor(np.log10(np.abs(v))).astype(np.int64)
    for digits in range(1, 10):
        shift = digits - 1 - mag
        if bool((shift >= 0).all()):
            # The usual case (values below 10**8), about half the work of the general one:
            # one branch, a table of the powers np.power gives, and rint in place.
            scale = _POW10[shift]
            r = v * scale
            np.rint(r, out=r)
            r /= scale
        else:
            scale = 10.0 ** np.abs(shift)
            r = np.where(shift >= 0, np.round(v * scale) / scale, np.round(v / scale) * scale)
        ok = r.astype(np.float32) == target
        if ok.any():
            out[todo[ok]] = r[ok]
            miss = ~ok
            todo, mag, v, target = todo[miss], mag[miss], v[miss], target[miss]
            if not len(todo):
                break
    return out


def encode(points: Points, precision: str = "float64") -> bytes:
    """A chunk's bytes. ``points`` must be non-empty with strictly increasing steps."""
    n = len(points)
    if n == 0:
        raise ValueError("a chunk holds at least one point")
    steps = points.steps.astype(np.int64, copy=False)
    first = int(steps[0])
    stride = int(steps[1] - steps[0]) if n > 1 else 1
    diffs = np.diff(steps)
    if n == 1 or bool(np.all(diffs == stride)):
        step_codec, step_blob = _STEPS_STRIDE, b""
    else:
        step_codec = _STEPS_DELTA_PCO
        step_blob = pco(diffs.astype("<i8"))
        stride = 0
    kind = value_kind(points.values, precision)
    raw_values = points.values.astype("<f4" if kind == _F32 else "<f8")
    raw = raw_values.tobytes()
    packed = pco(raw_values)
    value_codec, value_blob = (_PCO, packed) if len(packed) < len(raw) else (_RAW, raw)
    header = _HEADER.pack(_VERSION, kind, step_codec, value_codec, n, first, stride, len(step_blob))
    return header + step_blob + value_blob


def pack(points: Points, precision: str = "float64") -> tuple[bytes, npt.NDArray[np.void]]:
    """A chunk's bytes (`encode`) and its bucket summary (`summarize`) of the values it will
    give back.

    For a float32 chunk the summary is taken over the values merely widened and only its
    values are then given their :func:`readable` form: that form keeps order and equality,
    so the summary is the same as one over readable values, for a tenth of the work.
    """
    if value_kind(points.values, precision) == _F64:
        return encode(points, precision), summarize(points)
    widened = Points(points.steps, points.values.astype(np.float32).astype(np.float64))
    buckets = summarize(widened)
    fields = ("first", "last", "min", "max")
    done = readable(np.concatenate([buckets[f] for f in fields]).astype(np.float32))
    for i, field in enumerate(fields):
        buckets[field] = done[i * len(buckets) : (i + 1) * len(buckets)]
    return encode(widened, precision), buckets


def holds_float32(blob: bytes) -> bool:
    """Whether a chunk (`encode`) keeps its values as float32, from its header (its first
    two bytes are enough)."""
    if len(blob) < 2:
        raise ChunkFormatError("chunk shorter than its header")
    return blob[1] == _F32


def zlib_coded(head: bytes) -> bool:
    """Whether a chunk's steps or values are byte-shuffled zlib (written before pcodec), from
    the first four bytes of its header."""
    return len(head) >= 4 and (head[2] == _STEPS_DELTA_ZLIB or head[3] == _SHUFFLE_ZLIB)


def decode(blob: bytes) -> Points:
    """A chunk's points, float32 values in their :func:`readable` form."""
    points, narrow = decode_raw(blob)
    if narrow:
        return Points(points.steps, readable(points.values.astype(np.float32)))
    return points


def decode_raw(blob: bytes) -> tuple[Points, bool]:
    """A chunk's points as stored, and whether its values are float32.

    Float32 values come back merely widened; pass the ones you keep through
    :func:`readable` to get what :func:`decode` gives (much cheaper on a few of them).
    """
    if len(blob) < _HEADER.size:
        raise ChunkFormatError("chunk shorter than its header")
    version, kind, step_codec, value_codec, n, first, stride, step_len = _HEADER.unpack_from(blob)
    if version != _VERSION:
        raise ChunkFormatError(f"chunk format version {version} is not supported")
    pos = _HEADER.size
    if step_codec == _STEPS_STRIDE:
        steps = first + stride * np.arange(n, dtype=np.int64)
    elif step_codec in (_STEPS_DELTA_ZLIB, _STEPS_DELTA_PCO):
        part = blob[pos : pos + step_len]
        if step_codec == _STEPS_DELTA_ZLIB:
            diffs = np.frombuffer(unshuffle(part, 8), dtype="<i8")
        else:
            diffs = unpco(part, "<i8")
        if len(diffs) != n - 1:
            raise ChunkFormatError(f"chunk says {n} points but holds {len(diffs) + 1} steps")
        steps = np.empty(n, dtype=np.int64)
        steps[0] = first
        np.cumsum(diffs, out=steps[1:])
        steps[1:] += first
    else:
        raise ChunkFormatError(f"unknown step codec {step_codec}")
    pos += step_len
    width = 4 if kind == _F32 else 8
    body = blob[pos:]
    dtype = "<f4" if width == 4 else "<f8"
    if value_codec == _PCO:
        values = unpco(body, dtype).astype(np.float64)
    else:
        if value_codec == _SHUFFLE_ZLIB:
            body = unshuffle(body, width)
        elif value_codec != _RAW:
            raise ChunkFormatError(f"unknown value codec {value_codec}")
        values = np.frombuffer(body, dtype=dtype).astype(np.float64)
    if len(values) != n:
        raise ChunkFormatError(f"chunk says {n} points but holds {len(values)} values")
    return Points(steps, values), kind == _F32


# --- bucket summaries -------------------------------------------------------------------


def summarize(points: Points, size: int = FANOUT) -> npt.NDArray[np.void]:
    """One bucket per ``size`` consecutive points (the last may be shorter)."""
    n = len(points)
    steps, values = points.steps, points.values
    starts = np.arange(0, n, size, dtype=np.int64)
    ends = np.minimum(starts + size, n) - 1
    out = np.zeros(len(starts), dtype=BUCKET)
    out["first_step"], out["last_step"] = steps[starts], steps[ends]
    out["first"], out["last"] = values[starts], values[ends]
    out["count"] = ends - starts + 1
    nan = np.isnan(values)
    for field, fill, op in (("min", np.inf, np.minimum), ("max", -np.inf, np.maximum)):
        vals = np.where(nan, fill, values)
        ext = op.reduceat(vals, starts)
        owner = np.repeat(np.arange(len(starts)), out["count"])
        hit = np.flatnonzero((vals == ext[owner]) & ~nan)
        idx = np.full(len(starts), -1, dtype=np.int64)
        if len(hit):
            hit_owner = owner[hit]
            first = np.r_[True, hit_owner[1:] != hit_owner[:-1]]
            idx[hit_owner[first]] = hit[first]
        found = idx >= 0
        out[f"{field}_step"] = np.where(found, steps[np.maximum(idx, 0)], NO_STEP)
        out[field] = np.where(found, values[np.maximum(idx, 0)], np.nan)
    out["nan_step"] = NO_STEP
    if nan.any():
        nan_idx = np.flatnonzero(nan)
        owner = nan_idx // size
        first = np.r_[True, owner[1:] != owner[:-1]]
        out["nan_step"][owner[first]] = steps[nan_idx[first]]
    return out


def merge_buckets(buckets: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    """One bucket summarising consecutive ``buckets`` (a chunk from its buckets, and so on)."""
    out = np.zeros(1, dtype=BUCKET)
    out["first_step"], out["first"] = buckets["first_step"][0], buckets["first"][0]
    out["last_step"], out["last"] = buckets["last_step"][-1], buckets["last"][-1]
    out["count"] = buckets["count"].sum()
    for field, pick in (("min", np.argmin), ("max", np.argmax)):
        have = buckets[f"{field}_step"] != NO_STEP
        if have.any():
            cand = np.flatnonzero(have)
            best = cand[int(pick(buckets[field][cand]))]
            out[f"{field}_step"], out[field] = buckets[f"{field}_step"][best], buckets[field][best]
        else:
            out[f"{field}_step"], out[field] = NO_STEP, np.nan
    nans = buckets["nan_step"][buckets["nan_step"] != NO_STEP]
    out["nan_step"] = nans[0] if len(nans) else NO_STEP
    return out


def bucket_points(buckets: npt.NDArray[np.void]) -> Points:
    """The real points that buckets name (first, last, min, max, first NaN), by step."""
    n = len(buckets)
    # One row a bucket, its candidates in step order: first <= min, max, NaN <= last, so
    # only the middle three need sorting (three compare-and-swaps); a missing one
    # (NO_STEP) becomes a repeat of ``first`` and is dropped with the other repeats.
    steps = np.empty((n, 5), dtype=np.int64)
    values = np.empty((n, 5), dtype=np.float64)
    for col, (step, value) in enumerate(
        (("first_step", "first"), ("min_step", "min"), ("max_step", "max"), ("nan_step", ""))
    ):
        steps[:, col] = buckets[step]
        values[:, col] = buckets[value] if value else np.nan
        if col:
            np.copyto(steps[:, col], steps[:, 0], where=steps[:, col] == NO_STEP)
    steps[:, 4], values[:, 4] = buckets["last_step"], buckets["last"]
    for i, j in ((1, 2), (2, 3), (1, 2)):
        swap = steps[:, j] < steps[:, i]
        if swap.any():
            for arr in (steps, values):
                held = arr[:, i].copy()
                np.copyto(arr[:, i], arr[:, j], where=swap)
                np.copyto(arr[:, j], held, where=swap)
    flat_steps, flat_values = steps.ravel(), values.ravel()
    if len(flat_steps):
        keep = np.empty(len(flat_steps), dtype=np.bool_)
        keep[0] = True
        np.not_equal(flat_steps[1:], flat_steps[:-1], out=keep[1:])
        flat_steps, flat_values = flat_steps[keep], flat_values[keep]
    if len(flat_steps) < 2 or bool((flat_steps[1:] > flat_steps[:-1]).all()):
        return Points(flat_steps, flat_values)
    # Buckets out of order or overlapping: sort, keeping one point a step.
    flat_steps, first_at = np.unique(flat_steps, return_index=True)
    return Points(flat_steps, flat_values[first_at])


def merge_points(old: Points, new: Points) -> Points:
    """The union by step; where both hold a step, the stored (older) value wins."""
    if len(old) == 0:
        return new
    steps = np.concatenate([old.steps, new.steps])
    values = np.concatenate([old.values, new.values])
    steps, first = np.unique(steps, return_index=True)  # first occurrence: ``old`` wins
    return Points(steps, values[first])
