"""Depth order, the layer × step grid and the U-index, against references written plainly."""

from __future__ import annotations

import doctest
import random
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normwatch.server.analytics import layers
from normwatch.server.analytics.layers import bucket_edges, bucket_max, depth_order, u_index


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(layers).failed == 0


def test_48_layers_come_back_in_numeric_order_between_the_embedding_and_the_head() -> None:
    expected = ["embed", *(f"layers.{i}" for i in range(48)), "final_norm.weight", "lm_head"]
    shuffled = expected[:]
    random.Random(0).shuffle(shuffled)
    assert depth_order(shuffled) == expected


@pytest.mark.parametrize(
    "expected",
    [
        # GPT-2 / nanoGPT
        [
            "wpe",
            "wte",
            "h.0.attn.c_attn",
            "h.0.mlp.c_fc",
            "h.1.attn.c_attn",
            "h.11.mlp.c_fc",
            "ln_f",
            "lm_head",
        ],
        # Llama in Hugging Face naming
        [
            "model.embed_tokens",
            "model.layers.0.mlp.down_proj",
            "model.layers.0.self_attn.q_proj",
            "model.layers.9.mlp.down_proj",
            "model.layers.10.mlp.down_proj",
            "model.norm",
            "lm_head",
        ],
        # Levanter / Flax paths with slashes
        [
            "embeddings/token_embeddings",
            "transformer/blocks/0/mlp",
            "transformer/blocks/2/mlp",
            "transformer/blocks/10/mlp",
            "transformer/ln_f",
            "lm_head/kernel",
        ],
    ],
)
def test_common_naming_schemes_sort_by_depth(expected: list[str]) -> None:
    assert depth_order(reversed(expected)) == expected


def test_bucket_edges_cover_the_range_in_near_equal_buckets() -> None:
    assert bucket_edges(0, 9, 3).tolist() == [0, 3, 6, 10]
    assert bucket_edges(100, 104, 10).tolist() == [100, 101, 102, 103, 104, 105]
    edges = bucket_edges(0, 999_999, 1000)
    assert len(edges) == 1001 and set(np.diff(edges).tolist()) == {1000}
    with pytest.raises(ValueError, match="buckets must be at least 1"):
        bucket_edges(0, 9, 0)


@pytest.mark.parametrize(
    ("lo", "hi", "buckets"),
    [(-(2**63), 2**63 - 1, 3), (0, 2**63 - 1, 4000), (-5, 2**62, 7), (2**62, 2**62 + 9, 3)],
)
def test_bucket_edges_are_exact_across_the_whole_int64_range(
    lo: int, hi: int, buckets: int
) -> None:
    # In Python integers: i · span overflows int64; the last edge stops at int64's end.
    expected = [min(lo + i * (hi - lo + 1) // buckets, 2**63 - 1) for i in range(buckets + 1)]
    assert bucket_edges(lo, hi, buckets).tolist() == sorted(set(expected))


@settings(deadline=None)  # a property, not a timing: a busy machine must not fail it
@given(
    points=st.dictionaries(
        st.integers(-50, 250),
        st.one_of(st.floats(-1e6, 1e6), st.just(float("nan")), st.just(float("inf"))),
        max_size=80,
    ),
    buckets=st.integers(1, 40),
    descending=st.booleans(),
)
def test_bucket_max_is_each_buckets_largest_finite_value(
    points: dict[int, float], buckets: int, descending: bool
) -> None:
    order = sorted(points, reverse=descending)  # steps out of order take the slower path
    steps = np.array(order, dtype=np.int64)
    values = np.array([points[s] for s in order], dtype=np.float64)
    edges = bucket_edges(0, 199, buckets)
    got = bucket_max(steps, values, edges)
    for i, (a, b) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)):
        inside = [v for s, v in points.items() if a <= s < b and np.isfinite(v)]
        if inside:
            assert got[i] == max(inside)
        else:
            assert np.isnan(got[i])


def test_values_at_picks_the_logged_steps_only() -> None:
    steps = np.array([0, 10, 20, 30], dtype=np.int64)
    values = np.array([1.0, 2.0, 3.0, 4.0])
    got = layers.values_at(steps, values, np.array([-5, 0, 5, 20, 30, 40], dtype=np.int64))
    assert [None if np.isnan(v) else v for v in got.tolist()] == [None, 1.0, None, 3.0, 4.0, None]


@given(
    grid=st.lists(
        st.lists(st.one_of(st.floats(0.01, 100.0), st.just(float("nan"))), min_size=4, max_size=4),
        min_size=1,
        max_size=12,
    )
)
def test_u_index_is_the_mean_of_the_ends_over_the_median_of_the_middle(
    grid: list[list[float]],
) -> None:
    got = u_index(np.array(grid, dtype=np.float64))
    for column in range(4):
        profile = [row[column] for row in grid]
        middle = [v for v in profile[1:-1] if not np.isnan(v)]
        if len(profile) < 3 or not middle:
            assert np.isnan(got[column])
            continue
        want = (profile[0] + profile[-1]) / 2 / statistics.median(middle)
        if np.isnan(want):
            assert np.isnan(got[column])
        else:
            assert got[column] == pytest.approx(want, rel=1e-12)


def test_a_flat_profile_has_u_index_one_and_a_u_more() -> None:
    flat = np.ones((50, 3))
    assert u_index(flat).tolist() == [1.0, 1.0, 1.0]
    u = np.ones((50, 1))
    u[0], u[-1] = 6.0, 10.0
    assert u_index(u).tolist() == [8.0]
