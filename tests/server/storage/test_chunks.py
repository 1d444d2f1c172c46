"""The chunk codec and bucket summaries, against brute-force references."""

from __future__ import annotations

import doctest
import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

from normwatch.server.storage import chunks, outline, summary_codec
from normwatch.server.storage.chunks import NO_STEP, Points


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_round_trip_keeps_steps_and_non_finite_values(precision: str) -> None:
    rng = np.random.default_rng(1)
    steps = np.arange(-500, 9500, 5, dtype=np.int64)
    values = rng.normal(size=len(steps)) * 1e3
    values[[3, 10, 11]] = [np.nan, np.inf, -np.inf]
    back = chunks.decode(chunks.encode(Points(steps, values), precision))
    assert same(back.steps, steps)
    expected = chunks.stored_values(values, precision)
    if precision == "float32":
        assert same(expected.astype(np.float32), values.astype(np.float32))
    assert same(back.values, expected)
    assert np.isnan(back.values[3]) and back.values[10] == np.inf and back.values[11] == -np.inf


def test_irregular_steps_and_values_beyond_float32_are_exact() -> None:
    rng = np.random.default_rng(2)
    steps = np.sort(rng.choice(2**40, 3000, replace=False)).astype(np.int64)
    values = rng.normal(size=3000)
    values[7] = 1e300  # would be Infinity as float32: the chunk keeps float64
    back = chunks.decode(chunks.encode(Points(steps, values)))
    assert same(back.steps, steps)
    assert same(back.values, values)
    assert chunks.stored_values(values, "float32")[7] == 1e300


