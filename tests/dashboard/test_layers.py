"""Depth ordering of per-layer metrics and the steepness of the U."""

from __future__ import annotations

import math

from normwatch.dashboard.layers import depth_profile, families_with_layers


def test_orders_by_depth_with_ends_around_the_stack() -> None:
    latest = [
        ("grad/norm/layers.10", 1.0),
        ("grad/norm/lm_head", 8.0),
        ("grad/norm/layers.2", 1.5),
        ("grad/norm/embed", 6.0),
        ("grad/norm/layers.2.attn.wq", 99.0),  # a leaf inside a layer, not the layer
        ("params/norm/layers.2", 40.0),
        ("grad/norm/total", 3.0),
        ("grad/norm/layers.0", None),
    ]
    profile = depth_profile(latest, "grad/norm")
    assert profile.labels == ["embed", "layers.0", "layers.2", "layers.10", "lm_head"]
    assert profile.values[0] == 6.0 and math.isnan(profile.values[1])
    assert profile.values[2:] == [1.5, 1.0, 8.0]
    assert families_with_layers(n for n, _ in latest) == ["grad/norm", "params/norm"]


def test_end_to_middle_ratio() -> None:
    values = [6.0] + [1.0] * 8 + [10.0]
    latest = [("grad/norm/embed", values[0])]
    latest += [(f"grad/norm/layers.{i}", v) for i, v in enumerate(values[1:-1])]
    latest += [("grad/norm/lm_head", values[-1])]
    assert depth_profile(latest, "grad/norm").end_to_middle == 8.0
    assert depth_profile(latest[:3], "grad/norm").end_to_middle is None


def test_module_leaves_around_the_stack() -> None:
    latest = [
        ("grad/norm/lm_head.kernel", 5.0),
        ("grad/norm/final_norm.scale", 0.1),
        ("grad/norm/layers.0", 1.0),
        ("grad/norm/embed.embedding", 4.0),
        ("grad/norm/wpe.weight", 0.5),
    ]
    assert depth_profile(latest, "grad/norm").labels == [
        "embed.embedding",
        "wpe.weight",
        "layers.0",
        "final_norm.scale",
        "lm_head.kernel",
    ]
