"""HTTP ingest of a real server: sustained throughput against a raw binary COPY of the same
rows measured in the same run, then request latency at half that load.

What runs: a real ``normwatch serve`` process (one uvicorn worker; ``--workers N`` when
given) on a scratch Postgres database that the script creates, migrates and drops.

**Throughput.** ``--senders`` threads, one run each, post columnar batches of 25 steps x
``--metrics`` metrics (50,000 points by default, the trainer client's largest batch, in its
format: ``{"steps": [...], "metrics": {name: [values...]}}``, gzip level 1,
``Content-Encoding: gzip``) to ``POST /api/v1/runs/{id}/metrics`` back to back for
``--seconds``. Every body is built and compressed before the clock starts, so the senders
only wait on the network. One untimed batch per run goes first (it creates the run's metric
rows). Reported: accepted points/s, requests/s, latency, errors, and where the CPU went.

**Baseline.** Once the server has stopped, the same number of rows in the same shape (one
transaction per batch; at most 20M rows, about a minute of ``COPY`` here) go into a bare
table with the columns and primary key of a row-per-point store (run, metric, segment, step,
value), by one connection, as binary ``COPY ... FROM STDIN`` built with NumPy: roughly what
this Postgres takes in, one row a point, when the client costs nothing. Ratio: HTTP
points/s / COPY points/s. On a Citus coordinator (``NORMWATCH_TEST_DATABASE_URL`` set to
``scripts/citus-cluster url``) the scratch database is a cluster database with the series
tables sharded by run, and the bare table is sharded by run too; the Postgres CPU counted is
the coordinator's, the workers' falls under "other".

**Compaction.** Once the throughput phase ends, the script waits until the server's
compactor has taken in every hot point (the server runs with its default policy except
``NORMWATCH_COMPACTION_IDLE_S=5`` and ``NORMWATCH_COMPACTION_INTERVAL_S=1``, so that the
runs' last partial chunks do not wait a minute), and reports how fast it went. The latency
phase then starts on a compacted database, as a server keeping up with its load runs.

**Latency at half load.** ``--senders`` more threads, on runs of their own, post small
batches as a live trainer does (``--latency-steps`` steps x ``--metrics`` metrics, gzip) on
a fixed schedule whose total is ``--half-load`` points/s (by default 150,000, half the
300,000 points/s target; ``measured`` for half the throughput just measured), for
``--latency-seconds``.
A request that falls behind its schedule goes at once (and is counted late). Reported:
offered and achieved points/s, latency p50/p95/p99/max.

**Resources.** The server's resident memory (VmRSS of its process tree, ``/proc``) is
sampled every 0.5 s through both phases: start, peak, end. CPU seconds of the server, of
this process (the senders), of every Postgres process and of the rest of the machine are
read before and after each phase; "other" is whatever else ran on the machine, so a run
that shares it with unrelated work says so. From the CPU seconds of the server, the senders
and Postgres, the CPU cost of a point follows, and with it an estimate of the rate the
phase would reach with every core to itself (CPU-bound, no "other").

The client, the server and Postgres share the machine: on a small one, the senders' and
server's Python compete with Postgres for the same cores.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``, by default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, which must allow CREATE DATABASE)::

    .venv/bin/python benchmarks/ingest_http.py --seconds 60        # acceptance (~3 min)
    .venv/bin/python benchmarks/ingest_http.py                     # 20 s + 15 s (~1.5 min)
    .venv/bin/python benchmarks/ingest_http.py --quick             # 5 s + 5 s, 500 metrics
    .venv/bin/python benchmarks/ingest_http.py --senders 8 --latency-steps 1
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import psycopg
from _harness import (
    make_ingest_token,
    percentile,
    process_cpu_seconds,
    process_tree,
    rss_bytes,
    say,
    scratch_postgres,
    table,
)

from normwatch.scratch import admin_dsn
from normwatch.server.storage.vacuum import vacuum_due
from normwatch.testing import running_server

STEPS_PER_BATCH = 25
# Bodies are pre-built for a rate no server here reaches (per sender, with room for skew);
# a sender that runs out stops early and the run says so.
MAX_POINTS_PER_S = 3_000_000
DISTINCT_VALUE_BLOCKS = 8
RSS_EVERY_S = 0.5
BUSY_BEFORE_NOTE = 0.15  # share of the machine busy before the run that earns a warning
MB = 1024 * 1024
BARE_TABLE = (
    "CREATE TABLE bare (run_key BIGINT NOT NULL, metric_id BIGINT NOT NULL, "
    "segment SMALLINT NOT NULL, step BIGINT NOT NULL, value DOUBLE PRECISION, "
    "PRIMARY KEY (run_key, metric_id, segment, step))"
)


def metric_names(count: int) -> list[str]:
    """Per-layer norm names in the shape a JAX trainer logs them."""
    kinds = ("grad/norm", "params/norm", "updates/norm")
    parts = ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w_in", "mlp.w_out", "ln1", "ln2")
    names = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        layer, part = divmod(i // len(kinds), len(parts))
        names.append(f"{kind}/layers.{layer}.{parts[part]}.weight")
    return names


def build_bodies(
    names: list[str], steps_per_batch: int, batches: int, rng: np.random.Generator
) -> tuple[list[bytes], int]:
    """``batches`` gzip bodies with consecutive steps; returns them and the raw JSON size."""
    blocks = []
    for _ in range(DISTINCT_VALUE_BLOCKS):
        values = rng.lognormal(-1.0, 0.5, size=(len(names), steps_per_batch))
        blocks.append(orjson.dumps(dict(zip(names, values.tolist(), strict=True))))
    bodies = []
    raw = 0
    for b in range(batches):
        steps = list(range(b * steps_per_batch, (b + 1) * steps_per_batch))
        doc = b'{"steps":' + orjson.dumps(steps) + b',"metrics":' + blocks[b % len(blocks)] + b"}"
        raw += len(doc)
        bodies.append(gzip.compress(doc, compresslevel=1, mtime=0))
    return bodies, raw // max(1, batches)


class RejectedBatch(Exception):
    """The server answered something other than 202."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status