@settings(max_examples=200, deadline=None)
@given(
    arrays(
        np.float64,
        st.integers(1, 600),
        elements=st.floats(width=64)
        | st.sampled_from([-0.0, 5e-324, 1e-50, float(2**53 + 2), 1 / 3, 16.017241]),
    ),
    st.booleans(),
    st.integers(0, 2**63 - 1).map(
        lambda bits: float(np.array([bits | 0x7FF0000000000001], np.uint64).view(np.float64)[0])
    ),
)
def test_any_float64_survives_the_default_chunk_summary_and_outline_bit_for_bit(
    values: np.ndarray, even: bool, payload_nan: float
) -> None:
    """Any float64 bit pattern (NaN payloads, subnormals, -0.0, ±Infinity) comes back as it
    went in from a chunk at the default precision, and every value its summary and outline
    hold is one of the chunk's points, bit for bit."""
    values = values.copy()
    values[len(values) // 2] = payload_nan
    n = len(values)
    steps = np.arange(n, dtype=np.int64) * 7 if even else np.cumsum(1 + np.arange(n) % 5)
    points = Points(steps.astype(np.int64), values)
    blob, buckets = chunks.pack(points)
    back = chunks.decode(blob)
    assert back.steps.tolist() == points.steps.tolist()
    assert back.values.view(np.uint64).tolist() == values.view(np.uint64).tolist()
    # A summary names a bucket's first NaN by its step (the API has one NaN, "NaN"): NaN
    # payloads are the chunk's alone, every other value is compared bit for bit.
    at = dict(zip(steps.tolist(), _bits(values), strict=True))
    summary = summary_codec.decode_buckets(summary_codec.encode_buckets(buckets))
    named = chunks.bucket_points(summary)
    assert dict(zip(named.steps.tolist(), _bits(named.values), strict=True)).items() <= at.items()
    shape = outline.encode(buckets, chunks.holds_float32(blob))
    for pick, got in outline.decode(shape, int(steps[0]), int(steps[-1]), n).items():
        found = dict(zip(got.steps.tolist(), _bits(got.values), strict=True))
        if pick == "max":  # a bucket of NaN only has no largest point: its first, with NaN
            found = {s: v for s, v in found.items() if v != _bits(np.array([np.nan]))[0]}
        assert found.items() <= at.items(), pick


def _bits(values: np.ndarray) -> list[int]:
    """Each value's bits, every NaN as NumPy's one NaN."""
    out = values.astype(np.float64, copy=True)
    out[np.isnan(out)] = np.nan
    return out.view(np.uint64).tolist()


def test_float32_chunks_cost_about_four_bytes_a_point() -> None:
    rng = np.random.default_rng(3)
    steps = np.arange(4096, dtype=np.int64)
    blob = chunks.encode(Points(steps, rng.normal(size=4096)), "float32")
    assert chunks.holds_float32(blob) and len(blob) / 4096 < 4.2
    constant = chunks.encode(Points(steps, np.full(4096, 3e-4)))
    assert len(constant) < 200  # a learning-rate plateau compresses to almost nothing


def test_the_default_is_float64_and_costs_no_more_where_float32_would_keep_everything() -> None:
    """What a JAX trainer logs (float32 values, arriving as their exact float64) takes about
    as many bytes kept losslessly as float64 as it did rounded to float32; values logged as
    six decimals take fewer (pcodec finds their decimal grid in float64, not in float32)."""
    rng = np.random.default_rng(3)
    steps = np.arange(4096, dtype=np.int64)
    walk = (10.0 + np.cumsum(rng.normal(scale=0.01, size=4096))).astype(np.float32)
    exact = chunks.encode(Points(steps, walk.astype(np.float64)))
    rounded = chunks.encode(Points(steps, walk.astype(np.float64)), "float32")
    assert not chunks.holds_float32(exact) and chunks.holds_float32(rounded)
    assert len(exact) <= 1.03 * len(rounded)
    decimals = np.round(rng.uniform(0.0, 10.0, size=4096), 6)
    exact = chunks.encode(Points(steps, decimals))
    assert len(exact) < len(chunks.encode(Points(steps, decimals), "float32"))
    assert chunks.decode(exact).values.tobytes() == decimals.tobytes()


def test_chunks_of_the_earlier_zlib_codec_still_read() -> None:
    """What chunks held before pcodec: byte-shuffled zlib values, zlib step deltas."""
    steps = np.array([0, 3, 4, 10, 11], dtype=np.int64)
    values = np.array([1.5, math.nan, -math.inf, 2.25, -0.0], dtype=np.float64)
    diffs = chunks.shuffle_zlib(np.diff(steps).astype("<i8").tobytes(), 8)
    header = chunks._HEADER.pack(1, 1, 1, 1, 5, 0, 0, len(diffs))  # float64, zlib, zlib
    blob = header + diffs + chunks.shuffle_zlib(values.astype("<f8").tobytes(), 8)
    back = chunks.decode(blob)
    assert back.steps.tolist() == steps.tolist()
    assert back.values.view(np.int64).tolist() == values.view(np.int64).tolist()


def test_float32_chunks_as_the_earlier_default_wrote_them_still_read() -> None:
    """Header kind 0 (float32), pcodec and zlib values: read as the float64 of each float32's
    shortest decimal, as they always did."""
    steps = np.arange(6, dtype=np.int64)
    narrow = np.array([16.017241, 1 / 3, 0.1, np.nan, np.inf, -0.0]).astype("<f4")
    for codec, body in ((2, chunks.pco(narrow)), (1, chunks.shuffle_zlib(narrow.tobytes(), 4))):
        blob = chunks._HEADER.pack(1, 0, 0, codec, 6, 0, 1, 0) + body
        assert chunks.holds_float32(blob)
        back = chunks.decode(blob)
        assert back.steps.tolist() == steps.tolist()
        assert back.values[[0, 1, 2, 4]].tolist() == [16.01724, 0.33333334, 0.1, np.inf]
        assert np.isnan(back.values[3]) and str(back.values[5]) == "-0.0"


def test_pcodec_data_of_the_wrong_width_is_refused() -> None:
    values = chunks.pco(np.arange(3, dtype="<f8"))
    header = chunks._HEADER.pack(1, 0, 0, 2, 3, 0, 1, 0)  # says float32, holds float64
    with pytest.raises(chunks.ChunkFormatError, match="float64"):
        chunks.decode(header + values)


def test_corrupt_or_foreign_bytes_are_refused() -> None:
    with pytest.raises(chunks.ChunkFormatError):
        chunks.decode(b"\x07" + bytes(40))
    with pytest.raises(chunks.ChunkFormatError):
        chunks.decode(b"abc")


def brute(points: Points, size: int) -> list[tuple[int, int, int, int, int, int]]:
    out = []
    for lo in range(0, len(points), size):
        s, v = points.steps[lo : lo + size], points.values[lo : lo + size]
        finite = ~np.isnan(v)
        mn = int(s[finite][np.argmin(v[finite])]) if finite.any() else NO_STEP
        mx = int(s[finite][np.argmax(v[finite])]) if finite.any() else NO_STEP
        nan = int(s[~finite][0]) if (~finite).any() else NO_STEP
        out.append((int(s[0]), int(s[-1]), mn, mx, nan, len(s)))
    return out


def test_summaries_match_a_brute_force_reference() -> None:
    rng = np.random.default_rng(4)
    steps = np.cumsum(rng.integers(1, 4, size=1000)).astype(np.int64)
    values = rng.normal(size=1000)
    values[rng.choice(1000, 30, replace=False)] = np.nan
    values[64:128] = np.nan  # a bucket of NaN only
    values[500] = np.inf
    pts = Points(steps, values)
    got = chunks.summarize(pts)
    fields = ["first_step", "last_step", "min_step", "max_step", "nan_step", "count"]
    assert [tuple(int(b[f]) for f in fields) for b in got] == brute(pts, chunks.FANOUT)
    whole = chunks.merge_buckets(got)[0]
    assert tuple(int(whole[f]) for f in fields) == brute(pts, 1000)[0]
    cand = chunks.bucket_points(got)
    index = {int(s): i for i, s in enumerate(steps)}
    for s, v in zip(cand.steps, cand.values, strict=True):
        assert same(np.array([v]), values[[index[int(s)]]])  # every candidate is a real point


def _summaries(seed: int) -> list[np.ndarray]:
    """Summaries of every shape a store holds: evenly and unevenly spaced steps, NaN-only
    buckets, ±inf, a short last bucket, steps past 2³¹ apart, one bucket, float64 values."""
    rng = np.random.default_rng(seed)
    out = []
    for n, gaps in ((4096, 1), (1000, 0), (700, 2**33), (1, 1), (65, 5)):
        steps = (
            np.cumsum(rng.integers(1, 4, size=n)) if gaps == 0 else np.arange(n) * gaps
        ).astype(np.int64) + int(rng.integers(-(10**12), 10**12))
        values = rng.lognormal(size=n)
        values[rng.choice(n, n // 10, replace=False)] = np.nan
        if n > 200:
            values[64:128] = np.nan
            values[150], values[151] = np.inf, -np.inf
        out.append(chunks.pack(Points(steps, values), "float32")[1])
        out.append(chunks.pack(Points(steps, values))[1])  # float64 values
    return out


def test_summaries_round_trip_bit_for_bit_singly_and_together() -> None:
    summaries = _summaries(5)
    # Values in pcodec from 16 buckets on; a smaller summary keeps them in zlib.
    assert [summary_codec.encode_buckets(b)[0] for b in summaries] == [2, 2, 2, 2, 3, 3, 3, 3, 3, 3]
    for buckets in summaries:
        back = summary_codec.decode_buckets(summary_codec.encode_buckets(buckets))
        assert back.tobytes() == buckets.tobytes()
    together, counts = summary_codec.decode_bucket_rows(
        [summary_codec.encode_buckets(b) for b in summaries]
    )
    assert counts.tolist() == [len(b) for b in summaries]
    assert together.tobytes() == np.concatenate(summaries).tobytes()


def test_summaries_of_the_earlier_zlib_layout_still_read_beside_new_ones() -> None:
    summaries = _summaries(6)
    old = [chunks.shuffle_zlib(b.tobytes(), chunks.BUCKET.itemsize) for b in summaries]
    assert all(blob[0] == 0x78 for blob in old)
    mixed = [
        blob
        for pair in zip(old, map(summary_codec.encode_buckets, summaries), strict=True)
        for blob in pair
    ]
    got, counts = summary_codec.decode_bucket_rows(mixed)
    want = [b for b in summaries for _ in range(2)]
    assert counts.tolist() == [len(b) for b in want]
    assert got.tobytes() == np.concatenate(want).tobytes()


def test_summaries_are_about_half_the_bytes_of_the_earlier_layout() -> None:
    rng = np.random.default_rng(8)
    values = np.cumsum(rng.normal(size=4096)) + 100.0
    _, buckets = chunks.pack(Points(np.arange(4096, dtype=np.int64), values), "float32")
    old = len(chunks.shuffle_zlib(buckets.tobytes(), chunks.BUCKET.itemsize))
    assert len(summary_codec.encode_buckets(buckets)) < 0.65 * old


def test_corrupt_summaries_are_refused() -> None:
    blob = summary_codec.encode_buckets(_summaries(7)[0])
    for bad in (b"", b"\x05" + blob[1:], blob[:30], blob[:-7]):
        with pytest.raises(chunks.ChunkFormatError):
            summary_codec.decode_buckets(bad)


def test_merge_points_keeps_the_stored_value() -> None:
    old = Points(np.array([1, 3], dtype=np.int64), np.array([1.0, 3.0]))
    new = Points(np.array([2, 3], dtype=np.int64), np.array([2.0, 99.0]))
    merged = chunks.merge_points(old, new)
    assert merged.steps.tolist() == [1, 2, 3]
    assert merged.values.tolist() == [1.0, 2.0, 3.0]


def test_float32_values_read_back_as_their_shortest_decimal() -> None:
    logged = np.array([15.37, 15.24, 3e-4, 6e-4, -2.5, 1e-45, 3.4e38, 123456789.0, 0.0])
    steps = np.arange(len(logged), dtype=np.int64)
    back = chunks.decode(chunks.encode(Points(steps, logged), "float32"))
    assert back.values.tolist()[:5] == [15.37, 15.24, 3e-4, 6e-4, -2.5]
    assert same(back.values.astype(np.float32), logged.astype(np.float32))  # nothing lost
    rng = np.random.default_rng(5)
    noise = (rng.normal(size=5000) * 10.0 ** rng.integers(-20, 20, size=5000)).astype(np.float32)
    assert same(chunks.readable(noise).astype(np.float32), noise)


def test_the_summary_codec_examples_hold() -> None:
    assert doctest.testmod(summary_codec, raise_on_error=False).failed == 0
