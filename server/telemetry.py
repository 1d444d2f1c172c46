"""The service's own Prometheus series: requests, ingest, database pool, alert backlog.

Two kinds of series, kept two ways:

- Counted in process (ingest counters, request latency, requests in flight, pool use):
  `prometheus_client` instruments, updated by the ASGI middleware in `api.prometheus`.
  Under several uvicorn workers, ``PROMETHEUS_MULTIPROC_DIR`` names a folder where every
  worker keeps its values in memory-mapped files; whichever worker answers a scrape adds
  them all up, so counters and histograms cover the whole instance. Gauges are summed over
  the live workers.
- Read from the database at scrape time (the alert delivery backlog, and whatever other
  modules register with `Telemetry.add_collector`): computed by the worker that answers,
  cached for ``cache_s`` so that scrapes never hammer the database. The database is shared,
  so these need no adding up across workers.

Series carry no project, run or metric names: routes are labelled by their template
(``/api/v1/runs/{run_id}/metrics``), never by the path that was asked for.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess, values
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from .storage.gauges import Sample, ScrapeCollector, alert_backlog

__all__ = [
    "INGEST_ROUTE",
    "MULTIPROC_ENV",
    "Sample",
    "ScrapeCollector",
    "Telemetry",
    "alert_backlog",
    "prepare_multiprocess_dir",
]

log = logging.getLogger("normwatch.telemetry")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
INGEST_ROUTE = "/api/v1/runs/{run_id}/metrics"
LATENCY_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_LIVE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db")


def prepare_multiprocess_dir(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` an empty folder for ``PROMETHEUS_MULTIPROC_DIR``; returns it.

    Values left by an earlier run of the service are removed, so counters start from zero
    as they would in a single process. Call it before any worker starts.
    """
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for leftover in folder.glob("*.db"):
        leftover.unlink()
    return folder