@dataclass
class Clock:
    """When the timed phase starts and ends; set once every sender is ready."""

    start: float = 0.0
    deadline: float = math.inf


@dataclass
class Sender:
    """One thread posting one run's pre-built bodies until the deadline.

    Back to back when ``interval`` is None; otherwise body ``i`` is due at
    ``start + offset + i * interval``, and one that is due already goes at once.
    """

    url: str
    token: str
    run_id: str
    bodies: list[bytes]
    interval: float | None = None
    offset: float = 0.0
    latencies: list[float] = field(default_factory=list)
    accepted: int = 0
    requests: int = 0
    late: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    ran_out: bool = False
    finished: float = 0.0

    def post(self, client: httpx.Client, body: bytes) -> int:
        response = client.post(
            f"/api/v1/runs/{self.run_id}/metrics",
            content=body,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        if response.status_code != 202:
            raise RejectedBatch(response.status_code, response.text[:200])
        accepted: int = response.json()["accepted"]
        return accepted

    def run(self, start: threading.Barrier, clock: Clock) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            with httpx.Client(base_url=self.url, headers=headers, timeout=120) as client:
                try:
                    self.post(client, self.bodies[0])  # untimed: creates the metric rows
                except BaseException:
                    start.abort()  # nobody waits forever for a sender that cannot start
                    raise
                start.wait()
                for i, body in enumerate(self.bodies[1:]):
                    if self.interval is not None:
                        due = clock.start + self.offset + i * self.interval
                        if due >= clock.deadline:
                            break
                        wait = due - time.perf_counter()
                        if wait > 0:
                            time.sleep(wait)
                        elif wait < -0.001:
                            self.late += 1
                    elif time.perf_counter() >= clock.deadline:
                        break
                    t0 = time.perf_counter()
                    try:
                        self.accepted += self.post(client, body)
                    except RejectedBatch as exc:
                        self.count_error(f"HTTP {exc.status}")
                    except (httpx.HTTPError, ValueError) as exc:
                        self.count_error(type(exc).__name__)
                    self.latencies.append(time.perf_counter() - t0)
                    self.requests += 1
                else:
                    self.ran_out = True
        finally:
            self.finished = time.perf_counter()

    def count_error(self, key: str) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    tick = os.sysconf("SC_CLK_TCK")
    return (total - idle) / tick, total / tick


def postgres_cpu_seconds(conn: psycopg.Connection[Any]) -> dict[int, float]:
    """CPU seconds so far of the Postgres processes working for this database: its
    backends (but the one asking) and the shared ones (WAL writer, checkpointer...)."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE (datname = current_database() "
        "OR datname IS NULL) AND pid <> pg_backend_pid()"
    ).fetchall()
    return {pid: process_cpu_seconds(pid) for (pid,) in rows}


@dataclass(frozen=True)
class CpuMark:
    """CPU seconds so far: the server's process tree, this process, Postgres, the machine."""

    server: float
    senders: float
    postgres: dict[int, float]
    busy: float
    total: float

    @classmethod
    def take(cls, server_pid: int, conn: psycopg.Connection[Any]) -> CpuMark:
        busy, total = machine_busy()
        return cls(
            server=sum(process_cpu_seconds(pid) for pid in process_tree(server_pid)),
            senders=time.process_time(),
            postgres=postgres_cpu_seconds(conn),
            busy=busy,
            total=total,
        )

    def until(self, later: CpuMark) -> dict[str, float]:
        """Cores used between two marks, by whom ("other": the rest of the machine)."""
        wall = (later.total - self.total) / (os.cpu_count() or 1)
        used = {
            "server": later.server - self.server,
            "senders": later.senders - self.senders,
            "postgres": sum(t - self.postgres.get(pid, 0.0) for pid, t in later.postgres.items()),
        }
        used["other"] = (later.busy - self.busy) - sum(used.values())
        used["machine"] = later.busy - self.busy
        return {k: v / wall for k, v in used.items()}


def cpu_row(label: str, cores: dict[str, float], points_per_s: float) -> list[str]:
    """Cores used by whom, CPU per point of the work measured, and the rate those costs
    allow on a machine with nothing else to do (``other`` excluded)."""
    ours = cores["server"] + cores["senders"] + cores["postgres"]
    per_point = ours / max(points_per_s, 1e-9)
    return (
        [label]
        + [f"{cores[k]:.2f}" for k in ("server", "senders", "postgres", "other", "machine")]
        + [f"{per_point * 1e6:.2f}", f"{(os.cpu_count() or 1) / per_point:,.0f}"]
    )


class RssSampler:
    """Samples the server's resident memory (its whole process tree) in the background."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, str, int]] = []
        self.phase = "idle"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> int:
        rss = sum(rss_bytes(pid) for pid in process_tree(self.pid))
        self.samples.append((time.perf_counter(), self.phase, rss))
        return rss

    def _loop(self) -> None:
        while not self._stop.wait(RSS_EVERY_S):
            self.sample()

    def row(self, phase: str | None) -> list[str]:
        """``[phase, start, peak, end]`` in MB; the whole run when ``phase`` is None."""
        values = [rss for _, p, rss in self.samples if phase is None or p == phase]
        label = phase or "whole run"
        if not values:
            return [label, "-", "-", "-"]
        return [label] + [f"{v / MB:,.0f}" for v in (values[0], max(values), values[-1])]


def wait_with_progress(
    threads: list[threading.Thread], senders: list[Sender], clock: Clock, label: str
) -> None:
    """Join the sender threads, saying how far they got every 2 s."""
    tick = clock.start
    while any(t.is_alive() for t in threads):
        tick += 2.0
        for t in threads:
            t.join(timeout=max(0.0, tick - time.perf_counter()))
        elapsed = time.perf_counter() - clock.start
        done = sum(s.accepted for s in senders)
        reqs = sum(s.requests for s in senders)
        say(f"  {label} {elapsed:5.1f} s: {reqs:>5} requests, {done / elapsed:>10,.0f} points/s")


def run_phase(
    senders: list[Sender], seconds: float, on_start: Callable[[], None], label: str
) -> Clock:
    """Start one thread per sender; once all are ready, the clock runs for ``seconds``."""
    clock = Clock()

    def go() -> None:
        on_start()
        clock.start = time.perf_counter()
        clock.deadline = clock.start + seconds

    barrier = threading.Barrier(len(senders) + 1, action=go, timeout=300)
    threads = [threading.Thread(target=s.run, args=(barrier, clock), daemon=True) for s in senders]
    for t in threads:
        t.start()
    barrier.wait()
    wait_with_progress(threads, senders, clock, label)
    return clock


def create_runs(url: str, token: str, prefix: str, count: int) -> list[str]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as api:
        ids = []
        for i in range(count):
            response = api.post("/api/v1/runs", json={"name": f"{prefix}-{i}"}, timeout=30)
            response.raise_for_status()
            ids.append(response.json()["id"])
        return ids


def stored_points(database_url: str) -> int:
    """Points held, hot or compacted, read in one snapshot."""
    with psycopg.connect(admin_dsn(database_url)) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        hot = conn.execute("SELECT coalesce(sum(count), 0) FROM blocks").fetchone()
        compacted = conn.execute("SELECT coalesce(sum(points), 0) FROM series").fetchone()
    return int(hot[0] if hot else 0) + int(compacted[0] if compacted else 0)


DRAIN_TIMEOUT_S = 600.0
BASELINE_MAX_ROWS = 20_000_000


def wait_compacted(watch: psycopg.Connection[Any], timeout: float) -> tuple[float, int]:
    """Seconds until no point is hot any more, and how many were hot at the start."""
    hot = int(watch.execute("SELECT coalesce(sum(count), 0) FROM blocks").fetchone()[0])
    say(f"waiting for the compactor: {hot:,} points hot")
    start = time.perf_counter()
    left = hot
    while left and time.perf_counter() - start < timeout:
        time.sleep(0.5)
        left = int(watch.execute("SELECT coalesce(sum(count), 0) FROM blocks").fetchone()[0])
        say(f"  compacting: {left:>12,} points hot after {time.perf_counter() - start:5.1f} s")
    if left:
        raise RuntimeError(f"{left:,} points still hot after {timeout:.0f} s")
    drained = time.perf_counter() - start
    # Caught up includes the compactor's vacuum of the rows it deleted (its trigger is
    # autovacuum's), which would otherwise run through the next phase.
    while time.perf_counter() - start < timeout:
        live, dead = watch.execute(
            "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'blocks'"
        ).fetchone()
        if not vacuum_due(live, dead):
            break
        say(f"  vacuum: {dead:>12,} dead hot rows after {time.perf_counter() - start:5.1f} s")
        time.sleep(2.0)
    return drained, hot


def errors_of(senders: list[Sender]) -> dict[str, int]:
    errors: dict[str, int] = {}
    for s in senders:
        for key, n in s.errors.items():
            errors[key] = errors.get(key, 0) + n
    return errors


def copy_baseline(database_url: str, rows: int, metrics: int, rng: np.random.Generator) -> float:
    """Seconds to binary-COPY ``rows`` rows into ``bare``, one transaction per batch shape."""
    per_batch = STEPS_PER_BATCH * metrics
    batches = max(1, rows // per_batch)
    row = np.dtype(
        [
            ("n", ">i2"),
            ("l1", ">i4"),
            ("run_key", ">i8"),
            ("l2", ">i4"),
            ("metric_id", ">i8"),
            ("l3", ">i4"),
            ("segment", ">i2"),
            ("l4", ">i4"),
            ("step", ">i8"),
            ("l5", ">i4"),
            ("value", ">f8"),
        ]
    )
    template = np.zeros(per_batch, dtype=row)
    template["n"] = 5
    template["l1"], template["l2"], template["l3"], template["l4"], template["l5"] = 8, 8, 2, 8, 8
    template["segment"] = 1
    template["metric_id"] = np.repeat(np.arange(1, metrics + 1), STEPS_PER_BATCH)
    template["value"] = rng.lognormal(-1.0, 0.5, size=per_batch)
    header = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    trailer = struct.pack(">h", -1)
    with psycopg.connect(admin_dsn(database_url)) as conn:
        conn.execute(BARE_TABLE)
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone():
            # On Citus the baseline is sharded as the series tables are: by run, 32 shards.
            conn.execute("SET citus.shard_count = 32")
            conn.execute("SELECT create_distributed_table('bare', 'run_key')")
        conn.commit()
        total = 0.0
        for b in range(batches):
            template["run_key"] = 1 + b % 2
            template["step"] = np.tile(
                np.arange(STEPS_PER_BATCH) + (b // 2) * STEPS_PER_BATCH, metrics
            )
            t0 = time.perf_counter()
            with conn.cursor() as cur:
                with cur.copy("COPY bare FROM STDIN (FORMAT BINARY)") as copy:
                    copy.write(header + template.tobytes() + trailer)
            conn.commit()
            total += time.perf_counter() - t0
            if (b + 1) % max(1, batches // 5) == 0 or b + 1 == batches:
                done = (b + 1) * per_batch
                say(f"  COPY: {done:>11,} rows, {done / total:>11,.0f} rows/s")
        stored = conn.execute("SELECT count(*) FROM bare").fetchone()
        if stored is None or stored[0] != batches * per_batch:
            raise RuntimeError(f"COPY stored {stored}, expected {batches * per_batch}")
    return total * rows / (batches * per_batch)


def latency_cells(latencies_s: list[float]) -> list[str]:
    ms = sorted(x * 1000 for x in latencies_s)
    return [f"{percentile(ms, q):,.1f}" for q in (50, 95, 99)] + [f"{ms[-1]:,.1f}" if ms else "-"]


TARGET_POINTS_PER_S = 300_000
"""The throughput the service is to sustain on a 2-core machine."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=None, help="throughput phase (20)")
    parser.add_argument("--senders", type=int, default=4, help="concurrent runs a phase (4)")
    parser.add_argument("--metrics", type=int, default=None, help="metrics a step (2000)")
    parser.add_argument(
        "--latency-seconds", type=float, default=None, help="latency phase at half load (15)"
    )
    parser.add_argument(
        "--latency-steps", type=int, default=2, help="steps a request in the latency phase (2)"
    )
    parser.add_argument(
        "--half-load",
        default=str(TARGET_POINTS_PER_S // 2),
        help="points/s offered in the latency phase, or 'measured' for half the measured "
        f"throughput (default {TARGET_POINTS_PER_S // 2:,}: half the {TARGET_POINTS_PER_S:,} "
        "points/s target)",
    )
    parser.add_argument("--workers", type=int, default=None, help="uvicorn workers (1)")
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the server, e.g. NORMWATCH_COMPACTION=false (repeatable)",
    )
    parser.add_argument("--quick", action="store_true", help="5 s + 5 s with 500 metrics")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    latency_seconds = args.latency_seconds or (5.0 if args.quick else 15.0)
    metrics = args.metrics or (500 if args.quick else 2000)
    senders = args.senders
    per_batch = STEPS_PER_BATCH * metrics
    rng = np.random.default_rng(args.seed)
    names = metric_names(metrics)

    busy0, total0 = machine_busy()
    time.sleep(1.0)
    busy1, total1 = machine_busy()
    busy_before = (busy1 - busy0) / max(1e-9, total1 - total0)
    if busy_before > BUSY_BEFORE_NOTE:
        say(f"WARNING: the machine is {100 * busy_before:.0f} % busy before the run")

    # Every sender posts the same bodies to a run of its own: steps only repeat across runs.
    batches = 2 + int(2 * MAX_POINTS_PER_S * seconds / per_batch / senders)
    say(
        f"building {batches} gzip bodies of {STEPS_PER_BATCH} steps x {metrics:,} metrics "
        f"({per_batch:,} points each), shared by {senders} senders"
    )
    bodies, raw_json = build_bodies(names, STEPS_PER_BATCH, batches, rng)
    wire = sum(len(b) for b in bodies) // len(bodies)
    say(f"  body: {raw_json / 1e6:.2f} MB JSON, {wire / 1e6:.2f} MB gzip")

    started = time.perf_counter()
    with (
        scratch_postgres("normwatch_bench_http") as url,
        tempfile.TemporaryDirectory(prefix="normwatch-bench-") as logs,
    ):
        extra: dict[str, Any] = {} if args.workers is None else {"workers": args.workers}
        # A run's last partial chunk is compacted once it is idle; 5 s (not 60) keeps the
        # wait for the throughput phase's backlog short.
        extra["NORMWATCH_COMPACTION_IDLE_S"] = "5"
        extra["NORMWATCH_COMPACTION_INTERVAL_S"] = "1"
        for item in args.server_env:
            name, sep, value = item.partition("=")
            if not sep:
                parser.error(f"--server-env wants NAME=VALUE, got {item!r}")
            extra[name] = value
        with (
            running_server(url, Path(logs), **extra) as server,
            RssSampler(server.process.pid) as rss,
            psycopg.connect(admin_dsn(url), autocommit=True) as watch,
        ):
            token = make_ingest_token(url, "bench-http")
            pid = server.process.pid

            # --- throughput -------------------------------------------------------------
            load = [
                Sender(server.url, token, run_id, bodies)
                for run_id in create_runs(server.url, token, "throughput", senders)
            ]
            marks: list[CpuMark] = []

            def throughput_starts() -> None:
                rss.phase = "throughput"
                marks.append(CpuMark.take(pid, watch))

            say(f"posting back to back for {seconds:.0f} s with {senders} senders")
            clock = run_phase(load, seconds, throughput_starts, "throughput")
            marks.append(CpuMark.take(pid, watch))
            rss.phase = "after throughput"
            elapsed = max(s.finished for s in load) - clock.start
            accepted = sum(s.accepted for s in load)
            http_pps = accepted / elapsed
            bodies.clear()

            # --- the compactor catches up -------------------------------------------------
            drain_s, drained = wait_compacted(watch, DRAIN_TIMEOUT_S)
            drain_pps = drained / drain_s if drain_s > 0 else 0.0

            # --- latency at half load -----------------------------------------------------
            per_request = args.latency_steps * metrics
            offered = http_pps / 2 if args.half_load == "measured" else float(args.half_load)
            interval = senders * per_request / offered
            count = 3 + int(latency_seconds / interval)
            small, _ = build_bodies(names, args.latency_steps, count, rng)
            paced = [
                Sender(server.url, token, run_id, small, interval, interval * i / senders)
                for i, run_id in enumerate(create_runs(server.url, token, "latency", senders))
            ]

            def latency_starts() -> None:
                rss.phase = "half load"
                marks.append(CpuMark.take(pid, watch))

            say(
                f"half load: {offered:,.0f} points/s as {senders} senders x one "
                f"{args.latency_steps}-step request every {interval * 1000:.0f} ms"
            )
            paced_clock = run_phase(paced, latency_seconds, latency_starts, "half load")
            marks.append(CpuMark.take(pid, watch))
            rss.phase = "end"
            paced_elapsed = max(s.finished for s in paced) - paced_clock.start
            paced_pps = sum(s.accepted for s in paced) / paced_elapsed
        # The untimed first batch of every run is stored too.
        expected = accepted + senders * per_batch + sum(s.accepted for s in paced)
        expected += senders * per_request
        stored = stored_points(url)
        if stored != expected:
            say(f"WARNING: {stored:,} points stored, {expected:,} accepted")

        # The same rows as were accepted, up to BASELINE_MAX_ROWS: COPY's rate is steady,
        # and at the service's rate the whole of a minute would take COPY seven more.
        rows = max(min(accepted, BASELINE_MAX_ROWS), per_batch)
        say(f"COPY baseline: {rows:,} rows in batches of {per_batch:,}")
        copy_pps = rows / copy_baseline(url, rows, metrics, rng)

    errors = errors_of(load)
    paced_errors = errors_of(paced)
    ran_out = any(s.ran_out for s in load + paced)
    throughput = marks[0].until(marks[1])
    half = marks[2].until(marks[3])
    latencies = [x for s in load for x in s.latencies]
    paced_latencies = [x for s in paced for x in s.latencies]
    shape = f"{senders} senders x {STEPS_PER_BATCH} steps x {metrics:,} metrics"
    say(f"\n## HTTP ingest, {shape}, {args.workers or 1} worker(s)\n")
    say(
        table(
            ["throughput", "value"],
            [
                ["timed phase (s)", f"{elapsed:.1f}"],
                ["requests (req/s)", f"{sum(s.requests for s in load):,}"],
                ["body JSON / gzip (MB)", f"{raw_json / 1e6:.2f} / {wire / 1e6:.2f}"],
                ["**accepted points/s, HTTP**", f"**{http_pps:,.0f}**"],
                ["points/s, binary COPY (1 connection)", f"{copy_pps:,.0f}"],
                ["**ratio HTTP / COPY**", f"**{http_pps / copy_pps:.2f}**"],
                ["latency p50 / p95 / p99 / max (ms)", " / ".join(latency_cells(latencies))],
                ["errors", ", ".join(f"{k} x{n}" for k, n in errors.items()) or "0"],
                [
                    "then compacted by the server (points, s, points/s)",
                    f"{drained:,} in {drain_s:.1f} s = {drain_pps:,.0f}/s",
                ],
            ],
        )
    )
    say(
        f"\n## Latency at half load, {senders} senders x {args.latency_steps} steps x "
        f"{metrics:,} metrics a request\n"
    )
    say(
        table(
            ["half load", "value"],
            [
                ["points/s offered / achieved", f"{offered:,.0f} / {paced_pps:,.0f}"],
                [
                    "requests (late)",
                    f"{sum(s.requests for s in paced):,} ({sum(s.late for s in paced):,})",
                ],
                ["latency p50 / p95 / p99 / max (ms)", " / ".join(latency_cells(paced_latencies))],
                ["errors", ", ".join(f"{k} x{n}" for k, n in paced_errors.items()) or "0"],
            ],
        )
    )
    say("\n## CPU (cores used, of " + str(os.cpu_count()) + ")\n")
    say(
        table(
            [
                "phase",
                "server",
                "senders",
                "Postgres",
                "other",
                "machine",
                "CPU µs a point",
                "points/s, idle machine (est.)",
            ],
            [cpu_row("throughput", throughput, http_pps), cpu_row("half load", half, paced_pps)],
        )
    )
    say("\n## Server resident memory (MB)\n")
    say(
        table(
            ["phase", "start", "peak", "end"],
            [rss.row(p) for p in ("idle", "throughput", "after throughput", "half load")]
            + [rss.row(None)],
        )
    )
    if busy_before > BUSY_BEFORE_NOTE:
        say(f"\nNOTE: the machine was {100 * busy_before:.0f} % busy before the run")
    if ran_out:
        say("NOTE: a sender used up its pre-built bodies before the deadline")
    say(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 1 if errors or paced_errors or ran_out else 0


if __name__ == "__main__":
    raise SystemExit(main())
