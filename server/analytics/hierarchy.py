"""The hierarchy rule: a norm and the norms of its own parts are never both counted.

The JAX client logs ``grad/norm/layers.3`` beside the norms of that layer's leaves,
``grad/norm/layers.3.attn.query.kernel`` and the rest; the layer's norm is already the root
of their summed squares. Wherever a set of names is summed or ranked (a glob in ``rss()``,
``share()`` and ``ratio()``, attribution's parts, the rows of a layer grid), a name under
another name of the same set (after a ``.`` or a ``/``) is left out, so that only the
outermost norms count.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["outermost", "under"]

_SEPARATORS = (".", "/")


def under(name: str, parent: str) -> bool:
    """Whether ``name`` is a part of ``parent``: it continues it after a ``.`` or ``/``.

    >>> under("layers.3.attn.q", "layers.3"), under("layers.31", "layers.3")
    (True, False)
    """
    return (
        len(name) > len(parent) + 1 and name.startswith(parent) and name[len(parent)] in _SEPARATORS
    )


def outermost(names: Iterable[str]) -> list[str]:
    """``names`` without those under another of them (`under`), in their order.

    >>> outermost(["embed", "layers.0", "layers.0.mlp.w1", "layers.1", "layers.10.w", "lm_head"])
    ['embed', 'layers.0', 'layers.1', 'layers.10.w', 'lm_head']
    >>> outermost(["g/layers.3", "g/layers.3/attn/q", "g/total"])
    ['g/layers.3', 'g/total']
    """
    listed = list(dict.fromkeys(names))
    present = set(listed)

    def inside_another(name: str) -> bool:
        return any(name[:i] in present for i, ch in enumerate(name) if ch in _SEPARATORS and i > 0)

    return [name for name in listed if not inside_another(name)]
