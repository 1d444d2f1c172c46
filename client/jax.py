"""Stability metrics computed inside ``jax.jit``, and the host-side helpers to log them.

`stability_metrics` turns gradients, parameters, optimizer updates and Adam state into a
flat dict of float32 scalars (L2 norms, accumulated in float32 whatever the leaf dtype)::

    grad/norm/total                 sqrt(sum over every leaf of sum(g**2))
    grad/norm/<path>                one per leaf, e.g. grad/norm/layers.12.mlp.w1
    grad/norm/layers.<i>            one per layer: every leaf of layer i together
    params/norm/total, params/norm/<path>, params/norm/layers.<i>
    updates/norm/total, ...         when ``updates`` is given
    optim/mu/norm/total, optim/nu/norm/total
                                    Adam's first and second moments, when ``opt_state``
                                    holds an ``optax.ScaleByAdamState``

The dict leaves the jitted step as its output and goes straight to `Run.log
<normwatch.client.Run.log>`, which copies the device scalars to the host on a background
thread, so the training thread never waits for the device (keep ``step`` a Python int:
a device scalar there would be read on the training thread)::

    @jax.jit
    def train_step(state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        metrics = stability_metrics(grads, state.params, updates, opt_state,
                                    every=10, step=state.step)
        ...
        return new_state, {"train/loss": loss, **metrics}

    state, metrics = train_step(state, batch)
    run.log(computed_at(metrics, step=step, every=10), step=step)

Every metric is one output of the jitted step; for deep models with many leaves a layer,
``per_leaf=False`` keeps the totals and per-layer norms only. Only ``jax.process_index() ==
0`` should create the `Run` on a multi-host job (`is_logging_process`); every process still
runs the same jitted step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple, TypeVar, cast, overload

import jax
import jax.numpy as jnp
import numpy as np
import optax  # type: ignore[import-untyped]  # optax ships no py.typed

from ._layers import (
    DEFAULT_LAYER_AXES,
    MAX_GUESSED_LAYERS,
    LayerAxes,
    NormalizedAxes,
    layer_prefix,
    layer_splits,
    leaf_segments,
    normalized_layer_axes,
)
from ._packed import PackedMetrics, from_pytree_parts, pytree_parts

jax.tree_util.register_pytree_node(PackedMetrics, pytree_parts, from_pytree_parts)

__all__ = [
    "DEFAULT_LAYER_AXES",
    "MAX_GUESSED_LAYERS",
    "LayerAxes",
    "PER_LEAF_FAMILIES",
    "computed_at",
    "is_logging_process",
    "stability_metrics",
]

PyTree = Any
V = TypeVar("V")

PER_LEAF_FAMILIES = (
    "grad/norm/",
    "params/norm/",
    "updates/norm/",
    "optim/mu/norm/",
    "optim/nu/norm/",
)
"""Name prefixes of `stability_metrics`; all but their ``.../total`` are per leaf or layer."""


def is_logging_process() -> bool:
    """True on the one process of a multi-host job that should create the `Run`.

    Every process runs the jitted step (the metrics are computed collectively) but only
    process 0 logs: ``run = Run(...) if is_logging_process() else None``.
    """
    return jax.process_index() == 0


def computed_at(metrics: Mapping[str, V], *, step: int, every: int) -> Mapping[str, V]:
    """The part of ``metrics`` that `stability_metrics(..., every=every)` computed at ``step``.

    On steps that are multiples of ``every`` that is everything (``metrics`` itself comes
    back); on the others the per-leaf and per-layer norms are placeholders, so their names
    (those in `PER_LEAF_FAMILIES` that do not end in ``/total``) are left out. Other metrics
    in the dict, such as ``train/loss``, are kept. ``step`` is the host's Python int, the
    same number passed to the jitted step.

    >>> nan = float("nan")
    >>> computed_at({"grad/norm/total": 1.0, "grad/norm/w": nan, "train/loss": 2.0},
    ...             step=3, every=2)
    {'grad/norm/total': 1.0, 'train/loss': 2.0}
    """
    _check_every(every)
    if step % every == 0:
        return metrics
    if isinstance(metrics, PackedMetrics):
        return metrics.totals_only()
    return {name: value for name, value in metrics.items() if not _is_per_leaf(name)}


@overload
def stability_metrics(
    grads: PyTree,
    params: PyTree,
    updates: PyTree | None = None,
    opt_state: PyTree | None = None,
    *,
    every: int = 1,
    step: jax.typing.ArrayLike | None = None,
    layer_axes: LayerAxes | None = None,
    per_leaf: bool = True,
    moments_per_leaf: bool = False,
    packed: Literal[False] = False,
) -> dict[str, jax.Array]: ...


@overload
def stability_metrics(
    grads: PyTree,
    params: PyTree,
    updates: PyTree | None = None,
    opt_state: PyTree | None = None,
    *,
    every: int = 1,
    step: jax.typing.ArrayLike | None = None,
    layer_axes: LayerAxes | None = None,
    per_leaf: bool = True,
    moments_per_leaf: bool = False,
    packed: Literal[True],
) -> PackedMetrics: ...


def stability_metrics(
    grads: PyTree,
    params: PyTree,
    updates: PyTree | None = None,
    opt_state: PyTree | None = None,
    *,
    every: int = 1,
    step: jax.typing.ArrayLike | None = None,
    layer_axes: LayerAxes | None = None,
    per_leaf: bool = True,
    moments_per_leaf: bool = False,
    packed: bool = False,
) -> dict[str, jax.Array] | PackedMetrics:
    """L2 norms of gradients, parameters, updates and Adam moments; call inside ``jit``.

    Every norm is ``sqrt(sum(|x|**2))`` over the leaves it covers, each leaf upcast to
    float32 before squaring (bfloat16 and float16 leaves included); ``grad/norm/total``
    is what ``optax.tree.norm(grads)`` computes for float32 leaves. Leaves of other dtypes
    (integer counters, ``float0`` gradients) are left out.

    Names: the leaf's key path joined with ``.``, without a leading ``params`` collection or
    a trailing ``value`` attribute (Flax), a numbered layer key written as a layer number
    (``layers_3`` and ``layers.layers_3`` are both ``layers.3``). A key of ``layer_axes``
    marks layers; each layer ``layers.<i>`` gets the norm of all its leaves together. Under
    the key, the leaves are one layer each where its children are numbered (a list, or
    Flax's ``layers_0``, ``layers_1``...), and are stacked where they all have the same size
    along the key's axis (``flax.linen.scan``, ``nnx.vmap``): each is split into one norm per
    layer, ``layers.<i>.<rest>``, reduced over its other axes. A tuple of axes is flattened
    in row-major order (``flax.linen.remat_scan`` with ``lengths=(2, 3)``: pass ``{"<its
    name>": (0, 1)}``); ``None`` marks a layer key whose leaves are never split.

    With the default (`DEFAULT_LAYER_AXES`, ``{"layers": 0}``) the split is a guess: leaves
    that do not share their first dimension are not stacked and keep their names, and a
    stack deeper than `MAX_GUESSED_LAYERS` (512) is refused with a `ValueError`: pass
    ``layer_axes`` to say which it is. A ``layer_axes`` given is trusted at any depth, and
    leaves under its keys that cannot be split as it says are a `ValueError`.
    ``per_leaf=False`` keeps only the totals and the per-layer norms: every name is one
    output of the jitted step, and thousands of outputs cost compile time and host time per
    step (see docs/benchmarks.md; ``packed=True`` keeps them one output).

    ``opt_state`` is searched for ``optax.ScaleByAdamState`` anywhere (inside
    ``optax.chain``, ``inject_hyperparams``, ``MultiSteps``...); their ``mu`` and ``nu``
    give ``optim/mu/norm/total`` and ``optim/nu/norm/total``, and with
    ``moments_per_leaf=True`` the same breakdown as the other families. ``updates`` are
    what the optimizer returns, before ``optax.apply_updates``.

    With ``every=k`` (``step`` is then required, a traced int), the per-leaf and per-layer
    norms are taken under ``jax.lax.cond`` only when ``step % k == 0`` and are NaN
    placeholders otherwise: pass the dict through `computed_at` before logging it, which
    leaves them out. The totals come every step. The device work saved is small (the
    per-leaf sums of squares are those the totals add up); ``every`` thins what is sent
    and stored.

    ``packed=True`` returns the same norms as one `PackedMetrics`: one float32 vector and
    the names beside it, so the step has one output however many leaves the model has
    (compile time and host time per step stay flat; docs/benchmarks.md), and `Run.log
    <normwatch.client.Run.log>` takes it as it is. Log other values (the loss) in a call of
    their own for the same step: the two are merged.

    >>> grads = {"embed": jnp.array([3.0, 4.0]), "layers": {"w": jnp.ones((2, 4))}}
    >>> metrics = stability_metrics(grads, grads)
    >>> round(float(metrics["grad/norm/total"]), 4)  # sqrt(3**2 + 4**2 + 8 * 1**2)
    5.7446
    >>> [name for name in metrics if name.startswith("grad/")]  # doctest: +NORMALIZE_WHITESPACE
    ['grad/norm/total', 'grad/norm/embed', 'grad/norm/layers.0.w', 'grad/norm/layers.0',
     'grad/norm/layers.1.w', 'grad/norm/layers.1']
    """
    _check_every(every)
    if every > 1 and step is None:
        raise ValueError(f"every={every} needs the step number: pass step=<the traced step>")
    guessed = layer_axes is None
    axes = normalized_layer_axes(DEFAULT_LAYER_AXES if layer_axes is None else layer_axes)

    plan = _Plan(layer_keys=axes.keys())
    sums: list[jax.Array] = []

    def add(prefix: str, trees: list[PyTree], *, leaves: bool, layers: bool) -> None:
        parts = [part for tree in trees for part in _parts(tree, axes, guessed=guessed)]
        plan.add_family(prefix, parts, leaves=leaves, layers=layers)
        sums.extend(part.sums for part in parts)

    add("grad/norm/", [grads], leaves=per_leaf, layers=True)
    add("params/norm/", [params], leaves=per_leaf, layers=True)
    if updates is not None:
        add("updates/norm/", [updates], leaves=per_leaf, layers=True)
    adam_states = _adam_states(opt_state)
    if adam_states:
        detail = {"leaves": per_leaf and moments_per_leaf, "layers": moments_per_leaf}
        add("optim/mu/norm/", [state.mu for state in adam_states], **detail)
        add("optim/nu/norm/", [state.nu for state in adam_states], **detail)

    names, sums_by_name = plan.reduce(sums)
    totals = jnp.sqrt(sums_by_name[: plan.n_totals])
    detail_sums = sums_by_name[plan.n_totals :]
    if every == 1:
        detail_norms = jnp.sqrt(detail_sums)
    else:
        detail_norms = jax.lax.cond(
            jnp.asarray(step) % every == 0,
            jnp.sqrt,
            lambda s: jnp.full_like(s, jnp.nan),
            detail_sums,
        )
    norms = jnp.concatenate([totals, detail_norms])
    if packed:
        return PackedMetrics(names, norms, totals=plan.n_totals)
    return {name: norms[index] for index, name in enumerate(names)}


class _Part(NamedTuple):
    """Sums of squares of one leaf: one per name (one per layer for a stacked leaf)."""

    names: list[list[str]]
    """Each name as its path segments."""
    sums: jax.Array
    """float32, shape ``(len(names),)``."""


class _Plan:
    """Which sums of squares add up to which output norm: totals first, then the detail
    (per leaf, per layer)."""

    def __init__(self, *, layer_keys: Iterable[str]) -> None:
        self._layer_keys = frozenset(layer_keys)
        self._inputs = 0
        self._totals: list[tuple[str, range]] = []
        self._detail: list[tuple[str, int]] = []  # (output name, input index)

    def add_family(self, prefix: str, parts: list[_Part], *, leaves: bool, layers: bool) -> None:
        """Plan ``<prefix>total`` over ``parts``, and one norm per leaf name (a name seen
        twice, e.g. in two Adam states, adds up) and per layer, as asked."""
        first = self._inputs
        for part in parts:
            for segments in part.names:
                name = ".".join(segments)
                if name == "total" and leaves:
                    raise ValueError(
                        f"a leaf named 'total' would clash with {prefix}total; rename it"
                    )
                layer = layer_prefix(segments, self._layer_keys) if layers else None
                if leaves:
                    self._detail.append((prefix + name, self._inputs))
                if layer is not None and (layer != name or not leaves):
                    self._detail.append((prefix + layer, self._inputs))
                self._inputs += 1
        self._totals.append((f"{prefix}total", range(first, self._inputs)))

    @property
    def n_totals(self) -> int:
        return len(self._totals)

    def reduce(self, sums: list[jax.Array]) -> tuple[list[str], jax.Array]:
        """Output names, and per name the sum of its inputs' sums of squares (float32)."""
        names = [name for name, _ in self._totals]
        sources = [source for _, inputs in self._totals for source in inputs]
        targets = [target for target, (_, inputs) in enumerate(self._totals) for _ in inputs]
        index: dict[str, int] = {}
        for name, source in self._detail:
            target = index.get(name)
            if target is None:
                target = index[name] = len(names)
                names.append(name)
            sources.append(source)
            targets.append(target)
        inputs = jnp.concatenate(sums) if sums else jnp.zeros((0,), jnp.float32)
        # One scatter-add for all outputs keeps the graph small however many leaves there are.
        reduced = jax.ops.segment_sum(
            inputs[np.asarray(sources, dtype=np.int32)],
            np.asarray(targets, dtype=np.int32),
            num_segments=len(names),
        )
        return names, reduced


def _parts(tree: PyTree, layer_axes: NormalizedAxes, *, guessed: bool) -> list[_Part]:
    leaves: list[tuple[list[str], jax.Array]] = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        try:
            dtype = jnp.result_type(leaf)
        except TypeError:  # not an array or a number (a string in a config tree)
            continue
        if jnp.issubdtype(dtype, jnp.inexact):
            leaves.append((leaf_segments(path, layer_axes.keys()), jnp.asarray(leaf)))
    splits = layer_splits(
        [(segments, value.shape) for segments, value in leaves], layer_axes, guessed=guessed
    )
    parts = []
    for (segments, value), split in zip(leaves, splits, strict=True):
        squares = (
            jnp.abs(value).astype(jnp.float32) ** 2
            if jnp.issubdtype(value.dtype, jnp.complexfloating)
            else value.astype(jnp.float32) ** 2
        )
        if split is None:
            parts.append(_Part([segments], jnp.sum(squares).reshape(1)))
            continue
        position, axes = split
        rest = tuple(axis for axis in range(value.ndim) if axis not in axes)
        per_layer = jnp.sum(squares, axis=rest)
        # The kept axes come out in ascending order; put them in the order given, then
        # flatten row-major so that layer i is entry i.
        kept = sorted(axes)
        per_layer = jnp.transpose(per_layer, [kept.index(axis) for axis in axes])
        per_layer = _unsharded(per_layer).reshape(-1)
        names = [
            [*segments[:position], str(i), *segments[position:]] for i in range(per_layer.shape[0])
        ]
        parts.append(_Part(names, per_layer))
    return parts


def _unsharded(sums: jax.Array) -> jax.Array:
    """``sums`` with none of its axes sharded in its type.

    Under explicit sharding (the axis type `jax.make_mesh` gives by default in recent JAX)
    a leaf sharded along its layer axis keeps that sharding in its per-layer sums, and
    ``concatenate`` takes only operands of one sharding: the few per-layer sums are
    gathered instead (one float a layer). Auto-sharded and unsharded values pass as they
    are.
    """
    typeof = getattr(jax, "typeof", None)  # older JAX: no typeof, no sharding in types
    sharding = getattr(typeof(sums), "sharding", None) if typeof is not None else None
    spec = getattr(sharding, "spec", None)
    if sharding is None or spec is None or all(axis is None for axis in spec):
        return sums
    replicated = sharding.update(spec=jax.sharding.PartitionSpec())  # type: ignore[no-untyped-call]
    return cast(jax.Array, jax.sharding.reshard(sums, replicated))  # type: ignore[no-untyped-call]


def _adam_states(opt_state: PyTree | None) -> list[Any]:
    """Every ``optax.ScaleByAdamState`` in ``opt_state``, in tree order."""
    if opt_state is None:
        return []

    def is_adam(node: object) -> bool:
        return isinstance(node, optax.ScaleByAdamState)

    nodes = jax.tree_util.tree_leaves(opt_state, is_leaf=is_adam)
    return [node for node in nodes if is_adam(node)]


def _is_per_leaf(name: str) -> bool:
    return name.startswith(PER_LEAF_FAMILIES) and not name.endswith("/total")


def _check_every(every: int) -> None:
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be an int >= 1 (1: every step), got {every!r}")
