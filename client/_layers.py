"""How `normwatch.client.jax.stability_metrics` names leaves, and which leaves it splits
into one norm per layer.

A name is the leaf's key path joined with ``.``, without a leading ``params`` collection or
a trailing ``value`` attribute (Flax), a numbered key of a layer key written as a layer
number: ``layers_3`` is ``layers.3``, and so is ``layers.layers_3`` (a module named
``layers`` holding a list, as Flax linen names it).

A layer key of ``layer_axes`` (``{"layers": 0}`` unless the caller gives one) marks where
the layers are. Under each place the key occurs (``layers``, ``encoder.layers``...) the
float leaves are either:

- already one layer each: the key's children are numbered (``layers.0``, ``layers_0``);
  nothing is split;
- stacked: every leaf has the same size along the key's axes (``flax.linen.scan``,
  ``nnx.vmap``); each leaf is split into ``layers.<i>.<rest>``;
- neither: with the default, the leaves are not stacked and keep their names; with
  ``layer_axes`` given, that is a mistake in it, and a `ValueError` says so.

A guessed stack (the default ``layer_axes``) of more than `MAX_GUESSED_LAYERS` layers is
refused with a `ValueError` that names ``layer_axes``: a first dimension that large is a
width, and splitting it would make thousands of names. A ``layer_axes`` that the caller
gives is trusted at any depth.

Only shapes and key paths are read here, so everything is decided while tracing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import jax

__all__ = [
    "DEFAULT_LAYER_AXES",
    "MAX_GUESSED_LAYERS",
    "LayerAxes",
    "Split",
    "layer_prefix",
    "layer_splits",
    "leaf_segments",
    "normalized_layer_axes",
]

LayerAxes = Mapping[str, int | Sequence[int] | None]
NormalizedAxes = Mapping[str, tuple[int, ...] | None]

DEFAULT_LAYER_AXES: Mapping[str, int] = {"layers": 0}
"""Leaves under a ``layers`` key hold all layers stacked on their leading axis, as
``flax.linen.scan(..., variable_axes={"params": 0})(name="layers")`` creates them, where
they all share that leading dimension."""

MAX_GUESSED_LAYERS = 512
"""The most layers a stack found under the default ``layer_axes`` may have. The deepest
production language models stack 126 layers (Llama 3.1 405B; GPT-3 96, PaLM 540B 118);
four times that is still a depth. Past it the shared first dimension is far more likely a
width (a single ``Dense(d)`` named ``layers``: kernel and bias both start with ``d``), and
at 512 layers a split already gives at least 1,024 names a family, 3,072 a call with
gradients, parameters and updates. Deeper stacks are logged by naming them in
``layer_axes``."""

_PARAMS_COLLECTION = "params"
_BOXED_VALUE = "value"
"""``flax.nnx`` variables and ``flax.linen`` boxed parameters end their key paths here."""

_SHOWN_LEAVES = 4
"""Leaves quoted in an error message, the rest counted."""


class Split(NamedTuple):
    """Where a stacked leaf's layer number goes in its name, and the leaf's axes that index
    layers (non-negative, in the order given: flattened row-major into one layer number)."""

    position: int
    axes: tuple[int, ...]


def normalized_layer_axes(layer_axes: LayerAxes) -> dict[str, tuple[int, ...] | None]:
    """Each key's axes as a tuple; ``None`` (a layer key whose leaves are never split)
    kept as it is."""
    normalized: dict[str, tuple[int, ...] | None] = {}
    for key, axes in layer_axes.items():
        if axes is None:
            normalized[key] = None
            continue
        axes_tuple = (axes,) if isinstance(axes, int) else tuple(axes)
        if not axes_tuple or not all(
            isinstance(axis, int) and not isinstance(axis, bool) for axis in axes_tuple
        ):
            raise ValueError(
                f"layer_axes[{key!r}] must be an axis, a tuple of axes, or None (not "
                f"stacked), e.g. {{{key!r}: 0}}; got {axes!r}"
            )
        normalized[key] = axes_tuple
    return normalized


def leaf_segments(path: Sequence[Any], layer_keys: Iterable[str]) -> list[str]:
    """The name of the leaf at ``path`` (a `jax.tree_util` key path) as its segments.

    >>> from jax.tree_util import DictKey as K
    >>> leaf_segments((K("params"), K("layers"), K("layers_3"), K("w")), ["layers"])
    ['layers', '3', 'w']
    """
    segments: list[str] = []
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            segments.append(str(key.key))
        elif isinstance(key, jax.tree_util.SequenceKey):
            segments.append(str(key.idx))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            segments.append(key.name)
        elif isinstance(key, jax.tree_util.FlattenedIndexKey):
            segments.append(str(key.key))
        else:
            segments.append(str(key).strip(".[]'\""))
    if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and segments[-1] == _BOXED_VALUE:
        segments.pop()
    if len(segments) > 1 and segments[0] == _PARAMS_COLLECTION:
        segments.pop(0)
    keys = "|".join(re.escape(key) for key in layer_keys)
    if not keys:
        return segments
    numbered = re.compile(rf"({keys})_(\d+)")
    expanded: list[str] = []
    for segment in segments:
        match = numbered.fullmatch(segment)
        if match is None:
            expanded.append(segment)
        elif expanded and expanded[-1] == match.group(1):
            expanded.append(match.group(2))  # layers.layers_3: the layer number of `layers`
        else:
            expanded.extend(match.groups())
    return expanded


def layer_splits(
    leaves: Sequence[tuple[list[str], tuple[int, ...]]],
    layer_axes: NormalizedAxes,
    *,
    guessed: bool,
) -> list[Split | None]:
    """For each leaf (its name's segments, its shape), how it is split into layers, or
    None; the rule is in the module notes. ``guessed``: ``layer_axes`` is the default, not
    the caller's.

    >>> leaves = [(["layers", "w"], (4, 8, 8)), (["layers", "b"], (4, 8)), (["out"], (8,))]
    >>> layer_splits(leaves, {"layers": (0,)}, guessed=True)
    [Split(position=1, axes=(0,)), Split(position=1, axes=(0,)), None]
    >>> layer_splits([(["layers", "w"], (8, 8)), (["layers", "b"], (16,))], {"layers": (0,)},
    ...              guessed=True)
    [None, None]
    """
    sites: dict[tuple[str, ...], list[int]] = {}
    for index, (segments, _) in enumerate(leaves):
        position = _layer_key_position(segments, layer_axes)
        if position is not None:
            sites.setdefault(tuple(segments[: position + 1]), []).append(index)
    splits: list[Split | None] = [None] * len(leaves)
    for site, members in sites.items():
        given = layer_axes[site[-1]]
        if given is None:
            continue
        position = len(site)
        if any(_is_layer_number(leaves[i][0], position) for i in members):
            continue  # one subtree per layer already (layers.0, layers_0)
        axes = _stacked_axes(site, [leaves[i] for i in members], given, guessed=guessed)
        if axes is not None:
            for i, leaf_axes in zip(members, axes, strict=True):
                splits[i] = Split(position, leaf_axes)
    return splits


def layer_prefix(segments: list[str], layer_keys: frozenset[str]) -> str | None:
    """``decoder.layers.3`` for ``decoder.layers.3.mlp.w1``: the layer the leaf belongs to."""
    for position in range(len(segments) - 1):
        if segments[position] in layer_keys and segments[position + 1].isdigit():
            return ".".join(segments[: position + 2])
    return None


def _layer_key_position(segments: list[str], layer_axes: NormalizedAxes) -> int | None:
    """The position of the first layer key in a leaf's name (its last segment when the
    leaf is the whole stack, ``{"layers": array}``)."""
    for position, segment in enumerate(segments):
        if segment in layer_axes:
            return position
    return None


def _is_layer_number(segments: list[str], position: int) -> bool:
    return position < len(segments) and segments[position].isdigit()


def _stacked_axes(
    site: tuple[str, ...],
    members: list[tuple[list[str], tuple[int, ...]]],
    given: tuple[int, ...],
    *,
    guessed: bool,
) -> list[tuple[int, ...]] | None:
    """Each leaf's layer axes when the leaves under ``site`` are stacked along ``given``;
    None when they are not and ``guessed``; a `ValueError` when ``layer_axes`` said they
    are and they are not, or when a guessed stack is deeper than `MAX_GUESSED_LAYERS`."""
    key = site[-1]
    resolved = [_resolved_axes(given, len(shape)) for _, shape in members]
    unresolved = [leaf for leaf, axes in zip(members, resolved, strict=True) if axes is None]
    if unresolved:
        if guessed:
            return None
        segments, shape = unresolved[0]
        raise ValueError(
            f"leaf {'.'.join(segments)} of shape {shape} cannot be split into layers along "
            f"axes {given}; fix layer_axes[{key!r}] (None: not stacked)"
        )
    layer_axes = [axes for axes in resolved if axes is not None]
    counts = {
        tuple(shape[axis] for axis in axes)
        for (_, shape), axes in zip(members, layer_axes, strict=True)
    }
    if len(counts) > 1:
        if guessed:
            return None
        raise ValueError(
            f"layer_axes[{key!r}] = {_shown_axes(given)} says the leaves under "
            f"{'.'.join(site)!r} are stacked, but their sizes along {_axes_word(given)} "
            f"{_shown_axes(given)} differ ({_shown_leaves(members)}); stacked leaves share "
            f"them. Pass layer_axes={{{key!r}: None}} if they are not stacked, or the axes "
            f"that do index layers"
        )
    (count,) = counts
    n_layers = math.prod(count)
    if guessed and n_layers > MAX_GUESSED_LAYERS:
        raise ValueError(
            f"the leaves under {'.'.join(site)!r} all have size {n_layers} along "
            f"{_axes_word(given)} {_shown_axes(given)} ({_shown_leaves(members)}), so the "
            f"default layer_axes would split them into {n_layers:,} layers; a guess of more "
            f"than {MAX_GUESSED_LAYERS} is refused. Pass layer_axes={{{key!r}: None}} if "
            f"they are not stacked (each keeps its own name), or "
            f"layer_axes={{{key!r}: {_shown_axes(given)}}} if they do stack {n_layers:,} layers"
        )
    return layer_axes


def _resolved_axes(axes: tuple[int, ...], ndim: int) -> tuple[int, ...] | None:
    """``axes`` as non-negative axes of an ``ndim``-dimensional leaf; None when one is out of
    range or repeated."""
    if not all(-ndim <= axis < ndim for axis in axes):
        return None
    resolved = tuple(axis % ndim for axis in axes)
    return resolved if len(set(resolved)) == len(resolved) else None


def _shown_axes(axes: tuple[int, ...]) -> str:
    return str(axes[0]) if len(axes) == 1 else str(axes)


def _axes_word(axes: tuple[int, ...]) -> str:
    return "axis" if len(axes) == 1 else "axes"


def _shown_leaves(members: list[tuple[list[str], tuple[int, ...]]]) -> str:
    quoted = members[:_SHOWN_LEAVES]
    shown = ", ".join(f"{'.'.join(segments)} {shape}" for segments, shape in quoted)
    hidden = len(members) - _SHOWN_LEAVES
    return shown + (f" and {hidden} more" if hidden > 0 else "")
