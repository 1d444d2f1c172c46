"""Which leaves `stability_metrics` splits into layers, how layers are named, the bound on a
guessed split, and the norms of parameters sharded over an 8-device mesh.

Each tree shape (stacked arrays, a dict of ``layers_N``, Flax linen and nnx parameter trees,
with their optax updates and AdamW state) is checked against the float64 reference of
`tests.helpers.jax_norms`, which spells the naming rules out by hand."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from normwatch.client import PackedMetrics, _layers
from normwatch.client.jax import MAX_GUESSED_LAYERS, stability_metrics
from normwatch.server.analytics.layers import depth_group, depth_order
from tests.helpers.jax_norms import (
    RTOL,
    assert_norms_match,
    find_adam,
    random_like,
    reference_norms,
    to_numpy,
)

ROOT = Path(__file__).resolve().parents[2]

# --- tree shapes -------------------------------------------------------------------------------


class Block(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Dense(32, name="w1")(nn.LayerNorm(name="norm")(x))
        return x + nn.Dense(8, name="w2")(nn.gelu(h))


class BlockList(nn.Module):
    """Flax names a list attribute's modules ``layers_0``, ``layers_1``… inside this one."""

    n_layers: int

    def setup(self) -> None:
        self.layers = [Block() for _ in range(self.n_layers)]

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.layers:
            x = block(x)
        return x


class NestedListModel(nn.Module):
    """A module named ``layers`` holding a list: ``layers.layers_0.w1.kernel``…"""

    n_layers: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(8, name="embed")(x)
        x = BlockList(self.n_layers, name="layers")(x)
        return nn.Dense(4, name="lm_head")(x)


