"""Metric ids by run and name: the names a batch brings are resolved (and created) here,
and each process keeps a cache of them, so steady ingest skips the lookup.

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

from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session

from ..db import PerEngine
from ..errors import TooManyMetrics
from ..models import Metric

__all__ = [
    "DEFAULT_MAX_NAMES",
    "MetricIdCache",
    "metric_id_cache",
    "metric_ids_by_name",
    "resolve_metric_ids",
]

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


def resolve_metric_ids(
    session: Session,
    run_key: int,
    names: Sequence[str],
    *,
    known: MetricIdCache | None = None,
    max_run_metrics: int | None = None,
) -> dict[str, int]:
    """Ids for ``names`` in the run, creating the missing ones.

    Names that ``known`` holds cost no query. The cache is only read here: ids resolved
    in this transaction enter it once the caller has committed (`MetricIdCache.remember`).
    Missing names are created in sorted order, so that concurrent first batches of one
    run insert them in the same order and wait for one another instead of deadlocking.
    A batch that would take the run past ``max_run_metrics`` names raises
    `TooManyMetrics` and creates none (batches racing to add names may each pass it).
    """
    if not names:
        return {}
    ids, missing = known.lookup(run_key, names) if known is not None else ({}, list(names))
    if not missing:
        return ids
    missing.sort()
    conn = session.connection()
    postgres = conn.dialect.name == "postgresql"
    if max_run_metrics is not None:
        ids.update(_metric_ids(conn, run_key, missing))
        missing = [name for name in missing if name not in ids]
        if not missing:
            return ids
        have = conn.execute(
            text("SELECT count(*) FROM metrics WHERE run_key = :rk"), {"rk": run_key}
        ).scalar_one()
        if have + len(missing) > max_run_metrics:
            raise TooManyMetrics(
                f"metrics: the run has {have} metrics and this batch adds {len(missing)}; "
                f"a run may have at most {max_run_metrics} (NORMWATCH_MAX_RUN_METRICS)"
            )
    if postgres:
        conn.execute(
            text(
                "INSERT INTO metrics (run_key, name) SELECT :rk, unnest(CAST(:names AS text[])) "
                "ON CONFLICT (run_key, name) DO NOTHING"
            ),
            {"rk": run_key, "names": missing},
        )
    else:
        conn.execute(
            text("INSERT OR IGNORE INTO metrics (run_key, name) VALUES (:rk, :name)"),
            [{"rk": run_key, "name": n} for n in missing],
        )
    ids.update(_metric_ids(conn, run_key, missing))
    return ids


_SQLITE_NAMES_A_STATEMENT = 10_000
"""Names looked up per statement on SQLite, well below its 32,766 bound parameters."""


def _metric_ids(conn: Connection, run_key: int, names: list[str]) -> list[tuple[str, int]]:
    """``(name, id)`` of the given names that the run has."""
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            text("SELECT name, id FROM metrics WHERE run_key = :rk AND name = ANY(:names)"),
            {"rk": run_key, "names": names},
        )
        return [(name, mid) for name, mid in rows]
    found: list[tuple[str, int]] = []
    for i in range(0, len(names), _SQLITE_NAMES_A_STATEMENT):
        part = names[i : i + _SQLITE_NAMES_A_STATEMENT]
        rows = conn.execute(
            select(Metric.name, Metric.id).where(Metric.run_key == run_key, Metric.name.in_(part))
        )
        found.extend((name, mid) for name, mid in rows)
    return found


def metric_ids_by_name(session: Session, run_key: int, names: Sequence[str]) -> dict[str, int]:
    rows = session.execute(
        select(Metric.name, Metric.id).where(Metric.run_key == run_key, Metric.name.in_(names))
    )
    return {name: mid for name, mid in rows}


def metric_names(session: Session, run_key: int) -> list[str]:
    """Every metric name the run has logged, sorted."""
    rows = session.execute(
        select(Metric.name).where(Metric.run_key == run_key).order_by(Metric.name)
    )
    return [name for (name,) in rows]
