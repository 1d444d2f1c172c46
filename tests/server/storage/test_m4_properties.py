"""M4 selection over generated series, against the brute-force reference
(`tests.helpers.m4_reference`).

Series are built from a hypothesis-drawn shape (length 0-5000, step pattern, value pattern,
NaN/±Inf rates, spikes) and a seed for the bulk of the numbers.
"""

from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, example, given, settings

from normwatch.server.storage.m4 import m4_select
from tests.helpers.m4_reference import Series, bucket_of, reference


@st.composite
def series(draw: st.DrawFn) -> Series:
    n = draw(st.integers(0, 5000) | st.sampled_from([0, 1, 2, 4, 5, 5000]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    offset = draw(st.sampled_from([0, 1, 77_096, 2**40, 2**62]))
    pattern = draw(st.sampled_from(["dense", "gaps", "irregular", "sparse"]))
    if pattern == "dense":
        increments = np.ones(n, dtype=np.int64)
    elif pattern == "gaps":
        increments = np.where(rng.random(n) < 0.01, rng.integers(100, 10_000, n), 1)
    elif pattern == "irregular":
        increments = rng.integers(1, 50, n)
    else:
        increments = rng.integers(1, 10**6, n)
    steps = offset + np.cumsum(increments, dtype=np.int64) - increments[:1].sum()

    shape = draw(st.sampled_from(["walk", "constant", "few", "noise"]))
    if shape == "walk":
        values = np.cumsum(rng.normal(size=n))
    elif shape == "constant":
        values = np.full(n, draw(st.sampled_from([0.0, -0.0, 1.5, 1e308])))
    elif shape == "few":  # many ties: the first of equal extremes must be the one kept
        values = rng.choice([0.25, 0.5, 0.75], size=n)
    else:
        values = rng.normal(size=n).round(1)
    for special, rate in (
        (math.nan, draw(st.sampled_from([0.0, 0.01, 0.3, 1.0]))),
        (math.inf, draw(st.sampled_from([0.0, 0.01, 0.5]))),
        (-math.inf, draw(st.sampled_from([0.0, 0.01, 0.5]))),
    ):
        values[rng.random(n) < rate] = special
    if n:
        spikes = draw(st.lists(st.tuples(st.integers(0, n - 1), st.floats()), max_size=4))
        for i, spike in spikes:
            values[i] = spike

    start = int(steps[0]) - draw(st.integers(0, 1000)) if n else offset
    end = (int(steps[-1]) if n else start) + draw(st.integers(0, 1000))
    buckets = draw(st.integers(1, 20_000) | st.sampled_from([1, 2, 3, 4, 1000]))
    return Series(steps.astype(np.int64), values.astype(np.float64), max(start, 0), end, buckets)


def check(s: Series) -> None:
    got = m4_select(s.steps, s.values, s.buckets, s.start, s.end)
    n = len(s.steps)
    assert got.dtype == np.int64
    kept = got.tolist()
    assert all(0 <= i < n for i in kept), "every selected point is an input point"
    assert kept == sorted(set(kept)), "ascending by step, no point twice"

    want = reference(s)
    chosen: dict[int, set[int]] = {}
    for i in kept:
        chosen.setdefault(bucket_of(int(s.steps[i]), s.start, s.end, s.buckets), set()).add(i)
    assert set(chosen) == set(want), "a point from every non-empty bucket, and only those"
    for bucket, need in want.items():
        missing = need - chosen[bucket]
        assert not missing, f"bucket {bucket} lost {sorted(missing)} of {sorted(need)}"
        has_nan = bool(np.isnan(s.values[sorted(need)]).any())
        assert len(chosen[bucket]) <= 4 + has_nan, f"bucket {bucket} kept {len(chosen[bucket])}"


_EDGE = 2573485501354569
M4_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def explicit(steps: list[int], values: list[float], buckets: int, start: int, end: int) -> Series:
    return Series(np.array(steps, dtype=np.int64), np.array(values), start, end, buckets)


@M4_SETTINGS
@given(series())
@example(explicit([], [], 3, 0, 9))
@example(explicit([5], [math.nan], 1, 5, 5))
@example(explicit([0, 1, 2, 3], [math.nan] * 4, 2, 0, 3))
@example(explicit([0, 1, 2, 3, 4], [1.0, math.inf, -math.inf, math.inf, 1.0], 1, 0, 4))
@example(explicit([0, 9, 10, 19], [3.0, 3.0, 3.0, 3.0], 2, 0, 19))
@example(explicit([2**62, 2**62 + 1, 2**62 + 7], [0.0, 9.0, -9.0], 3, 2**62, 2**62 + 8))
@example(explicit(list(range(0, 10_000, 7)), [0.5] * 1429, 20_000, 0, 9_999))
# Steps past 2**53 (the API takes them up to 2**63 - 1): bucket edges computed in float64
# put step 2573485501354569 (exactly the last of bucket 1 of 7 over [0, 2**53]) in bucket 2,
# where it stands as first and the true first, the step after, is dropped.
@example(explicit([_EDGE + i for i in range(5)], [1.0, 1.0, 0.0, 2.0, 1.0], 7, 0, 2**53))
def test_m4_keeps_every_buckets_first_last_min_max(s: Series) -> None:
    check(s)
