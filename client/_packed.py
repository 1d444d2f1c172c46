"""Many metrics as one array: the names on the host, the values in one vector.

A jitted step that returns a thousand scalars has a thousand outputs: each costs compile
time and a transfer per step. `PackedMetrics` is one output however many metrics it holds
(`normwatch.client.jax.stability_metrics(..., packed=True)` makes one, and registers the
type as a JAX pytree: the vector is its only leaf, the names are static). `Run.log
<normwatch.client.Run.log>` queues it as it is, with no copy and no device sync: it is
read on the writer thread, in the same one transfer as the rest of the batch.

This module imports neither JAX nor NumPy: the client installs without them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["PackedMetrics"]


class PackedMetrics(Mapping[str, Any]):
    """``names[i]`` is ``vector[i]``, for the first ``count`` names (all by default).

    ``vector`` is a vector (a JAX array, on the device until read; or anything NumPy can
    read). The first ``totals`` names are the ones computed every step (`stability_metrics`
    puts its ``.../total`` norms first); `totals_only` keeps just those. As a mapping it
    reads the whole vector once, on first use.
    """

    __slots__ = ("_host", "count", "names", "totals", "vector")

    def __init__(
        self,
        names: Sequence[str],
        vector: Any,
        *,
        totals: int = 0,
        count: int | None = None,
    ) -> None:
        self.names = tuple(names)
        self.vector = vector
        self.totals = totals
        self.count = len(self.names) if count is None else min(count, len(self.names))
        self._host: list[float] | None = None

    def totals_only(self) -> PackedMetrics:
        """The same vector, limited to its first ``totals`` names (no device work)."""
        return PackedMetrics(self.names, self.vector, totals=self.totals, count=self.totals)

    def host_values(self) -> list[float]:
        """The first ``count`` values as Python floats (reads the vector once)."""
        if self._host is None:
            import numpy as np

            self._host = np.asarray(self.vector, dtype=np.float64)[: self.count].tolist()
        return self._host

    def items(self) -> list[tuple[str, float]]:  # type: ignore[override]
        """(name, value) pairs in order, from one read of the vector."""
        return list(zip(self.names[: self.count], self.host_values(), strict=True))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        return iter(self.names[: self.count])

    def __getitem__(self, name: str) -> float:
        try:
            index = self.names.index(name, 0, self.count)
        except ValueError:
            raise KeyError(name) from None
        return self.host_values()[index]

    def __repr__(self) -> str:
        return f"PackedMetrics({self.count} of {len(self.names)} names)"


def pytree_parts(packed: PackedMetrics) -> tuple[tuple[Any], tuple[tuple[str, ...], int, int]]:
    """``(children, aux)`` for JAX: the vector; the names, totals and count."""
    return (packed.vector,), (packed.names, packed.totals, packed.count)


def from_pytree_parts(
    aux: tuple[tuple[str, ...], int, int], children: Sequence[Any]
) -> PackedMetrics:
    names, totals, count = aux
    return PackedMetrics(names, children[0], totals=totals, count=count)
