"""How a bucket summary (`chunks.summarize`) is stored: its integers and its values apart,
each in the codec that suits it; and the earlier layout (the whole array byte-shuffled,
zlib), which still reads.

>>> import numpy as np
>>> from normwatch.server.storage.chunks import Points, summarize
>>> buckets = summarize(Points(np.arange(100), np.linspace(0.0, 1.0, 100)))
>>> bool((decode_buckets(encode_buckets(buckets)) == buckets).all())
True
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .chunks import (
    BUCKET,
    NO_STEP,
    ChunkFormatError,
    FloatArray,
    pco,
    shuffle_zlib,
    unpco,
    unshuffle,
)

_UNSHUFFLE_BLOBS = 16
"""Old summaries unshuffled together at most (see `decode_bucket_rows`)."""

_SUMMARY_PCO, _SUMMARY_SMALL = 2, 3
"""The first byte of a summary in the current layout, its values in pcodec or (a summary of
fewer than :data:`_PCO_MIN_BUCKETS` buckets, where pcodec's own header outweighs what it
saves) byte-shuffled zlib; one written before it is a zlib stream, whose first byte is 0x78."""
_PCO_MIN_BUCKETS = 16
ZLIB_SUMMARY = 0x78
_SUMMARY_HEADER = struct.Struct("<BBII")  # layout, integer width, buckets, integer bytes
_INT_FIELDS = ("first_step", "last_step", "min_step", "max_step", "nan_step", "count")
_FLOAT_FIELDS = ("first", "last", "min", "max")
_I32 = np.iinfo(np.int32)


def encode_buckets(buckets: npt.NDArray[np.void]) -> bytes:
    """A summary's bytes: its integers and its values apart, each as its own codec likes.

    The steps become the first bucket's first step and then differences (a constant for
    evenly spaced steps), every other step an offset from its bucket's first step (-1 for
    none), all byte-shuffled zlib, as int32 where they fit; the values (first, last,
    minimum, maximum) one pcodec array of float64. About 0.55x the bytes of the whole
    summary byte-shuffled (0.26 against 0.49 bytes a point on a noisy walk).
    """
    n = len(buckets)
    firsts = buckets["first_step"].astype(np.int64)
    ints = np.empty((len(_INT_FIELDS), n), dtype=np.int64)
    if n:
        ints[0, 0] = firsts[0]
        ints[0, 1:] = np.diff(firsts)
    ints[1] = buckets["last_step"] - firsts
    for row, field in enumerate(("min_step", "max_step", "nan_step"), start=2):
        column = buckets[field]
        ints[row] = np.where(column == NO_STEP, -1, column - np.where(column == NO_STEP, 0, firsts))
    ints[5] = buckets["count"]
    width = 4 if n == 0 or (ints.min() >= _I32.min and ints.max() <= _I32.max) else 8
    int_blob = shuffle_zlib(ints.astype(f"<i{width}").tobytes(), width)
    values = np.concatenate([buckets[f] for f in _FLOAT_FIELDS]).astype("<f8")
    if n >= _PCO_MIN_BUCKETS:
        layout, value_blob = _SUMMARY_PCO, pco(values)
    else:
        layout, value_blob = _SUMMARY_SMALL, shuffle_zlib(values.tobytes(), 8)
    return _SUMMARY_HEADER.pack(layout, width, n, len(int_blob)) + int_blob + value_blob


def decode_buckets(blob: bytes) -> npt.NDArray[np.void]:
    return decode_bucket_rows([blob])[0]


def _zlib_rows(raw: list[bytes], out: npt.NDArray[np.void]) -> None:
    """Old summaries (the whole array byte-shuffled, zlib), unshuffled a few at a time."""
    width = BUCKET.itemsize
    counts = [len(r) // width for r in raw]
    flat = out.view(np.uint8).reshape(len(out), width)
    cuts = [i for i in range(1, len(raw)) if counts[i] != counts[i - 1]]
    bounds = sorted({*cuts, *range(0, len(raw), _UNSHUFFLE_BLOBS), len(raw)})
    pos = 0
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        n = counts[lo]
        block = np.frombuffer(b"".join(raw[lo:hi]), dtype=np.uint8)
        flat[pos : pos + (hi - lo) * n] = (
            block.reshape(hi - lo, width, n).transpose(0, 2, 1).reshape(-1, width)
        )
        pos += (hi - lo) * n


def _pco_rows(
    parts: list[tuple[npt.NDArray[np.int64], FloatArray]], out: npt.NDArray[np.void]
) -> None:
    """Summaries of the current layout with the same number of buckets, into ``out``."""
    ints = np.stack([i for i, _ in parts])  # (rows, fields, buckets)
    values = np.stack([v for _, v in parts])
    firsts = np.cumsum(ints[:, 0, :], axis=1)
    out["first_step"] = firsts.ravel()
    out["last_step"] = (firsts + ints[:, 1, :]).ravel()
    for row, field in enumerate(("min_step", "max_step", "nan_step"), start=2):
        offsets = ints[:, row, :]
        out[field] = np.where(offsets < 0, NO_STEP, firsts + offsets).ravel()
    out["count"] = ints[:, 5, :].ravel()
    for row, field in enumerate(_FLOAT_FIELDS):
        out[field] = values[:, row, :].ravel()


def _pco_parts(blob: bytes) -> tuple[npt.NDArray[np.int64], FloatArray]:
    layout, width, n, int_bytes = _SUMMARY_HEADER.unpack_from(blob)
    if width not in (4, 8):
        raise ChunkFormatError(f"bucket summary with integers {width} bytes wide")
    start = _SUMMARY_HEADER.size
    raw = unshuffle(blob[start : start + int_bytes], width)
    if len(raw) != width * len(_INT_FIELDS) * n:
        raise ChunkFormatError("bucket summary's integers do not match its bucket count")
    ints = np.frombuffer(raw, dtype=f"<i{width}").astype(np.int64).reshape(len(_INT_FIELDS), n)
    rest = blob[start + int_bytes :]
    if layout == _SUMMARY_SMALL:
        values = np.frombuffer(unshuffle(rest, 8), dtype="<f8")
    else:
        values = unpco(rest, "<f8") if n else np.empty(0, np.float64)
    if len(values) != len(_FLOAT_FIELDS) * n:
        raise ChunkFormatError("bucket summary's values do not match its bucket count")
    return ints, values.astype(np.float64, copy=False).reshape(len(_FLOAT_FIELDS), n)


def decode_bucket_rows(
    blobs: Sequence[bytes],
) -> tuple[npt.NDArray[np.void], npt.NDArray[np.int64]]:
    """The buckets of several summaries as one array, in order, and how many each held.

    Equal to concatenating `decode_buckets` of each blob, but consecutive blobs of the same
    layout and length are put together by one set of array operations, so a read that opens
    hundreds of summary rows does not pay NumPy's per-call overhead hundreds of times. Old
    ones go a few at a time (:data:`_UNSHUFFLE_BLOBS`), which keeps the temporary copy
    small: a large fresh one costs more in page faults than the transpose itself.
    """
    width = BUCKET.itemsize
    decoded: list[bytes | tuple[npt.NDArray[np.int64], FloatArray]] = []
    counts = np.empty(len(blobs), dtype=np.int64)
    for i, blob in enumerate(blobs):
        if not blob:
            raise ChunkFormatError("empty bucket summary")
        try:
            if blob[0] in (_SUMMARY_PCO, _SUMMARY_SMALL):
                parts = _pco_parts(blob)
                counts[i] = parts[0].shape[1]
                decoded.append(parts)
            elif blob[0] == ZLIB_SUMMARY:
                raw = zlib.decompress(blob)
                if len(raw) % width:
                    raise ChunkFormatError(
                        f"bucket summary not a whole number of {width}-byte buckets"
                    )
                counts[i] = len(raw) // width
                decoded.append(raw)
            else:
                raise ChunkFormatError(f"bucket summary of an unknown layout {blob[0]}")
        except (zlib.error, struct.error, RuntimeError) as error:
            raise ChunkFormatError(f"corrupt bucket summary: {error}") from error
    out = np.empty(int(counts.sum()), dtype=BUCKET)
    # Runs of the same layout and bucket count (all but a series' last, usually).
    kinds = [isinstance(d, bytes) for d in decoded]
    cuts = [
        i for i in range(1, len(decoded)) if kinds[i] != kinds[i - 1] or counts[i] != counts[i - 1]
    ]
    bounds = [0, *cuts, len(decoded)]
    pos = 0
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        size = int(counts[lo:hi].sum())
        target = out[pos : pos + size]
        if kinds[lo]:
            _zlib_rows([d for d in decoded[lo:hi] if isinstance(d, bytes)], target)
        else:
            _pco_rows([d for d in decoded[lo:hi] if not isinstance(d, bytes)], target)
        pos += size
    return out, counts


def summary_is_zlib(head: bytes) -> bool:
    """Whether a summary, from its first byte, is the earlier layout: one zlib stream."""
    return bool(head) and head[0] == ZLIB_SUMMARY