class Telemetry:
    """The instruments of one service process and the registry a scrape renders.

    >>> telemetry = Telemetry(engine, sessions)  # doctest: +SKIP
    >>> telemetry.add_collector(compaction_lag)  # fn(session) -> Iterable[Sample]
    >>> body, content_type = telemetry.render(accept="text/plain")
    """

    def __init__(
        self, engine: Engine, sessions: sessionmaker[Session], *, cache_s: float = 2.0
    ) -> None:
        self._pool = engine.pool if isinstance(engine.pool, QueuePool) else None
        self._pool_seen: tuple[int, int, int] | None = None
        self._pool_lock = threading.Lock()  # sampled by requests and by scrapes (a thread)
        self._multiproc_dir = _multiprocess_dir()
        self.worker_header = (b"x-normwatch-worker", str(os.getpid()).encode())
        registry = CollectorRegistry()
        self.points = Counter(
            "normwatch_ingest_points",
            "Metric values stored from accepted batches.",
            registry=registry,
        )
        self.ignored = Counter(
            "normwatch_ingest_ignored_points",
            "Metric values of accepted batches not stored because their point (segment, "
            "metric, step) had a value already: re-sent batches, steps logged again.",
            registry=registry,
        )
        self.batches = Counter(
            "normwatch_ingest_batches",
            "Metric batches answered, by HTTP status code (202 accepted, others rejected).",
            ["code"],
            registry=registry,
        )
        self.deferred = Counter(
            "normwatch_ingest_deferred_seconds",
            "Time metric batches stood aside for dashboard and API reads in their worker.",
            registry=registry,
        )
        self.refused = Counter(
            "normwatch_admission_refused",
            "Requests answered 503 because every slot of their kind stayed taken for the "
            "whole wait (kind: ingest for metric batches, read for everything else).",
            ["kind"],
            registry=registry,
        )
        self.latency = Histogram(
            "normwatch_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template, method and status class.",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "normwatch_http_requests_in_flight",
            "HTTP requests being answered now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        workers = Gauge(
            "normwatch_worker_processes",
            "Worker processes serving this instance.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        workers.set(1)
        self._pool_gauges: list[Gauge] = []
        if self._pool is not None:  # SQLite in memory has a pool of one connection per thread
            self._pool_gauges = [
                Gauge(name, doc, registry=registry, multiprocess_mode="livesum")
                for name, doc in (
                    ("normwatch_db_pool_checked_out", "Database connections in use."),
                    ("normwatch_db_pool_size", "Connections the pool keeps open."),
                    ("normwatch_db_pool_overflow", "Connections open beyond the pool size."),
                )
            ]
            self.sample_pool()
        self._per_answer: dict[tuple[str, str, int], tuple[Histogram, Counter | None]] = {}
        self._database = _DatabaseCollector(sessions, cache_s)
        self._database.add(alert_backlog, "alert_backlog")
        if self._multiproc_dir is None:
            self._scrape_registry = registry
        else:
            self._scrape_registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(  # type: ignore[no-untyped-call]
                self._scrape_registry, self._multiproc_dir
            )
        self._scrape_registry.register(self._database)

    def add_collector(self, collector: ScrapeCollector, name: str | None = None) -> None:
        """Add gauges read from the database at scrape time (cached like the built-in ones).

        ``collector(session)`` returns `Sample` values named ``normwatch_...``; ``name``
        (default: its qualified name) labels ``normwatch_scrape_collector_up``, which is 0
        while it raises.
        """
        self._database.add(collector, name or str(getattr(collector, "__qualname__", collector)))

    def count_request(self, route: str, method: str, status: int, elapsed_s: float) -> None:
        """Record one answered request (an ingest batch too, when ``route`` is the ingest route)."""
        children = self._per_answer.get((route, method, status))
        if children is None:  # bounded: routes × methods × status codes
            children = self._per_answer[(route, method, status)] = (
                self.latency.labels(route, method, f"{status // 100}xx"),
                self.batches.labels(str(status))
                if route == INGEST_ROUTE and method == "POST"
                else None,
            )
        latency, batches = children
        latency.observe(elapsed_s)
        if batches is not None:
            batches.inc()

    def count_refused(self, kind: str) -> None:
        """A request of ``kind`` was refused at admission (see `admission.Admission`)."""
        self.refused.labels(kind).inc()

    def sample_pool(self) -> None:
        """Copy the pool's current use into the gauges (called after each request)."""
        if self._pool is None:
            return
        pool = self._pool
        with self._pool_lock:
            seen = (pool.checkedout(), pool.size(), max(pool.overflow(), 0))
            if seen != self._pool_seen:  # most requests change nothing: skip the writes
                self._pool_seen = seen
                for gauge, value in zip(self._pool_gauges, seen, strict=True):
                    gauge.set(value)

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition body and its content type, in the format ``accept`` prefers."""
        self.sample_pool()
        if self._multiproc_dir is not None:
            _forget_dead_workers(self._multiproc_dir)
        encoder, content_type = choose_encoder(accept)
        return encoder(self._scrape_registry), content_type

    def close(self) -> None:
        """Drop this worker's share of the live gauges (on shutdown)."""
        if self._multiproc_dir is not None:
            multiprocess.mark_process_dead(  # type: ignore[no-untyped-call]
                os.getpid(), self._multiproc_dir
            )


class _DatabaseCollector:
    """Runs the scrape-time collectors, each in a session of its own, at most every ``cache_s``."""

    def __init__(self, sessions: sessionmaker[Session], cache_s: float) -> None:
        self._sessions = sessions
        self._cache_s = cache_s
        self._sources: list[tuple[str, ScrapeCollector]] = []
        self._lock = threading.Lock()
        self._cached: list[Metric] = []
        self._cached_at = -float("inf")

    def add(self, collector: ScrapeCollector, name: str) -> None:
        with self._lock:
            self._sources.append((name, collector))
            self._cached_at = -float("inf")

    def describe(self) -> list[Metric]:
        return []  # read lazily: registering must not query the database

    def collect(self) -> list[Metric]:
        with self._lock:  # concurrent scrapes wait for one read instead of each doing it
            if time.monotonic() - self._cached_at >= self._cache_s:
                self._cached = self._read()
                self._cached_at = time.monotonic()
            return self._cached

    def _read(self) -> list[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        up = GaugeMetricFamily(
            "normwatch_scrape_collector_up",
            "1 when a scrape-time collector read its gauges, 0 when it failed.",
            labels=["collector"],
        )
        for name, source in self._sources:
            try:
                with self._sessions() as session:
                    own = _families(source(session))
            except Exception:
                log.warning("scrape collector %s failed", name, exc_info=True)
                up.add_metric([name], 0.0)
                continue
            clashes = families.keys() & own.keys()
            if clashes:
                log.warning("scrape collector %s repeats %s; ignored", name, sorted(clashes))
                up.add_metric([name], 0.0)
                continue
            families.update(own)
            up.add_metric([name], 1.0)
        return [*families.values(), up]


def _families(samples: Iterable[Sample]) -> dict[str, GaugeMetricFamily]:
    families: dict[str, GaugeMetricFamily] = {}
    label_names: dict[str, list[str]] = {}
    for sample in samples:
        names = sorted(sample.labels)
        family = families.get(sample.name)
        if family is None:
            family = families[sample.name] = GaugeMetricFamily(
                sample.name, sample.help or sample.name, labels=names
            )
            label_names[sample.name] = names
        elif names != label_names[sample.name]:
            raise ValueError(f"{sample.name}: label names {names} differ from earlier samples")
        family.add_metric([sample.labels[n] for n in names], sample.value)
    return families


def _multiprocess_dir() -> str | None:
    """The folder prometheus_client shares values through, or None in single-process mode.

    prometheus_client picks its mode once, when first imported, from the environment; this
    follows the choice it made rather than reading the environment afresh.
    """
    if values.ValueClass is values.MutexValue:
        return None
    return os.environ.get(MULTIPROC_ENV)


def _forget_dead_workers(path: str) -> None:
    """Drop the live gauges of workers that died without shutting down (uvicorn restarts them)."""
    dead: set[int] = set()
    for entry in os.scandir(path):
        match = _LIVE_FILE.fullmatch(entry.name)
        if match is not None and not _alive(int(match[1])):
            dead.add(int(match[1]))
    for pid in dead:
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