class ScanBlock(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
        return Block()(x), None


class ScannedModel(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(8, name="embed")(x)
        scan = nn.scan(
            ScanBlock, variable_axes={"params": 0}, split_rngs={"params": True}, length=3
        )
        x, _ = scan(name="layers")(x, None)
        return nn.Dense(4, name="lm_head")(nn.RMSNorm(name="final_norm")(x))


class NnxBlock(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.norm = nnx.RMSNorm(8, rngs=rngs)
        self.w1 = nnx.Linear(8, 8, rngs=rngs)  # square: its kernel and bias start with 8 too


class NnxStacked(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(20, 8, rngs=rngs)

        @nnx.split_rngs(splits=3)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def blocks(rngs: nnx.Rngs) -> NnxBlock:
            return NnxBlock(rngs)

        self.layers = blocks(rngs)
        self.lm_head = nnx.Linear(8, 20, rngs=rngs)


class NnxList(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(20, 8, rngs=rngs)
        self.layers = nnx.List([NnxBlock(rngs) for _ in range(3)])
        self.lm_head = nnx.Linear(8, 20, rngs=rngs)


def linen_params(module: nn.Module) -> Any:
    """The parameter tree ``module.init`` makes, filled with random values (tracing it for
    the shapes alone skips compiling Flax's initialisers)."""
    return random_like(jax.eval_shape(module.init, jax.random.key(0), jnp.ones((2, 4))), 0)


def nnx_params(model: Callable[[nnx.Rngs], nnx.Module]) -> nnx.State:
    """The ``nnx.Param`` state of ``model``, filled with random values."""
    return random_like(nnx.state(nnx.eval_shape(lambda: model(nnx.Rngs(0))), nnx.Param), 0)


def square_block(seed: int) -> Any:
    """A block whose every leaf starts with 8: stacked or not cannot be told from shapes."""
    return random_like({"w": (8, 8), "b": (8,), "norm": {"scale": (8,)}}, seed)


TREE_SHAPES: dict[str, Callable[[], Any]] = {
    "stacked arrays": lambda: random_like(
        {
            "embed": (50, 8),
            "layers": {"attn": {"wq": (4, 8, 8)}, "mlp": {"w1": (4, 8, 32), "b1": (4, 32)}},
            "lm_head": (8, 50),
        },
        seed=1,
    ),
    "a whole stack as one leaf": lambda: random_like({"layers": (5, 8), "out": (8,)}, seed=2),
    "dict of layers_N under layers": lambda: {
        "embed": random_like((50, 8), 3),
        "layers": {f"layers_{i}": square_block(10 + i) for i in range(3)},
    },
    "layers_N at the top": lambda: {f"layers_{i}": square_block(20 + i) for i in range(3)},
    "a module named layers, not stacked": lambda: random_like(
        {"layers": {"w1": (8, 32), "w2": (32, 8), "b": (8,)}, "head": (8, 2)}, seed=4
    ),
    "two stacks, one per dict": lambda: {
        "encoder": {"layers": random_like({"w": (2, 8, 8), "b": (2, 8)}, 5)},
        "decoder": {"layers": {f"layers_{i}": square_block(30 + i) for i in range(2)}},
    },
    "flax linen scan": lambda: linen_params(ScannedModel()),
    "flax linen layers.layers_N": lambda: linen_params(NestedListModel()),
    "flax nnx vmap": lambda: nnx_params(NnxStacked),
    "flax nnx List": lambda: nnx_params(NnxList),
}


def plain(tree: Any) -> Any:
    """``tree`` as dicts and NumPy arrays, for the reference (an nnx ``State`` through its own
    ``to_pure_dict``)."""
    return to_numpy(nnx.to_pure_dict(tree) if isinstance(tree, nnx.State) else tree)


# --- norms against the reference ----------------------------------------------------------------


@pytest.mark.parametrize("shape", TREE_SHAPES)
def test_every_tree_shape_matches_a_float64_reference(shape: str) -> None:
    params = TREE_SHAPES[shape]()
    tx = optax.adamw(1e-2)

    @jax.jit
    def train_step(params: Any) -> tuple[Any, Any, Any, PackedMetrics]:
        grads = jax.tree_util.tree_map(lambda x: x * 0.5 + 0.25, params)
        updates, opt_state = tx.update(grads, tx.init(params), params)
        # Packed: the dict's norms as one output of the step (a fraction of the compile).
        norms = stability_metrics(
            grads, params, updates, opt_state, moments_per_leaf=True, packed=True
        )
        return grads, updates, opt_state, norms

    grads, updates, opt_state, packed = train_step(params)
    metrics = dict(packed.items())
    adam = find_adam(opt_state)

    expected = reference_norms(plain(grads), "grad/norm/")
    expected |= reference_norms(plain(params), "params/norm/")
    expected |= reference_norms(plain(updates), "updates/norm/")
    expected |= reference_norms(plain(adam.mu), "optim/mu/norm/")
    expected |= reference_norms(plain(adam.nu), "optim/nu/norm/")
    assert_norms_match(metrics, expected)
    assert set(metrics) == set(expected)


def test_a_module_named_layers_holding_a_list_is_named_by_its_keys() -> None:
    # This model gave 1,361 metrics when every weight was cut along its first axis.
    params = linen_params(NestedListModel(n_layers=2))
    opt_state = optax.adamw(1e-3).init(params)
    metrics = stability_metrics(params, params, params, opt_state)

    leaves = ["norm.bias", "norm.scale", "w1.bias", "w1.kernel", "w2.bias", "w2.kernel"]
    per_family = [
        "total",
        "embed.bias",
        "embed.kernel",
        "lm_head.bias",
        "lm_head.kernel",
        *(f"layers.{i}" for i in range(2)),
        *(f"layers.{i}.{leaf}" for i in range(2) for leaf in leaves),
    ]
    assert sorted(metrics) == sorted(
        [f"{family}/norm/{name}" for family in ("grad", "params", "updates") for name in per_family]
        + ["optim/mu/norm/total", "optim/nu/norm/total"]
    )
    assert len(metrics) == 59


def test_layer_names_land_in_the_servers_depth_order() -> None:
    params = linen_params(NestedListModel(n_layers=12))
    names = stability_metrics(params, params)
    parts = [name.removeprefix("grad/norm/") for name in names if name.startswith("grad/")]
    rows = [part for part in parts if part.count(".") == 1 and not part.endswith("bias")]
    assert depth_order(rows) == [
        "embed.kernel",
        *(f"layers.{i}" for i in range(12)),  # layers.2 before layers.10
        "lm_head.kernel",
    ]
    assert {depth_group(f"layers.{i}") for i in range(12)} == {"blocks"}


@settings(max_examples=12, deadline=None)
@given(
    n_layers=st.integers(1, 5),
    shapes=st.lists(
        st.lists(st.integers(1, 5), min_size=0, max_size=2).map(tuple), min_size=1, max_size=3
    ),
)
def test_a_stack_and_its_layers_as_keys_give_the_same_norms(
    n_layers: int, shapes: list[tuple[int, ...]]
) -> None:
    # Leaf dims are drawn from the same range as the depth, so a layer's own first dimension
    # often equals the number of layers: only the keys tell the forms apart.
    per_layer = [
        random_like({f"p{j}": shape for j, shape in enumerate(shapes)}, seed=i)
        for i in range(n_layers)
    ]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *per_layer)
    forms = {
        "stacked": {"layers": stacked},
        "list": {"layers": per_layer},
        "layers.layers_N": {"layers": {f"layers_{i}": p for i, p in enumerate(per_layer)}},
        "layers_N": {f"layers_{i}": p for i, p in enumerate(per_layer)},
    }
    got = {form: stability_metrics(tree, tree, per_leaf=True) for form, tree in forms.items()}
    names = sorted(got["stacked"])
    assert f"grad/norm/layers.{n_layers - 1}" in names
    for form, metrics in got.items():
        assert sorted(metrics) == names, form
        for name in names:
            np.testing.assert_allclose(
                float(metrics[name]), float(got["stacked"][name]), rtol=RTOL, err_msg=name
            )


# --- what is split, and when it is refused ------------------------------------------------------


def test_leaves_that_do_not_share_their_first_dimension_are_not_split() -> None:
    tree = random_like({"layers": {"w1": (8, 32), "w2": (32, 8)}}, seed=6)
    metrics = stability_metrics(tree, tree)
    assert sorted(metrics) == [
        "grad/norm/layers.w1",
        "grad/norm/layers.w2",
        "grad/norm/total",
        "params/norm/layers.w1",
        "params/norm/layers.w2",
        "params/norm/total",
    ]
    # Given layer_axes is trusted: leaves it cannot split are a mistake in it.
    with pytest.raises(ValueError, match="layer_axes") as refused:
        stability_metrics(tree, tree, layer_axes={"layers": 0})
    message = str(refused.value)
    assert "layers.w1 (8, 32), layers.w2 (32, 8)" in message
    assert "layer_axes={'layers': None}" in message


def test_a_guessed_stack_deeper_than_the_bound_is_refused_naming_layer_axes() -> None:
    depth = MAX_GUESSED_LAYERS + 1
    wide = {"layers": {"kernel": jnp.ones((depth, 4)), "bias": jnp.ones((depth,))}}
    with pytest.raises(ValueError, match="layer_axes") as refused:
        stability_metrics(wide, wide)
    message = str(refused.value)
    assert f"into {depth:,} layers" in message
    assert "layer_axes={'layers': None}" in message and "layer_axes={'layers': 0}" in message

    # Not stacked: each leaf keeps its name.
    whole = stability_metrics(wide, wide, layer_axes={"layers": None})
    assert sorted(n for n in whole if n.startswith("grad/")) == [
        "grad/norm/layers.bias",
        "grad/norm/layers.kernel",
        "grad/norm/total",
    ]
    # Named in layer_axes, a stack of any depth is split.
    deep = stability_metrics(wide, wide, layer_axes={"layers": 0}, per_leaf=False)
    assert len(deep) == 2 * (depth + 1)
    np.testing.assert_allclose(float(deep[f"grad/norm/layers.{depth - 1}"]), np.sqrt(5.0))
    # At the bound itself the guess stands.
    at_bound = {"layers": {"w": jnp.ones((MAX_GUESSED_LAYERS, 3))}}
    guessed = stability_metrics(at_bound, at_bound, per_leaf=False)
    assert f"grad/norm/layers.{MAX_GUESSED_LAYERS - 1}" in guessed


def test_the_refusal_quoted_in_the_docs_is_the_one_given() -> None:
    dense = {"layers": {"kernel": jnp.ones((4096, 4096)), "bias": jnp.ones((4096,))}}
    with pytest.raises(ValueError) as refused:
        stability_metrics(dense, dense)
    quoted = [
        line.removeprefix("ValueError: ")
        for line in (ROOT / "docs" / "client.md").read_text().splitlines()
        if line.startswith("ValueError: the leaves under")
    ]
    assert quoted == [str(refused.value)]


def test_layer_axes_none_names_layers_without_splitting() -> None:
    stacked = random_like({"layers": {"w": (3, 4)}}, seed=7)
    assert sorted(stability_metrics(stacked, stacked, layer_axes={"layers": None})) == [
        "grad/norm/layers.w",
        "grad/norm/total",
        "params/norm/layers.w",
        "params/norm/total",
    ]
    listed = {"blocks": {f"blocks_{i}": random_like({"w": (2, 2)}, i) for i in range(2)}}
    names = set(stability_metrics(listed, listed, layer_axes={"blocks": None}))
    assert {"grad/norm/blocks.0.w", "grad/norm/blocks.0", "grad/norm/blocks.1"} <= names


def test_the_split_rules_examples_run() -> None:
    assert doctest.testmod(_layers, raise_on_error=False).failed == 0


# --- an 8-device mesh -----------------------------------------------------------------------------


@pytest.mark.slow
def test_sharded_norms_on_an_8_device_mesh_equal_single_device_norms() -> None:
    """`tests.helpers.jax_mesh` in a process of its own (XLA reads the device count once, at
    start-up): both tree forms, on a mesh of each axis type, against one device."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    environment = {**os.environ, "XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tests.helpers.jax_mesh"],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["devices"] == 8
    runs = {key: value for key, value in report.items() if isinstance(value, dict)}
    assert sorted(runs) == [
        "auto layers_N",
        "auto stacked",
        "explicit layers_N",
        "explicit stacked",
    ]
    for key, run in runs.items():
        names = run["names"]
        assert names == run["single_names"], key
        assert {f"grad/norm/layers.{i}" for i in range(4)} <= set(names), key
        assert not any(".layers." in name for name in names), key
        assert run["max_relative_difference"] <= 1e-6, key
        assert run["devices_per_leaf"] == [8], key
        assert run["sharded_leaves"] == (7 if "stacked" in key else 22), key
        # What crosses devices is sums of squares, never parameters. An all-gather carries
        # the per-layer sums of one leaf (4 layers): fewer elements than one device's shard
        # of the smallest sharded parameter. Any other collective carries at most the sums
        # the norms add up (each counted in a leaf's norm, its layer's and its total).
        # Sizes are bounded rather than ops counted: XLA's choice of collectives varies.
        smallest_shard = run["smallest_sharded_leaf"] // 8
        for collective in run["collectives"]:
            if collective["op"] == "all-gather":
                assert collective["elements"] <= 4 < smallest_shard, (key, collective)
            else:
                assert collective["elements"] <= 3 * len(names), (key, collective)
