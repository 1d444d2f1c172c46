"""A per-process cache of metric ids by run and name, so steady ingest skips the lookup.

A trainer sends the same few thousand metric names with every batch; their ids never
change, because a metric row is only ever deleted along with its run and run keys are
never reused (a Postgres sequence; SQLite's rowids would only repeat if the newest run
were deleted, and nothing deletes runs). So each worker process keeps what it has seen,
and a batch whose names are all known costs no query at all. Workers and replicas each
keep their own cache: a name another process created is a miss here, resolved (and
created, ``ON CONFLICT DO NOTHING``) in the database like any other.

Only committed ids may enter the cache: an id taken from a transaction that later rolled
back would name no row. Callers therefore `remember` after their commit, never before.

>>> cache = MetricIdCache(max_names=4)
>>> cache.remember(1, {"loss": 10, "grad/norm/total": 11})
>>> cache.lookup(1, ["loss", "lr"])
({'loss': 10}, ['lr'])
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from .db import PerEngine

__all__ = ["DEFAULT_MAX_NAMES", "MetricIdCache", "metric_id_cache"]

DEFAULT_MAX_NAMES = 500_000
"""About 100 MB of names at most: 250 runs of 2,000 metrics."""


class MetricIdCache:
    """Metric ids by ``(run_key, name)``, at most ``max_names`` of them, least recently used
    runs dropped first. Thread-safe: a worker's request threads share one."""

    def __init__(self, max_names: int = DEFAULT_MAX_NAMES) -> None:
        if max_names < 1:
            raise ValueError(f"max_names must be at least 1, got {max_names}")
        self.max_names = max_names
        self._runs: OrderedDict[int, dict[str, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    def lookup(self, run_key: int, names: Sequence[str]) -> tuple[dict[str, int], list[str]]:
        """``({name: id}`` of the names held, ``[names not held]``)``, in ``names`` order."""
        with self._lock:
            known = self._runs.get(run_key)
            if known is None:
                return {}, list(names)
            self._runs.move_to_end(run_key)
            found = {name: known[name] for name in names if name in known}
        if len(found) == len(names):
            return found, []
        return found, [name for name in names if name not in found]

    def remember(self, run_key: int, ids: Mapping[str, int]) -> None:
        """Hold committed ``ids`` of a run, dropping the least recently used runs to fit.

        A run with more names than the whole cache holds keeps only the first
        ``max_names``; the rest stay misses (correct, only slower).
        """
        with self._lock:
            known = self._runs.get(run_key)
            if known is None:
                known = self._runs[run_key] = {}
            else:
                self._runs.move_to_end(run_key)
            before = len(known)
            if before + len(ids) <= self.max_names:
                known.update(ids)
            else:
                for name, mid in ids.items():
                    if name in known or len(known) < self.max_names:
                        known[name] = mid
            self._size += len(known) - before
            while self._size > self.max_names and len(self._runs) > 1:
                _, dropped = self._runs.popitem(last=False)
                self._size -= len(dropped)

    def forget_run(self, run_key: int) -> None:
        """Drop a run's ids (for a caller that deletes the run)."""
        with self._lock:
            dropped = self._runs.pop(run_key, None)
            if dropped is not None:
                self._size -= len(dropped)


metric_id_cache = PerEngine(MetricIdCache)
"""This process's cache for the database behind an engine (made on first use)."""
