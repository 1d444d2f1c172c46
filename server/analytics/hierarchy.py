"""The hierarchy rule: a norm and the norms of its own parts are never both counted.

The JAX client logs ``grad/norm/layers.3`` beside the norms of that layer's leaves,
``grad/norm/layers.3.attn.query.kernel`` and the rest; the layer's norm is already the root
of their summed squares. It also logs ``grad/norm/total``, the root of every part's summed
squares, beside those parts. Wherever a set of names is summed or ranked (a glob in
``rss()``, ``share()`` and ``ratio()``, attribution's parts, the rows of a layer grid), two
things are left out, so that each part of the model counts once:

1. a name under another name of the same set (after a ``.`` or a ``/``): only the outermost
   norms count (`under`);
2. a total, ``<prefix>total`` with ``<prefix>`` ending in ``/`` or ``.``, when the set also
   holds another name under ``<prefix>``: the total is the aggregate of its siblings, and the
   parts count in its place (`total_prefix`). ``rss(grad/norm/*)`` over ``grad/norm/total``
   and ``grad/norm/layers.0`` … is then the root-sum-square of the parts, which is
   ``grad/norm/total`` itself when the total is exact.

A total stays where nothing else of the set sits beside it: ``rss(grad/norm/tot*)``,
``rss(**/total)`` over ``grad/norm/total`` and ``params/norm/total``, or a family whose
parts are not logged. Nested totals follow the same rule: ``g/layers.3/total`` gives way to
``g/layers.3/attn`` and ``g/layers.3/mlp`` when those are in the set, and stands for the
layer when they are not; a name under a total (``g/total.x``) is under it, by rule 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

__all__ = ["TOTAL", "outermost", "total_prefix", "under"]

TOTAL = "total"
"""The last segment of a name that is the aggregate of its siblings."""
_SEPARATORS = (".", "/")


def under(name: str, parent: str) -> bool:
    """Whether ``name`` is a part of ``parent``: it continues it after a ``.`` or ``/``.

    >>> under("layers.3.attn.q", "layers.3"), under("layers.31", "layers.3")
    (True, False)
    """
    return (
        len(name) > len(parent) + 1 and name.startswith(parent) and name[len(parent)] in _SEPARATORS
    )


def total_prefix(name: str) -> str | None:
    """The prefix whose names ``name`` is the total of (``grad/norm/`` for
    ``grad/norm/total``), or None where ``name`` is no total: its last segment is not
    ``total`` after a ``/`` or a ``.``.

    >>> total_prefix("grad/norm/total"), total_prefix("g/layers.3.total")
    ('grad/norm/', 'g/layers.3.')
    >>> total_prefix("throughput/total_tokens"), total_prefix("total"), total_prefix("g/subtotal")
    (None, None, None)
    """
    if len(name) <= len(TOTAL) or not name.endswith(TOTAL):
        return None
    prefix = name[: -len(TOTAL)]
    return prefix if prefix[-1] in _SEPARATORS else None


def outermost(names: Iterable[str]) -> list[str]:
    """``names`` without those under another of them (`under`), and without each total
    that has a sibling among those left (`total_prefix`), in their order.

    >>> outermost(["embed", "layers.0", "layers.0.mlp.w1", "layers.1", "layers.10.w", "lm_head"])
    ['embed', 'layers.0', 'layers.1', 'layers.10.w', 'lm_head']
    >>> outermost(["g/total", "g/layers.3", "g/layers.3/attn/q", "g/lm_head"])
    ['g/layers.3', 'g/lm_head']
    >>> outermost(["grad/norm/total", "params/norm/total"])
    ['grad/norm/total', 'params/norm/total']
    """
    listed = list(dict.fromkeys(names))
    present = set(listed)

    def inside_another(name: str) -> bool:
        return any(name[:i] in present for i, ch in enumerate(name) if ch in _SEPARATORS and i > 0)

    parts = [name for name in listed if not inside_another(name)]
    # How many of the names left start with each prefix that ends at a separator: a total
    # gives way where its own prefix starts another name too. Names under a total are not
    # left at this point (rule 1), so that other name is a sibling or under one.
    starting = Counter(
        name[: i + 1] for name in parts for i, ch in enumerate(name) if ch in _SEPARATORS
    )
    return [
        name for name in parts if (prefix := total_prefix(name)) is None or starting[prefix] < 2
    ]
