"""`stability_metrics` on parameters sharded over a mesh of 8 devices, against the same
computation on one device; prints what it measured as one JSON object.

Run in a process of its own, started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu`` (XLA reads the flag
once, when JAX starts its CPU backend, so it must be set before ``jax`` is imported)::

    python -m tests.helpers.jax_mesh

The model is a small transformer-shaped tree in two forms, its blocks stacked under
``layers`` (``nn.scan``) and one dict per block (``layers.layers_0``…); its leaves are
sharded along a ``data`` and a ``model`` axis (the stacked layer axis itself too, on one
leaf), with gradients, AdamW updates and AdamW state carrying the same shardings.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from normwatch.client.jax import stability_metrics

DEVICES = 8
LAYERS = 4
D_MODEL, D_HIDDEN, VOCAB = 32, 128, 64

_COLLECTIVE = re.compile(
    r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(.*?)\s+"
    r"(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(",
    re.MULTILINE,
)
_SHAPE = re.compile(r"[a-z]+\d*\[([\d,]*)\]")


def block_specs(stacked: bool) -> dict[str, tuple[tuple[int, ...], P]]:
    """Each leaf of a block: its shape and how it is sharded (the layer axis first when
    ``stacked``; the first leaf is sharded along the layer axis itself)."""
    lead: tuple[int, ...] = (LAYERS,) if stacked else ()
    none: tuple[None, ...] = (None,) if stacked else ()
    return {
        "attn_qkv": (
            lead + (D_MODEL, 3 * D_MODEL),
            P("data", None, "model") if stacked else P(None, "model"),
        ),
        "attn_out": (lead + (D_MODEL, D_MODEL), P(*none, "model", "data")),
        "mlp_w1": (lead + (D_MODEL, D_HIDDEN), P(*none, "data", "model")),
        "mlp_b1": (lead + (D_HIDDEN,), P(*none, "model")),
        "mlp_w2": (lead + (D_HIDDEN, D_MODEL), P(*none, ("data", "model"), None)),
        "norm_scale": (lead + (D_MODEL,), P()),
    }


def model_specs(stacked: bool) -> dict[str, Any]:
    blocks: dict[str, Any] = (
        block_specs(True) if stacked else {f"layers_{i}": block_specs(False) for i in range(LAYERS)}
    )
    return {
        "params": {
            "embed": {"embedding": ((VOCAB, D_MODEL), P("data", "model"))},
            "layers": blocks,
            "final_norm": {"scale": ((D_MODEL,), P())},
            "lm_head": {"kernel": ((D_MODEL, VOCAB), P(None, ("data", "model")))},
        }
    }


def _is_spec(node: object) -> bool:
    return isinstance(node, tuple) and len(node) == 2 and isinstance(node[1], P)


def one_device_step(stacked: bool) -> tuple[Any, Any]:
    """Random float32 parameters, and the inputs of `stability_metrics` after one AdamW
    step on them (grads, params, updates, state), all on one device; with the partition
    spec of each parameter."""
    leaves, treedef = jax.tree_util.tree_flatten(model_specs(stacked), is_leaf=_is_spec)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    params = treedef.unflatten(
        [jax.random.normal(key, shape) for key, (shape, _) in zip(keys, leaves, strict=True)]
    )
    tx = optax.adamw(1e-2)

    @jax.jit
    def train_step(params: Any) -> tuple[Any, Any, Any, Any]:
        grads = jax.tree_util.tree_map(lambda p: jnp.tanh(p) * 0.5 + 0.25, params)
        updates, state = tx.update(grads, tx.init(params), params)
        return grads, params, updates, state

    return train_step(params), treedef.unflatten([spec for _, spec in leaves])


def placed(args: Any, specs: Any, mesh: Mesh) -> Any:
    """``args`` on ``mesh``: each parameter-shaped tree (grads, params, updates, Adam's
    moments) sharded as its parameter is, everything else (Adam's step count) replicated."""
    grads, params, updates, state = args

    def shard(tree: Any) -> Any:
        return jax.tree_util.tree_map(
            lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec)), tree, specs
        )

    adam = state[0]
    state = (adam._replace(mu=shard(adam.mu), nu=shard(adam.nu)), *state[1:])
    state = jax.tree_util.tree_map(
        lambda x: (
            x
            if isinstance(x.sharding, NamedSharding)
            else jax.device_put(x, NamedSharding(mesh, P()))
        ),
        state,
    )
    return shard(grads), shard(params), shard(updates), state


def collectives(hlo: str) -> list[dict[str, Any]]:
    """Each cross-device collective of compiled HLO: its op and the element count of the
    largest array it returns (a combined all-reduce returns a tuple of them)."""
    found = []
    for result, op in _COLLECTIVE.findall(hlo):
        sizes = [math.prod(int(d) for d in dims.split(",") if d) for dims in _SHAPE.findall(result)]
        found.append({"op": op, "elements": max(sizes, default=0)})
    return found


def norms(grads: Any, params: Any, updates: Any, state: Any) -> Any:
    return stability_metrics(grads, params, updates, state, moments_per_leaf=True, packed=True)


def measure(args: Any, specs: Any, single: Any, mesh: Mesh) -> dict[str, Any]:
    """The norms of ``args`` sharded on ``mesh`` against ``single`` (the same norms on one
    device), and the collectives of the sharded computation."""
    sharded_args = placed(args, specs, mesh)
    compiled = jax.jit(norms).lower(*sharded_args).compile()
    sharded = dict(compiled(*sharded_args).items())
    params = jax.tree_util.tree_leaves(sharded_args[1])
    split = [leaf for leaf in params if not leaf.sharding.is_fully_replicated]
    return {
        "names": list(sharded),
        "single_names": list(single),
        "max_relative_difference": max(
            abs(sharded[name] - single[name]) / abs(single[name]) for name in single
        ),
        "leaves": len(params),
        "sharded_leaves": len(split),
        "smallest_sharded_leaf": min(leaf.size for leaf in split),
        "devices_per_leaf": sorted(
            {len(x.sharding.device_set) for x in jax.tree_util.tree_leaves(sharded_args)}
        ),
        "collectives": collectives(compiled.as_text()),
    }


def meshes() -> dict[str, Mesh]:
    """A 4 × 2 mesh with each axis type: explicit (`jax.make_mesh`'s default in recent JAX:
    shardings are part of the arrays' types) and auto (the compiler propagates them)."""
    types = jax.sharding.AxisType
    return {
        kind: jax.make_mesh((4, 2), ("data", "model"), axis_types=(axis_type, axis_type))
        for kind, axis_type in (("explicit", types.Explicit), ("auto", types.Auto))
    }


def main() -> None:
    if jax.device_count() != DEVICES:
        sys.exit(
            f"{jax.device_count()} devices: start this with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={DEVICES} JAX_PLATFORMS=cpu"
        )
    report: dict[str, Any] = {"devices": jax.device_count(), "jax": jax.__version__}
    for form, stacked in (("stacked", True), ("layers_N", False)):
        args, specs = one_device_step(stacked)
        single = dict(jax.jit(norms)(*args).items())
        for kind, mesh in meshes().items():
            report[f"{kind} {form}"] = measure(args, specs, single, mesh)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
