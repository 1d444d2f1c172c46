"""Shared pieces of the benchmarks: scratch databases, a real server process, timing.

Not a benchmark itself. The scripts next to it import it by its bare name, which works
because Python puts a script's own folder first on ``sys.path``
(``python benchmarks/series_read.py``).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from normwatch.scratch import create_database, drop_database
from normwatch.server.auth import Scope, create_token
from normwatch.server.db import build_engine, session_factory
from normwatch.server.migrate import upgrade

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
T = TypeVar("T")


def say(message: str) -> None:
    """Progress line, flushed at once so a long run shows where it is."""
    print(message, flush=True)


def base_pg_url() -> str:
    """The Postgres the scratch databases are created in (the test suite's variable)."""
    return os.environ.get("NORMWATCH_TEST_DATABASE_URL", DEFAULT_PG)


@contextmanager
def scratch_postgres(prefix: str) -> Iterator[str]:
    """A freshly created and migrated Postgres database, dropped on the way out (on a Citus
    coordinator, a cluster database whose series tables are sharded by run)."""
    base = base_pg_url()
    url = create_database(base, prefix)
    try:
        yield url
    finally:
        drop_database(base, url)


@contextmanager
def scratch_sqlite() -> Iterator[str]:
    """A migrated SQLite file in a temporary folder, removed on the way out."""
    with tempfile.TemporaryDirectory(prefix="normwatch-bench-") as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        engine = build_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url


def make_ingest_token(database_url: str, project: str) -> str:
    """An ingest-scoped token of a new project."""
    engine = build_engine(database_url, pool_size=1)
    try:
        with session_factory(engine)() as session, session.begin():
            secret, _ = create_token(session, project, "ingest")
    finally:
        engine.dispose()
    return secret


@dataclass(frozen=True)
class Timing:
    """Median (and spread) of repeated calls, in milliseconds, with the last result."""

    median_ms: float
    min_ms: float
    max_ms: float


def timed(fn: Callable[[], T], *, repeat: int, warmup: int = 1) -> tuple[Timing, T]:
    """Run ``fn`` ``warmup`` times untimed, then ``repeat`` times; median wall time."""
    result = fn()
    for _ in range(warmup - 1):
        result = fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return Timing(statistics.median(samples), min(samples), max(samples)), result


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (``q`` in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), math.ceil(q / 100 * len(sorted_values))))
    return sorted_values[rank - 1]


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, so the output can be pasted into ``docs/benchmarks.md``."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


def make_tokens(database_url: str, project: str, *scopes: Scope) -> list[str]:
    """Tokens of a new project, one for each of ``scopes`` (``"ingest"``, ``"read"``...)."""
    engine = build_engine(database_url, pool_size=1)
    try:
        with session_factory(engine)() as session, session.begin():
            secrets = [create_token(session, project, scope)[0] for scope in scopes]
    finally:
        engine.dispose()
    return secrets


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (Linux ``/proc``), parents first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # exited while we looked
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        tree.append(current)
        todo.extend(sorted(children.get(current, [])))
    return tree


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (``VmRSS`` of ``/proc/<pid>/status``); 0 once it exited."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def process_cpu_seconds(pid: int, *, reaped_children: bool = False) -> float:
    """User + system CPU seconds of one process, plus those of its exited and reaped
    children when ``reaped_children`` (``cutime``/``cstime``); 0 once it exited."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")
