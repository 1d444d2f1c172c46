"""An independent float64 reference of `normwatch.client.jax.stability_metrics`, and the
random trees the JAX client's tests feed it.

The reference walks plain dicts, lists and tuples by hand (a Flax ``nnx.State`` goes in as
``state.to_pure_dict()``) and spells the naming rules out again:

- a leading ``params`` is dropped; ``layers_3`` reads ``layers.3``, and ``layers.layers_3``
  (a module named ``layers`` holding a list) reads ``layers.3`` too;
- under the first ``layers`` of a name, the leaves are one layer each where a child is a
  number, stacked where every leaf has the same first dimension (split into
  ``layers.<i>.<rest>``), and left whole otherwise;
- each ``layers.<i>`` is also summed as a whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

RTOL = 1e-6
LAYERS = "layers"

Leaves = list[tuple[tuple[str, ...], np.ndarray]]


def reference_leaves(tree: object, path: tuple[str, ...] = ()) -> Leaves:
    """Every leaf as (its name's segments, its values in float64), in the tree's order."""
    if isinstance(tree, Mapping | list | tuple):
        items = tree.items() if isinstance(tree, Mapping) else enumerate(tree)
        leaves: Leaves = []
        for key, child in items:
            name = str(key)
            parts: tuple[str, ...] = (name,)
            if not path and name == "params":
                parts = ()
            elif name.startswith(f"{LAYERS}_") and name[len(LAYERS) + 1 :].isdigit():
                number = name[len(LAYERS) + 1 :]
                parts = (number,) if path[-1:] == (LAYERS,) else (LAYERS, number)
            leaves.extend(reference_leaves(child, path + parts))
        return leaves
    return [(path, np.asarray(tree).astype(np.float64))]


def stacked_sites(leaves: Leaves) -> set[tuple[str, ...]]:
    """The ``…layers`` places whose leaves are stacked along their first axis."""
    sites: dict[tuple[str, ...], list[tuple[tuple[str, ...], np.ndarray]]] = {}
    for path, array in leaves:
        if LAYERS in path:
            sites.setdefault(path[: path.index(LAYERS) + 1], []).append((path, array))
    stacked = set()
    for site, members in sites.items():
        numbered = any(len(p) > len(site) and p[len(site)].isdigit() for p, _ in members)
        first_dims = {a.shape[0] if a.ndim else None for _, a in members}
        if not numbered and len(first_dims) == 1 and None not in first_dims:
            stacked.add(site)
    return stacked


def reference_sums(tree: object) -> tuple[dict[str, float], dict[str, float]]:
    """Sums of squares in float64: per leaf name, and per layer (``…layers.<i>``)."""
    leaves = reference_leaves(tree)
    stacked = stacked_sites(leaves)
    per_leaf: dict[str, float] = {}
    for path, array in leaves:
        site = path[: path.index(LAYERS) + 1] if LAYERS in path else None
        if site in stacked:
            for i in range(array.shape[0]):
                name = ".".join((*path[: len(site)], str(i), *path[len(site) :]))
                per_leaf[name] = per_leaf.get(name, 0.0) + float(np.sum(array[i] ** 2))
        else:
            name = ".".join(path)
            per_leaf[name] = per_leaf.get(name, 0.0) + float(np.sum(array**2))
    per_layer: dict[str, float] = {}
    for name, value in per_leaf.items():
        segments = name.split(".")
        if LAYERS in segments[:-1]:
            at = segments.index(LAYERS) + 1
            if segments[at].isdigit():
                layer = ".".join(segments[: at + 1])
                per_layer[layer] = per_layer.get(layer, 0.0) + value
    return per_leaf, per_layer


def reference_norms(
    tree: object, prefix: str, *, leaves: bool = True, layers: bool = True
) -> dict[str, float]:
    """What `stability_metrics` gives for ``tree`` under ``prefix`` (``grad/norm/``)."""
    per_leaf, per_layer = reference_sums(tree)
    norms = {f"{prefix}total": math.sqrt(sum(per_leaf.values()))}
    if leaves:
        norms |= {prefix + name: math.sqrt(value) for name, value in per_leaf.items()}
    if layers:
        norms |= {prefix + name: math.sqrt(value) for name, value in per_layer.items()}
    return norms


def assert_norms_match(metrics: Mapping[str, Any], expected: Mapping[str, float]) -> None:
    """The names of ``expected`` are in ``metrics``, each with its value to `RTOL`."""
    got = {name: float(value) for name, value in metrics.items() if name in expected}
    assert set(got) == set(expected), set(expected) ^ set(got)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=RTOL, err_msg=name)


def random_like(shapes: object, seed: int, dtype: Any = jnp.float32) -> Any:
    """``shapes`` (a tree of shape tuples, or of ``jax.ShapeDtypeStruct`` as
    ``jax.eval_shape`` gives them) with standard normal leaves. NumPy draws them: a JAX
    draw compiles once for every new shape, seconds for a model's tree."""

    def is_shape(node: object) -> bool:
        return isinstance(node, tuple) and all(isinstance(dim, int) for dim in node)

    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda shape: jnp.asarray(
            rng.standard_normal(getattr(shape, "shape", shape), np.float32), dtype
        ),
        shapes,
        is_leaf=is_shape,
    )


def to_numpy(tree: Any) -> Any:
    """``tree`` with float32 NumPy leaves."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x.astype(jnp.float32)), tree)


def find_adam(node: Any) -> Any:
    """The first ``optax.ScaleByAdamState`` in an optimizer state, found by walking it by
    hand; None where there is none."""
    if isinstance(node, optax.ScaleByAdamState):
        return node
    children = node.values() if isinstance(node, dict) else node
    if isinstance(node, tuple | list | dict):
        for child in children:
            if (found := find_adam(child)) is not None:
                return found
    return None
