"""Per-layer views: parts of a model in depth order, a layer × step grid, the U-index.

Per-layer norms are logged as ``<prefix>/<part>`` (``grad/norm/layers.12.mlp.w1``,
``params/norm/final_norm.weight``). Depth order puts the input end first and the output end
last, whatever the trainer's naming:

1. embeddings (``embed``, ``wte``, ``wpe``, ``tok_embeddings``, ``embed_tokens``);
2. numbered blocks (``layers.N``, ``h.N``, ``blocks.N``, ``model.layers.N`` …) by their
   number, numerically (``layers.2`` before ``layers.10``), then by the rest of the name;
3. anything else, by name;
4. final norms (``final_norm``, ``ln_f``, ``norm_f``, ``final_layernorm``, a bare ``norm``);
5. the output head (``lm_head``, ``unembed``, ``output``, ``head``).

The U-index of a depth profile ``v_0 … v_{L-1}`` is ``((v_0 + v_{L-1}) / 2) / median(v_1 …
v_{L-2})``: how much larger the two ends are than the middle (1 for a flat profile; the
domain's steepening U is this number growing over training).

>>> depth_order(["lm_head", "layers.10", "final_norm.weight", "layers.2", "embed"])
['embed', 'layers.2', 'layers.10', 'final_norm.weight', 'lm_head']
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = [
    "bucket_edges",
    "bucket_max",
    "depth_group",
    "depth_order",
    "u_index",
    "values_at",
]

FloatArray = npt.NDArray[np.float64]
StepArray = npt.NDArray[np.int64]
_INT64 = np.iinfo(np.int64)

_EMBEDDING = re.compile(r"(^|[._/])(embed\w*|wte|wpe|tok_embeddings|embed_tokens)([._/]|$)")
_BLOCK = re.compile(r"^(.*?)(?:^|[._/])(\d+)(?=[._/]|$)")
_FINAL_NORM = re.compile(r"(^|[._/])(final_norm|ln_f|norm_f|final_layernorm|norm)([._/]|$)")
_HEAD = re.compile(r"(^|[._/])(lm_head|unembed\w*|output|head)([._/]|$)")


def depth_key(part: str) -> tuple[int, str, int, str]:
    """Sort key of a part's name in depth order (see the module notes)."""
    if _EMBEDDING.search(part):
        return (0, "", 0, part)
    block = _BLOCK.match(part)
    if block is not None:
        return (1, block.group(1), int(block.group(2)), part)
    if _HEAD.search(part):
        return (4, "", 0, part)
    if _FINAL_NORM.search(part):
        return (3, "", 0, part)
    return (2, "", 0, part)


_GROUPS = {0: "embedding", 1: "blocks", 3: "final norm", 4: "head"}


def depth_group(part: str) -> str:
    """The parameter group a part belongs to, for attribution: ``embedding``, ``blocks``
    (every numbered block), ``final norm``, ``head``, or the part's own name otherwise.

    >>> [depth_group(p) for p in ["wte", "h.3.mlp.c_fc", "ln_f", "lm_head", "router"]]
    ['embedding', 'blocks', 'final norm', 'head', 'router']
    """
    return _GROUPS.get(depth_key(part)[0], part)


def depth_order(parts: Iterable[str]) -> list[str]:
    """``parts`` from the input end of the model to its output end."""
    return sorted(parts, key=depth_key)


def bucket_edges(lo: int, hi: int, buckets: int) -> StepArray:
    """``buckets + 1`` integer edges splitting steps ``[lo, hi]`` into near-equal buckets:
    bucket ``i`` holds steps ``edges[i] <= s < edges[i + 1]``, with ``edges[i] = lo +
    ⌊i · (hi - lo + 1) / buckets⌋`` (fewer where buckets would be empty).

    Exact over any int64 range (``i · span`` is taken in Python integers: in int64 it
    overflows past a span of ``2**63 / buckets``). The last edge, ``hi + 1``, is at most
    ``2**63 - 1``, so a step logged at ``2**63 - 1`` itself falls past it.

    >>> bucket_edges(-(2**63), 2**63 - 1, 4).tolist()
    [-9223372036854775808, -4611686018427387904, 0, 4611686018427387904, 9223372036854775807]
    """
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    span = hi - lo + 1
    last = int(_INT64.max)
    edges = [min(lo + i * span // buckets, last) for i in range(buckets + 1)]
    return np.unique(np.array(edges, dtype=np.int64))


def bucket_max(steps: StepArray, values: FloatArray, edges: StepArray) -> FloatArray:
    """The largest finite value in each bucket of ``edges`` (NaN where none), so that a
    one-step spike keeps its colour in a cell however many steps the cell spans."""
    out = np.full(len(edges) - 1, np.nan)
    inside = (steps >= edges[0]) & (steps < edges[-1]) & np.isfinite(values)
    which = np.searchsorted(edges, steps[inside], side="right") - 1
    if not len(which):
        return out
    kept = values[inside]
    if bool((which[1:] >= which[:-1]).all()):
        # Ascending steps (the usual case): each bucket's values are one run.
        starts = np.flatnonzero(np.r_[True, which[1:] != which[:-1]])
        out[which[starts]] = np.maximum.reduceat(kept, starts)
        return out
    out[:] = -np.inf
    np.maximum.at(out, which, kept)
    out[out == -np.inf] = np.nan
    return out


def values_at(steps: StepArray, values: FloatArray, grid: StepArray) -> FloatArray:
    """The value logged at each step of ``grid`` (NaN where the step was not logged)."""
    at = np.searchsorted(steps, grid)
    found = at < len(steps)
    found[found] = steps[at[found]] == grid[found]
    out = np.full(len(grid), np.nan)
    out[found] = values[at[found]]
    return out


def u_index(grid: FloatArray) -> FloatArray:
    """The U-index of each column of a ``(layers, steps)`` grid in depth order; NaN where
    the grid has fewer than 3 layers, an end is missing, or the middle is all NaN or 0."""
    layers, steps = grid.shape
    if layers < 3:
        return np.full(steps, np.nan)
    ends = (grid[0] + grid[-1]) / 2.0
    middle = grid[1:-1]
    result = np.full(steps, np.nan)
    known = ~np.isnan(middle).all(axis=0)
    if known.any():
        median = np.nanmedian(middle[:, known], axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            result[known] = np.where(median > 0, ends[known] / median, np.nan)
    return result
