"""Per-layer views: which metric names are layers, in depth order. Pure functions."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

FAMILIES = ("grad/norm", "updates/norm", "params/norm")
_LAYER = re.compile(r"^(?P<family>.+)/layers\.(?P<index>\d+)$")
# Modules around the stack (a name's first segment), in the order data flows through a decoder.
_BOTTOM = ("embed", "embedding", "embeddings", "wte", "wpe", "tok_embeddings")
_TOP = ("final_norm", "norm_f", "ln_f", "lm_head", "unembed")


@dataclass(frozen=True)
class DepthProfile:
    """One family's latest value per depth position, bottom (embedding) to top (lm_head)."""

    family: str
    labels: list[str]
    values: list[float]

    @property
    def end_to_middle(self) -> float | None:
        """Mean of the two ends over the median of the middle half: how steep the U is."""
        finite = [v for v in self.values if math.isfinite(v)]
        if len(finite) < 4:
            return None
        quarter = len(finite) // 4
        middle = statistics.median(finite[quarter : len(finite) - quarter])
        if middle <= 0:
            return None
        return (finite[0] + finite[-1]) / 2 / middle


def depth_profile(latest: Iterable[tuple[str, float | None]], family: str) -> DepthProfile:
    """Order ``family``'s per-layer metrics by depth from ``(name, last value)`` pairs.

    ``<family>/layers.{i}`` give the stack; ``<family>/embed`` (and similar) go below it,
    ``<family>/lm_head`` (and similar) above it.

    >>> depth_profile([("grad/norm/layers.1", 2.0), ("grad/norm/lm_head", 9.0),
    ...                ("grad/norm/layers.0", 3.0)], "grad/norm").labels
    ['layers.0', 'layers.1', 'lm_head']
    """
    layers: dict[int, float] = {}
    bottom: dict[str, float] = {}
    top: dict[str, float] = {}
    for name, value in latest:
        v = math.nan if value is None else float(value)
        found = _LAYER.match(name)
        if found and found.group("family") == family:
            layers[int(found.group("index"))] = v
            continue
        if not name.startswith(family + "/"):
            continue
        rest = name[len(family) + 1 :]
        head = rest.split(".", 1)[0]
        if head in _BOTTOM:
            bottom[rest] = v
        elif head in _TOP:
            top[rest] = v
    below = sorted(bottom, key=lambda r: (_BOTTOM.index(r.split(".", 1)[0]), r))
    above = sorted(top, key=lambda r: (_TOP.index(r.split(".", 1)[0]), r))
    stack = sorted(layers)
    labels = [*below, *(f"layers.{i}" for i in stack), *above]
    values = [*(bottom[k] for k in below), *(layers[i] for i in stack), *(top[k] for k in above)]
    return DepthProfile(family, labels, values)


def families_with_layers(names: Iterable[str]) -> list[str]:
    """The families that have per-layer metrics, in the usual order."""
    present = {m.group("family") for n in names if (m := _LAYER.match(n))}
    return [f for f in FAMILIES if f in present] + sorted(present - set(FAMILIES))
