"""Soak: many simulated trainers for minutes against one real server, dashboard reads meanwhile.

Acceptance checked: "100 concurrent simulated trainers x 200 metrics x 5 steps/s for 10
minutes: no errors, flat memory, dashboard reads within 2x their idle latency."

What runs: a real ``normwatch serve --no-migrate`` process (``--workers N`` when given) on a
scratch Postgres database that the script creates, migrates and drops, with the shipped
compaction clock (``NORMWATCH_COMPACTION_MAX_AGE_S=300``, ``..._INTERVAL_S=5``; change
it with ``--compaction-max-age``): the compactor process moves every run's last five
minutes out of the hot ``blocks`` table twice during a 10-minute soak, each time for
all 100 runs at once.

Simulated trainers (``--trainers``, one run each) live in ``--load-processes`` spawned
processes, each one asyncio loop with one ``httpx.AsyncClient`` (one keep-alive
connection) a trainer, all built before the clock starts. A trainer "produces" step
``k`` at ``start + k / rate`` (``--rate`` steps/s, wall clock, starts staggered over one
flush interval) and, like the trainer client, every ``--flush-interval`` seconds sends every
produced step not sent yet as one columnar batch of ``--metrics`` metrics (orjson, gzip
level 1, ``Content-Encoding: gzip``) to ``POST /api/v1/runs/{id}/metrics``, one request in
flight per run. A slow answer makes the next batch bigger (at most ``max_batch_points`` of
the client, 50,000 points); 429/503/5xx and transport errors are retried after
``Retry-After`` or a jittered backoff, other 4xx drop the batch, as the client does. Each of
them counts as an error here. The generator records how late its timers fire and how far
behind production its deliveries are (the backlog), so a soak that could not keep its
offered load says so. The generator runs at nice 10 (``--generator-nice``): the trainers
it plays are jobs on other machines, whose CPU would not compete with the server's; here it
still gets all the CPU it needs while any is idle, and the backlog check says whether it
kept its schedule. ``--generator-nice 0`` runs it at the server's priority.

Before the load, every run gets ``--history`` steps of the two metrics the run page charts
(``grad/norm/total``, ``params/norm/final_norm.weight``) and its other metrics at the last
of those steps (so the soak does not start with registering 100 x 200 new metrics), and
the script waits until the compactor has compacted them (reporting how long that took and
the CPU it cost): dashboard reads then see the same kind of series (compacted chunks plus
a hot tail) idle and under load. The trainers continue those runs.

Dashboard reads (a thread of this process, every ``--read-interval`` seconds, run after run):
``GET /api/v1/runs/{id}/series?metric=grad/norm/total&metric=params/norm/final_norm.weight
&points=1000`` with a read token (the query behind the run page's chart), then the run
page's own chart: the Dash ``draw`` callback (``POST /_dash-update-component``) with the
dashboard's login cookie, which reads the same series and builds the full Plotly figure.
Baseline, in the same run: the same reads, idle, for ``--idle-seconds`` before the load
starts (and, for information, again after it drained). Ratio: soak / idle at p50 and p95.

Sampled every ``--sample-seconds``: the server's resident memory (VmRSS of its process
tree, ``/proc``), CPU seconds of the server, of this database's Postgres backends, of all
Postgres processes, of the load generator and of the machine, the hot table (live rows,
dead rows, size from ``pg_stat_user_tables``) and the compacted points (``sum(series.points)``).
At the end the stored points are counted exactly and compared with what was accepted.

PASS/FAIL: the load was sustained (the backlog stayed within three flush intervals over
the second half and everything was delivered); no errors (no non-2xx answer or exception
on ingest or reads, nothing given up, sent = accepted = stored); flat memory (least-squares
slope of the server's RSS over the second half at most ``--rss-slope-limit`` MB/min);
dashboard reads at most 2x idle at p50 and p95. The CPU table says how much of the
machine went to work that is not this soak (other databases, other processes): on a
shared machine it counts.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``, by default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, which must allow CREATE DATABASE)::

    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/soak.py --minutes 10   # acceptance
    .venv/bin/python benchmarks/soak.py --quick             # 1 minute, 20 trainers
    .venv/bin/python benchmarks/soak.py --minutes 5 --trainers 50 --metrics 200 --rate 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import math
import multiprocessing
import os
import queue
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import psycopg
from _harness import (
    make_tokens,
    percentile,
    process_cpu_seconds,
    process_tree,
    rss_bytes,
    say,
    scratch_postgres,
    table,
)
from ingest_http import machine_busy, metric_names
from storage import built, database

from normwatch.dashboard.pages.run_view import RunView
from normwatch.scratch import admin_dsn
from normwatch.testing import running_server

GRAD_TOTAL = "grad/norm/total"
FINAL_NORM = "params/norm/final_norm.weight"
CHART_METRICS = (GRAD_TOTAL, FINAL_NORM)
CHART_POINTS = 1000
CLIENT_MAX_BATCH_POINTS = 50_000  # the trainer client's default max_batch_points
HEADERS = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
READ_RATIO_LIMIT = 2.0
COMPACTION_MAX_AGE_S = "300"  # the shipped default: twice in a 10-minute soak
COMPACTION_INTERVAL_S = "5"
BACKLOG_INTERVALS = 3  # steady state: at most this many flush intervals of data not delivered
MB = 1024 * 1024
OTHER_WORK_NOTE = 0.2  # cores of unrelated work that make the run worth a note


# --- simulated trainers (runs in the load-generator processes) ----------------------------


@dataclass(frozen=True)
class LoadPlan:
    """What one load-generator process simulates."""

    url: str
    token: str
    run_ids: list[str]
    phases: list[float]  # start offset of each run within one flush interval
    metrics: int
    rate: float
    interval: float
    seconds: float
    first_step: int
    drain_s: float
    seed: int

    @property
    def steps_per_run(self) -> int:
        return int(self.seconds * self.rate)

    @property
    def max_batch_steps(self) -> int:
        return max(1, CLIENT_MAX_BATCH_POINTS // self.metrics)


@dataclass
class Trainer:
    """One simulated run: when its steps are produced and how many were delivered."""

    run_id: str
    start: float
    total: int
    posted: int = 0
    delivered: int = 0

    def produced(self, now: float, rate: float) -> int:
        return 0 if now < self.start else min(self.total, int((now - self.start) * rate) + 1)


@dataclass
class LoadStats:
    """What one load-generator process saw; sent back to the main process at the end."""

    requests: list[tuple[float, float, int]] = field(default_factory=list)  # done, ms, status
    freshness_ms: list[float] = field(default_factory=list)
    lateness_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    sent_points: int = 0
    accepted_points: int = 0
    dropped_points: int = 0

    def count(self, key: str) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1


def retry_delay(response: httpx.Response | None, attempt: int, rng: random.Random) -> float:
    """``Retry-After`` when the server sent one, else full-jitter backoff (as the client)."""
    if response is not None:
        try:
            return min(30.0, max(0.0, float(response.headers.get("retry-after", ""))))
        except ValueError:
            pass
    return rng.uniform(0.0, min(30.0, 0.5 * 2.0**attempt))


def batch_body(names: list[str], steps: list[int], values: np.ndarray[Any, Any]) -> bytes:
    """The client's wire format: ``{"steps": [...], "metrics": {name: [...]}}``, gzipped."""
    doc = orjson.dumps(
        {"steps": steps, "metrics": dict(zip(names, values, strict=True))},
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    return gzip.compress(doc, compresslevel=1, mtime=0)


async def deliver(
    client: httpx.AsyncClient,
    path: str,
    body: bytes,
    points: int,
    stats: LoadStats,
    give_up_at: float,
    rng: random.Random,
) -> bool:
    """POST one batch until it is accepted, dropped (a permanent 4xx) or time runs out."""
    stats.sent_points += points
    attempt = 0
    while True:
        t0 = time.monotonic()
        response: httpx.Response | None = None
        try:
            response = await client.post(path, content=body, headers=HEADERS)
            status = response.status_code
        except httpx.HTTPError as exc:
            status, key = 0, type(exc).__name__
        done = time.monotonic()
        stats.requests.append((done, (done - t0) * 1000, status))
        if status == 202 and response is not None:
            stats.accepted_points += int(response.json()["accepted"])
            return True
        stats.count(key if status == 0 else f"HTTP {status}")
        retryable = status in (0, 408, 429) or status >= 500
        if not retryable or done >= give_up_at:
            stats.dropped_points += points
            return False
        await asyncio.sleep(retry_delay(response, attempt, rng))
        attempt += 1


async def simulate(
    client: httpx.AsyncClient,
    plan: LoadPlan,
    trainer: Trainer,
    names: list[str],
    stats: LoadStats,
    rng: np.random.Generator,
) -> None:
    """One trainer: every flush interval, send what was produced since the last batch."""
    scale = rng.lognormal(-1.0, 0.5, size=(len(names), 1))
    jitter = random.Random(int(rng.integers(1 << 30)))
    path = f"/api/v1/runs/{trainer.run_id}/metrics"
    give_up_at = trainer.start + plan.seconds + plan.drain_s
    tick = trainer.start + plan.interval
    while trainer.posted < trainer.total and time.monotonic() < give_up_at:
        now = time.monotonic()
        if tick > now:
            await asyncio.sleep(tick - now)
            now = time.monotonic()
            stats.lateness_ms.append((now - tick) * 1000)
        count = min(trainer.produced(now, plan.rate) - trainer.posted, plan.max_batch_steps)
        if count > 0:
            k0 = trainer.posted
            steps = list(range(plan.first_step + k0, plan.first_step + k0 + count))
            values = scale * rng.lognormal(0.0, 0.05, size=(len(names), count))
            body = batch_body(names, steps, values)
            trainer.posted += count
            if await deliver(client, path, body, count * len(names), stats, give_up_at, jitter):
                trainer.delivered += count
                newest = trainer.start + (k0 + count - 1) / plan.rate
                stats.freshness_ms.append((time.monotonic() - newest) * 1000)
        tick = max(tick + plan.interval, time.monotonic())


async def drive(plan: LoadPlan, control: Any, progress: Any) -> LoadStats:
    """All of this process's trainers, and a progress report every second.

    Everything is set up before this process reports ready, so the trainers start on time.
    """
    names = soak_metric_names(plan.metrics)
    stats = LoadStats()
    seeds = np.random.SeedSequence(plan.seed).spawn(len(plan.run_ids))
    # One client (one keep-alive connection) a trainer, as separate training jobs have: a
    # shared pool would leave some connections idle past the server's keep-alive timeout.
    clients = [
        httpx.AsyncClient(
            base_url=plan.url, headers={"Authorization": f"Bearer {plan.token}"}, timeout=60.0
        )
        for _ in plan.run_ids
    ]
    progress.put({"kind": "ready", "pid": os.getpid()})
    start = float(await asyncio.get_running_loop().run_in_executor(None, control.get))
    trainers = [
        Trainer(run_id, start + phase, plan.steps_per_run)
        for run_id, phase in zip(plan.run_ids, plan.phases, strict=True)
    ]
    finished = asyncio.Event()

    def report() -> None:
        now = time.monotonic()
        backlog = [t.produced(now, plan.rate) - t.delivered for t in trainers]
        progress.put(
            {
                "kind": "progress",
                "pid": os.getpid(),
                "t": now,
                "accepted": stats.accepted_points,
                "sent": stats.sent_points,
                "requests": len(stats.requests),
                "errors": sum(stats.errors.values()),
                "backlog": sum(backlog),
                "backlog_max": max(backlog, default=0),
            }
        )

    async def all_trainers() -> None:
        try:  # a bug in the simulation raises here and must not pass as a quiet soak
            await asyncio.gather(
                *(
                    simulate(c, plan, t, names, stats, np.random.default_rng(seed))
                    for c, t, seed in zip(clients, trainers, seeds, strict=True)
                )
            )
        finally:
            finished.set()

    async def every_second() -> None:
        while not finished.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), timeout=1.0)
            report()

    try:
        await asyncio.gather(all_trainers(), every_second())
    finally:
        for client in clients:
            await client.aclose()
    return stats


def load_worker(plan: LoadPlan, control: Any, progress: Any) -> None:
    """Entry point of a load-generator process."""
    try:
        stats = asyncio.run(drive(plan, control, progress))
    except BaseException as exc:
        progress.put({"kind": "failed", "pid": os.getpid(), "error": repr(exc)})
        raise
    progress.put({"kind": "final", "pid": os.getpid(), "stats": stats})


def soak_metric_names(count: int) -> list[str]:
    """The two charted metrics, loss and update norm, then per-layer norms."""
    fixed = [GRAD_TOTAL, FINAL_NORM, "train/loss", "updates/norm/total"][:count]
    return fixed + metric_names(count - len(fixed))


# --- dashboard reads (a thread of the main process) ----------------------------------------


@dataclass(frozen=True)
class Read:
    at: float  # monotonic time the read finished
    kind: str  # "series" (the API) or "chart" (the run page's Dash callback)
    ms: float
    ok: bool


def chart_callback(run_id: str) -> dict[str, Any]:
    """The run page's ``draw`` callback as the browser posts it when the page opens."""
    view = RunView(run=run_id, left=GRAD_TOTAL, right=FINAL_NORM).to_store()
    outputs = [
        {"id": "overlay", "property": "figure"},
        {"id": "overlay-shape", "property": "data"},
        {"id": "range-info", "property": "children"},
        {"id": "event-list", "property": "children"},
    ]
    return {
        "output": "..overlay.figure...overlay-shape.data...range-info.children"
        "...event-list.children..",
        "outputs": outputs,
        "inputs": [
            {"id": "view", "property": "data", "value": view},
            {"id": "draw-tick", "property": "data", "value": None},
            {"id": "overlay-aids", "property": "data", "value": None},
        ],
        "state": [{"id": "overlay-shape", "property": "data", "value": None}],
        "changedPropIds": ["view.data"],
    }


class DashboardReader:
    """Reads what an open run page reads, run after run, at a steady pace."""

    def __init__(self, url: str, read_token: str, run_ids: list[str], interval: float) -> None:
        self.run_ids = run_ids
        self.interval = interval
        self.reads: list[Read] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._api = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {read_token}"}, timeout=60
        )
        self._page = httpx.Client(base_url=url, timeout=60)
        login = self._page.get("/login", params={"token": read_token})
        if login.status_code != 303 or not login.cookies:
            raise RuntimeError(f"dashboard login failed: HTTP {login.status_code}")
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self.check()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        self._api.close()
        self._page.close()

    def check(self) -> None:
        """One read of each kind that must return data, so a broken read cannot pass."""
        series = self._api.get(self._series_path(self.run_ids[0]), params=self._series_params())
        series.raise_for_status()
        got = series.json()["series"]
        if [s["metric"] for s in got] != list(CHART_METRICS) or not got[0]["steps"]:
            raise RuntimeError(f"series read returned no data: {series.text[:300]}")
        chart = self._page.post("/_dash-update-component", json=chart_callback(self.run_ids[0]))
        chart.raise_for_status()
        figure = chart.json()["response"]["overlay"]["figure"]
        if len(figure["data"]) != 2 or not figure["data"][0]["x"]:
            raise RuntimeError(f"chart callback drew no lines: {chart.text[:300]}")

    @staticmethod
    def _series_path(run_id: str) -> str:
        return f"/api/v1/runs/{run_id}/series"

    @staticmethod
    def _series_params() -> dict[str, list[str] | int]:
        return {"metric": list(CHART_METRICS), "points": CHART_POINTS}

    def _timed(self, kind: str, send: Any) -> None:
        t0 = time.monotonic()
        try:
            response = send()
            ok = response.status_code == 200
            if not ok:
                self.failures.append(f"{kind}: HTTP {response.status_code}")
        except httpx.HTTPError as exc:
            ok = False
            self.failures.append(f"{kind}: {type(exc).__name__}")
        done = time.monotonic()
        self.reads.append(Read(done, kind, (done - t0) * 1000, ok))

    def _loop(self) -> None:
        index = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            run_id = self.run_ids[index % len(self.run_ids)]
            index += 1
            self._timed(
                "series",
                partial(self._api.get, self._series_path(run_id), params=self._series_params()),
            )
            self._timed(
                "chart",
                partial(self._page.post, "/_dash-update-component", json=chart_callback(run_id)),
            )
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(next_at - time.monotonic())


# --- sampling the machine, the server and the database -------------------------------------


@dataclass(frozen=True)
class Sample:
    at: float
    server_rss: int
    load_rss: int
    server_cpu: float
    load_cpu: float
    own_cpu: float
    pg_db_cpu: float  # backends of the scratch database
    pg_all_cpu: float  # every Postgres process, including other databases' backends
    busy: float
    total: float
    hot_rows: int
    dead_rows: int
    hot_bytes: int
    compacted: int
    rss_by_role: dict[str, int] = field(default_factory=dict)
    """The server's RSS by process role: ``serve``, ``compactor``, ``worker 1``, ..."""


@dataclass(frozen=True)
class Progress:
    """The load generators' totals at one instant."""

    at: float
    accepted: int
    requests: int
    errors: int
    backlog: int
    backlog_max: int


def postgres_pids() -> tuple[list[int], int | None]:
    """Every process named ``postgres`` and the postmaster among them (Linux ``/proc``)."""
    pids: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            pids[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    roots = [pid for pid, parent in pids.items() if parent not in pids]
    return list(pids), (min(roots) if roots else None)


class Sampler:
    """Takes a `Sample` on demand; collects the load generators' progress in between."""

    def __init__(self, database_url: str, server_pid: int, progress: Any) -> None:
        self.server_pid = server_pid
        self.progress_queue = progress
        self.load_pids: list[int] = []
        self.samples: list[Sample] = []
        self.progress: list[Progress] = []
        self.finals: dict[int, LoadStats] = {}
        self.failures: list[str] = []
        self._latest: dict[int, dict[str, Any]] = {}
        self._conn = psycopg.connect(admin_dsn(database_url), autocommit=True)
        self._own_backend = self._scalar("SELECT pg_backend_pid()")
        self._backend_cpu: dict[int, float] = {}
        self._pg_db_cpu = 0.0

    def close(self) -> None:
        self._conn.close()

    def _scalar(self, sql: str) -> int:
        row = self._conn.execute(sql).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def drain(self, block_s: float = 0.0) -> None:
        """Take the load generators' messages waiting in the queue."""
        deadline = time.monotonic() + block_s
        while True:
            try:
                message = self.progress_queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            pid = int(message["pid"])
            kind = message["kind"]
            if kind == "ready":
                self.load_pids.append(pid)
            elif kind == "failed":
                self.failures.append(f"load generator {pid}: {message['error']}")
            elif kind == "final":
                self.finals[pid] = message["stats"]
            else:
                self._latest[pid] = message
                latest = self._latest.values()
                self.progress.append(
                    Progress(
                        at=float(message["t"]),
                        accepted=sum(int(m["accepted"]) for m in latest),
                        requests=sum(int(m["requests"]) for m in latest),
                        errors=sum(int(m["errors"]) for m in latest),
                        backlog=sum(int(m["backlog"]) for m in latest),
                        backlog_max=max(int(m["backlog_max"]) for m in latest),
                    )
                )

    def _pg_cpu(self) -> tuple[float, float]:
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> %s",
            (self._own_backend,),
        ).fetchall()
        for (pid,) in rows:
            now = process_cpu_seconds(int(pid))
            self._pg_db_cpu += max(0.0, now - self._backend_cpu.get(int(pid), 0.0))
            self._backend_cpu[int(pid)] = now
        pids, postmaster = postgres_pids()
        total = sum(process_cpu_seconds(pid) for pid in pids)
        if postmaster is not None:  # backends that exited are reaped by the postmaster
            total += process_cpu_seconds(postmaster, reaped_children=True) - process_cpu_seconds(
                postmaster
            )
        return self._pg_db_cpu, total

    def take(self) -> Sample:
        self.drain()
        server = process_tree(self.server_pid)
        load = [pid for root in self.load_pids for pid in process_tree(root)]
        pg_db, pg_all = self._pg_cpu()
        busy, total = machine_busy()
        row = self._conn.execute(
            "SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid) "
            "FROM pg_stat_user_tables WHERE relname = 'blocks'"
        ).fetchone()
        live, dead, size = row if row is not None else (0, 0, 0)
        sample = Sample(
            at=time.monotonic(),
            server_rss=sum(rss_bytes(pid) for pid in server),
            rss_by_role=rss_by_role(server),
            load_rss=sum(rss_bytes(pid) for pid in load),
            server_cpu=sum(process_cpu_seconds(pid) for pid in server),
            load_cpu=sum(process_cpu_seconds(pid) for pid in load),
            own_cpu=time.process_time(),
            pg_db_cpu=pg_db,
            pg_all_cpu=pg_all,
            busy=busy,
            total=total,
            hot_rows=int(live),
            dead_rows=int(dead),
            hot_bytes=int(size),
            compacted=self._scalar("SELECT sum(points) FROM series"),
        )
        self.samples.append(sample)
        return sample

    def stored_points(self) -> tuple[int, int]:
        """Exact (hot rows, compacted points), read in one snapshot."""
        with self._conn.transaction():
            self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            hot = self._scalar("SELECT coalesce(sum(count), 0) FROM blocks")
            compacted = self._scalar("SELECT sum(points) FROM series")
        return hot, compacted

    def wait_compacted(self, timeout: float) -> bool:
        """Wait until the hot table is empty (the compactor caught up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._scalar("SELECT count(*) FROM blocks") == 0:
                return True
            time.sleep(1.0)
        return False


def at_or_before(items: list[Any], t: float) -> Any:
    """The last item (with an ``at``) at or before ``t``; the first one if none is."""
    found = items[0]
    for item in items:
        if item.at > t:
            break
        found = item
    return found


def rss_by_role(pids: list[int]) -> dict[str, int]:
    """RSS of each server process by what it does (its command line says)."""
    out: dict[str, int] = {}
    workers = 0
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b" compact " in command:
            role = "compactor"
        elif b"resource_tracker" in command:
            role = "resource tracker"
        elif b"multiprocessing" in command:
            workers += 1
            role = f"worker {workers}"
        else:
            role = "serve"
        out[role] = out.get(role, 0) + rss_bytes(pid)
    return out


def rss_slope_mb_per_min(samples: list[Sample]) -> float:
    """Least-squares slope of the server's RSS over ``samples``, in MB per minute."""
    if len(samples) < 2:
        return float("nan")
    t = np.array([s.at for s in samples]) / 60.0
    rss = np.array([s.server_rss for s in samples]) / MB
    return float(np.polyfit(t - t[0], rss, 1)[0])


# --- setting up ----------------------------------------------------------------------------


def create_runs(url: str, token: str, count: int) -> list[str]:
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        ids = []
        for i in range(count):
            response = api.post("/api/v1/runs", json={"name": f"trainer-{i:03d}", "start_step": 0})
            response.raise_for_status()
            ids.append(str(response.json()["id"]))
    return ids


def prefill(url: str, token: str, run_ids: list[str], steps: int, metrics: int, seed: int) -> int:
    """History for every run; returns the points stored.

    ``steps`` steps of the two charted metrics, and the run's other metrics at its last
    step only, so the soak measures a steady state rather than the registration of 100 x
    ``metrics`` new metrics in its first second.
    """
    rng = np.random.default_rng(seed)
    xs = np.arange(steps)
    others = soak_metric_names(metrics)[len(CHART_METRICS) :]
    points = 0
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
    ) as api:
        for i, run_id in enumerate(run_ids):
            grad = 0.3 * rng.lognormal(0.0, 0.05, size=steps)
            grad[rng.integers(steps)] *= 10.0  # one spike, as a real run has
            final = 78.0 + 0.002 * xs + rng.normal(0.0, 0.05, size=steps)
            bodies = [batch_body(list(CHART_METRICS), xs.tolist(), np.stack([grad, final]))]
            if others:
                last = rng.lognormal(-1.0, 0.5, size=(len(others), 1))
                bodies.append(batch_body(others, [steps - 1], last))
            for body in bodies:
                response = api.post(f"/api/v1/runs/{run_id}/metrics", content=body, headers=HEADERS)
                if response.status_code != 202:
                    raise RuntimeError(f"history of {run_id}: HTTP {response.status_code}")
                points += int(response.json()["accepted"])
            if (i + 1) % max(1, len(run_ids) // 4) == 0:
                say(f"  history: {i + 1}/{len(run_ids)} runs, {points:,} points")
    return points


# --- reporting -----------------------------------------------------------------------------


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q):,.0f}" if values else "-"


def cores_used(a: Sample, b: Sample, attr: str) -> float:
    wall = b.at - a.at
    return (getattr(b, attr) - getattr(a, attr)) / wall if wall > 0 else float("nan")


def machine_cores(a: Sample, b: Sample) -> float:
    cores = os.cpu_count() or 1
    return cores * (b.busy - a.busy) / max(1e-9, b.total - a.total)


def read_stats(reads: list[Read], kind: str, a: float, b: float) -> list[float]:
    return sorted(r.ms for r in reads if r.kind == kind and a <= r.at < b)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    text: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.text}"


# --- the soak ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=None, help="soak length (10)")
    parser.add_argument(
        "--compaction-max-age",
        default=COMPACTION_MAX_AGE_S,
        help=f"NORMWATCH_COMPACTION_MAX_AGE_S of the server ({COMPACTION_MAX_AGE_S})",
    )
    parser.add_argument("--quick", action="store_true", help="1 minute, 20 trainers")
    parser.add_argument("--trainers", type=int, default=None, help="simulated runs (100)")
    parser.add_argument("--metrics", type=int, default=200, help="metrics a step (200)")
    parser.add_argument("--rate", type=float, default=5.0, help="steps/s a trainer (5)")
    parser.add_argument("--flush-interval", type=float, default=1.0, help="seconds (1)")
    parser.add_argument("--history", type=int, default=None, help="steps before (20000)")
    parser.add_argument("--idle-seconds", type=float, default=None, help="idle reads (60)")
    parser.add_argument("--read-interval", type=float, default=0.5, help="seconds (0.5)")
    parser.add_argument("--sample-seconds", type=float, default=5.0, help="seconds (5)")
    parser.add_argument("--load-processes", type=int, default=1, help="generator processes")
    parser.add_argument(
        "--generator-nice",
        type=int,
        default=10,
        help="CPU niceness of the load generator (10; 0: the server's own priority)",
    )
    parser.add_argument("--workers", type=int, default=None, help="normwatch serve --workers")
    parser.add_argument(
        "--server-at",
        metavar="REV",
        help="run the server of an earlier commit (built into a temporary folder), on a "
        "database migrated by it",
    )
    parser.add_argument("--drain-seconds", type=float, default=60.0, help="after the soak")
    parser.add_argument("--rss-slope-limit", type=float, default=1.0, help="MB/min (1.0)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.minutes = args.minutes or (1.0 if args.quick else 10.0)
    args.trainers = args.trainers or (20 if args.quick else 100)
    args.history = args.history if args.history is not None else (5000 if args.quick else 20000)
    args.idle_seconds = args.idle_seconds or (20.0 if args.quick else 60.0)
    if args.history < 1 or args.metrics < len(CHART_METRICS) or args.trainers < 1:
        parser.error("need --history >= 1, --metrics >= 2 and --trainers >= 1")
    return args


def plans(
    args: argparse.Namespace, url: str, token: str, run_ids: list[str], seconds: float
) -> list[LoadPlan]:
    """The trainers dealt out to the load-generator processes, starts staggered evenly."""
    count = max(1, min(args.load_processes, len(run_ids)))
    phases = [args.flush_interval * i / len(run_ids) for i in range(len(run_ids))]
    return [
        LoadPlan(
            url=url,
            token=token,
            run_ids=run_ids[p::count],
            phases=phases[p::count],
            metrics=args.metrics,
            rate=args.rate,
            interval=args.flush_interval,
            seconds=seconds,
            first_step=args.history,
            drain_s=args.drain_seconds,
            seed=args.seed * 1000 + p,
        )
        for p in range(count)
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = args.minutes * 60.0
    offered_pps = args.trainers * args.metrics * args.rate
    say(
        f"soak: {args.trainers} trainers x {args.metrics} metrics x {args.rate:g} steps/s "
        f"= {offered_pps:,.0f} points/s offered for {seconds / 60:g} min, batches every "
        f"{args.flush_interval:g} s; server workers: {args.workers or 1}"
    )
    started = time.monotonic()
    mp = multiprocessing.get_context("spawn")
    progress_queue = mp.Queue()
    processes: list[Any] = []
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        if args.server_at:
            # The server (and its database's schema) of another commit; the trainers and
            # reads are this tree's.
            lib = stack.enter_context(built(args.server_at))
            env = {"PYTHONPATH": str(lib), "PYTHONSAFEPATH": "1"}
            url = stack.enter_context(database(False, env))
        else:
            url = stack.enter_context(scratch_postgres("normwatch_bench_soak"))
        logs = stack.enter_context(tempfile.TemporaryDirectory(prefix="normwatch-bench-"))
        server = stack.enter_context(
            running_server(
                url,
                Path(logs),
                workers=args.workers,
                NORMWATCH_COMPACTION_MAX_AGE_S=str(args.compaction_max_age),
                NORMWATCH_COMPACTION_INTERVAL_S=COMPACTION_INTERVAL_S,
                **env,
            )
        )
        return _soak(args, url, server, started, mp, progress_queue, processes, seconds)


def _soak(
    args: argparse.Namespace,
    url: str,
    server: Any,
    started: float,
    mp: Any,
    progress_queue: Any,
    processes: list[Any],
    seconds: float,
) -> int:
    ingest, read = make_tokens(url, "soak", "ingest", "read")
    run_ids = create_runs(server.url, ingest, args.trainers)
    say(
        f"history: {args.history:,} steps of the {len(CHART_METRICS)} charted metrics, "
        f"{args.metrics - len(CHART_METRICS)} more at its last step, in every run"
    )
    prefill_points = prefill(server.url, ingest, run_ids, args.history, args.metrics, args.seed)
    sampler = Sampler(url, server.process.pid, progress_queue)
    reader: DashboardReader | None = None
    try:
        say("waiting for the compactor to compact the history")
        a = sampler.take()
        if not sampler.wait_compacted(600.0):
            raise RuntimeError("the history was not compacted within 600 s")
        b = sampler.take()
        say(
            f"  {prefill_points:,} points of {args.trainers * args.metrics:,} series "
            f"compacted in {b.at - a.at:.0f} s; CPU s: server {b.server_cpu - a.server_cpu:.1f}"
            f", Postgres (this database) {b.pg_db_cpu - a.pg_db_cpu:.1f}, whole machine "
            f"{b.busy - a.busy:.1f}"
        )

        load_plans = plans(args, server.url, ingest, run_ids, seconds)
        controls = [mp.Queue() for _ in load_plans]
        for plan, control in zip(load_plans, controls, strict=True):
            process = mp.Process(
                target=load_worker, args=(plan, control, progress_queue), daemon=True
            )
            process.start()
            if args.generator_nice:
                os.setpriority(os.PRIO_PROCESS, process.pid, args.generator_nice)
            processes.append(process)
        ready_by = time.monotonic() + 120
        while len(sampler.load_pids) < len(processes) and time.monotonic() < ready_by:
            sampler.drain(block_s=1.0)
        if len(sampler.load_pids) < len(processes):
            raise RuntimeError("the load generator processes did not start")

        reader = DashboardReader(server.url, read, run_ids, args.read_interval)
        reader.start()
        say(f"idle dashboard reads for {args.idle_seconds:g} s (baseline)")
        t_idle = time.monotonic()
        sampler.take()
        while time.monotonic() < t_idle + args.idle_seconds:
            sampler.drain(
                block_s=min(args.sample_seconds, t_idle + args.idle_seconds - time.monotonic())
            )
            if time.monotonic() >= sampler.samples[-1].at + args.sample_seconds:
                sampler.take()

        t0 = time.monotonic() + 0.2
        for control in controls:
            control.put(t0)
        soak_end = t0 + seconds
        give_up = soak_end + args.drain_seconds + 120
        say(f"soak: {seconds:g} s of load")
        sampler.take()
        next_sample = t0 + args.sample_seconds
        print_every = 15.0 if seconds >= 300 else 5.0
        next_print = t0 + print_every
        while len(sampler.finals) + len(sampler.failures) < len(processes):
            if time.monotonic() > give_up:
                raise RuntimeError("the load generators did not finish")
            sampler.drain(block_s=max(0.0, min(next_sample, next_print) - time.monotonic()))
            now = time.monotonic()
            if now >= next_sample:
                sampler.take()
                next_sample += args.sample_seconds
            if now >= next_print and sampler.progress:
                next_print = max(next_print + print_every, now)
                say(progress_line(sampler, reader, t0, print_every))
        t_done = time.monotonic()
        sampler.take()
        idle_after = min(args.idle_seconds, 30.0)
        say(
            f"load drained {t_done - soak_end:.1f} s after the soak; idle reads for "
            f"{idle_after:g} s"
        )
        t_after = time.monotonic()
        while time.monotonic() < t_after + idle_after:
            time.sleep(min(args.sample_seconds, t_after + idle_after - time.monotonic()))
            sampler.take()
        reader.stop()
        reads = list(reader.reads)
        read_failures = list(reader.failures)
        reader = None
        hot, compacted = sampler.stored_points()
    finally:
        if reader is not None:
            reader.stop()
        sampler.close()
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
    server_log_tail = server.log()[-2000:]

    say(f"\ntotal wall time {time.monotonic() - started:.0f} s")
    return report(
        args,
        sampler,
        reads,
        read_failures,
        t_idle=t_idle,
        t0=t0,
        t_done=t_done,
        t_after=t_after,
        idle_after=idle_after,
        prefill_points=prefill_points,
        stored=hot + compacted - prefill_points,
        server_log_tail=server_log_tail,
    )


def progress_line(sampler: Sampler, reader: DashboardReader, t0: float, window: float) -> str:
    now = time.monotonic()
    last = sampler.progress[-1]
    earlier = at_or_before(sampler.progress, now - window)
    rate = (last.accepted - earlier.accepted) / max(1e-9, last.at - earlier.at)
    sample = sampler.samples[-1]
    recent = read_stats(list(reader.reads), "series", now - window, now)
    return (
        f"  {now - t0:5.0f} s: {rate:>9,.0f} pts/s, backlog {last.backlog:>5} steps "
        f"(max run {last.backlog_max}), {last.errors} errors, RSS "
        f"{sample.server_rss / MB:,.0f} MB, hot {sample.hot_rows:>10,} rows, compacted "
        f"{sample.compacted:>12,}, series read p50 {ms(recent, 50)} ms"
    )


def report(
    args: argparse.Namespace,
    sampler: Sampler,
    reads: list[Read],
    read_failures: list[str],
    *,
    t_idle: float,
    t0: float,
    t_done: float,
    t_after: float,
    idle_after: float,
    prefill_points: int,
    stored: int,
    server_log_tail: str,
) -> int:
    seconds = args.minutes * 60.0
    soak_end = t0 + seconds
    trainers, metrics, rate, interval = args.trainers, args.metrics, args.rate, args.flush_interval
    offered_pps = trainers * metrics * rate
    finals = list(sampler.finals.values())
    samples, progress = sampler.samples, sampler.progress

    requests = sorted((r for s in finals for r in s.requests), key=lambda r: r[0])
    in_soak = [r for r in requests if t0 <= r[0] < soak_end]
    latency = sorted(r[1] for r in in_soak)
    freshness = sorted(x for s in finals for x in s.freshness_ms)
    lateness = sorted(x for s in finals for x in s.lateness_ms)
    errors: dict[str, int] = {}
    for s in finals:
        for key, n in s.errors.items():
            errors[key] = errors.get(key, 0) + n
    offered = trainers * int(seconds * rate) * metrics
    sent = sum(s.sent_points for s in finals)
    accepted = sum(s.accepted_points for s in finals)
    dropped = sum(s.dropped_points for s in finals)
    p_start, p_end = at_or_before(progress, t0), at_or_before(progress, soak_end)
    soak_pps = (p_end.accepted - p_start.accepted) / max(1e-9, p_end.at - p_start.at)
    second_half = [p for p in progress if t0 + seconds / 2 <= p.at <= soak_end]
    backlog_limit = int(trainers * BACKLOG_INTERVALS * interval * rate)
    backlog_peak = max((p.backlog for p in second_half), default=0)
    backlog_run_peak = max((p.backlog_max for p in progress if t0 <= p.at <= soak_end), default=0)

    say(
        f"\n## Soak: {trainers} trainers x {metrics} metrics x {rate:g} steps/s, "
        f"{seconds / 60:g} min, server workers {args.workers or 1}\n"
    )
    say(
        table(
            ["load", "value"],
            [
                ["offered (points/s)", f"{offered_pps:,.0f}"],
                ["accepted during the soak (points/s)", f"{soak_pps:,.0f}"],
                [
                    "offered / sent / accepted / stored points",
                    f"{offered:,} / {sent:,} / {accepted:,} / {stored:,}",
                ],
                [
                    "requests in the soak (req/s)",
                    f"{len(in_soak):,} ({len(in_soak) / seconds:.1f})",
                ],
                [
                    "ingest latency p50 / p95 / p99 / max (ms)",
                    " / ".join(ms(latency, q) for q in (50, 95, 99, 100)),
                ],
                [
                    "backlog, second half: peak of all runs (limit) (steps)",
                    f"{backlog_peak:,} ({backlog_limit:,})",
                ],
                ["backlog, one run, peak (steps)", f"{backlog_run_peak:,}"],
                [
                    "data age when accepted p50 / p95 / max (ms)",
                    " / ".join(ms(freshness, q) for q in (50, 95, 100)),
                ],
                [
                    "generator timers late p50 / p99 / max (ms)",
                    " / ".join(ms(lateness, q) for q in (50, 99, 100)),
                ],
                ["drained after the soak (s)", f"{t_done - soak_end:.1f}"],
                ["ingest errors", ", ".join(f"{k} x{n}" for k, n in errors.items()) or "0"],
                ["points dropped by the generator", f"{dropped:,}"],
            ],
        )
    )

    idle_end = t0
    rows = []
    ratios: list[float] = []
    for kind, label in (
        ("series", "series API, 2 metrics, points=1000"),
        ("chart", "run page chart (Dash draw callback)"),
    ):
        idle = read_stats(reads, kind, t_idle, idle_end)
        soak = read_stats(reads, kind, t0, soak_end)
        after = read_stats(reads, kind, t_after, t_after + idle_after)
        pair = [percentile(soak, q) / percentile(idle, q) for q in (50, 95)]
        ratios += pair
        rows.append(
            [
                label,
                f"{ms(idle, 50)} / {ms(idle, 95)}",
                f"{ms(soak, 50)} / {ms(soak, 95)}",
                f"**{pair[0]:.2f} / {pair[1]:.2f}**",
                f"{ms(after, 50)} / {ms(after, 95)}",
                f"{len(idle)} / {len(soak)} / {len(after)}",
            ]
        )
    say("")
    say(
        table(
            [
                "dashboard read",
                "idle p50 / p95 (ms)",
                "soak p50 / p95 (ms)",
                "ratio p50 / p95",
                "idle after p50 / p95 (ms)",
                "reads idle / soak / after",
            ],
            rows,
        )
    )

    before = at_or_before(samples, t0)
    warm = at_or_before(samples, t0 + min(60.0, 0.2 * seconds))
    end = at_or_before(samples, soak_end + 0.5)
    loaded = [s for s in samples if t0 <= s.at <= soak_end + 0.5]
    half = [s for s in loaded if s.at >= t0 + seconds / 2]
    slope = rss_slope_mb_per_min(half)
    peak = max(loaded, key=lambda s: s.server_rss)
    say("")
    say(
        table(
            ["server memory (RSS)", "value"],
            [
                ["before the load (MB)", f"{before.server_rss / MB:,.1f}"],
                [f"after warm-up, {warm.at - t0:.0f} s (MB)", f"{warm.server_rss / MB:,.1f}"],
                [f"peak, at {peak.at - t0:.0f} s (MB)", f"{peak.server_rss / MB:,.1f}"],
                ["end of the soak (MB)", f"{end.server_rss / MB:,.1f}"],
                ["after the idle reads (MB)", f"{samples[-1].server_rss / MB:,.1f}"],
                ["slope over the second half (MB/min)", f"**{slope:+.2f}**"],
                ["load generator RSS at the end (MB)", f"{end.load_rss / MB:,.1f}"],
            ],
        )
    )
    mid = at_or_before(samples, t0 + seconds / 2)
    roles = sorted(set(warm.rss_by_role) | set(end.rss_by_role))
    say("")
    say(
        table(
            ["server process", "RSS after warm-up (MB)", "at half time (MB)", "at the end (MB)"],
            [
                [role] + [f"{s.rss_by_role.get(role, 0) / MB:,.1f}" for s in (warm, mid, end)]
                for role in roles
            ],
        )
    )

    start = at_or_before(samples, t0 + 0.5)
    ours = ("server_cpu", "pg_db_cpu", "load_cpu", "own_cpu")
    pg_other = cores_used(start, end, "pg_all_cpu") - cores_used(start, end, "pg_db_cpu")
    elsewhere = machine_cores(start, end) - pg_other - sum(cores_used(start, end, a) for a in ours)
    say("")
    say(
        table(
            ["CPU during the soak", "cores (of " + str(os.cpu_count()) + ")"],
            [
                [
                    "server process" + ("es" if (args.workers or 1) > 1 else ""),
                    f"{cores_used(start, end, 'server_cpu'):.2f}",
                ],
                [
                    "Postgres, this database's backends",
                    f"{cores_used(start, end, 'pg_db_cpu'):.2f}",
                ],
                ["Postgres, other databases and shared processes", f"{pg_other:.2f}"],
                ["load generator", f"{cores_used(start, end, 'load_cpu'):.2f}"],
                ["this script (reads, sampling)", f"{cores_used(start, end, 'own_cpu'):.2f}"],
                ["everything else on the machine", f"{elsewhere:.2f}"],
                ["whole machine", f"{machine_cores(start, end):.2f}"],
            ],
        )
    )
    if pg_other + elsewhere > OTHER_WORK_NOTE:
        say(
            f"NOTE: {pg_other + elsewhere:.2f} cores went to work that is not this soak "
            "(other databases, other processes); the numbers above are for a shared machine"
        )

    windows = 10 if seconds >= 300 else 6
    rows = []
    for w in range(windows):
        a, b = t0 + seconds * w / windows, t0 + seconds * (w + 1) / windows
        pa, pb = at_or_before(progress, a), at_or_before(progress, b)
        sa, sb = at_or_before(samples, a + 0.5), at_or_before(samples, b + 0.5)
        window_lat = sorted(r[1] for r in requests if a <= r[0] < b)
        series = read_stats(reads, "series", a, b)
        chart = read_stats(reads, "chart", a, b)
        rows.append(
            [
                f"{a - t0:.0f}-{b - t0:.0f}",
                f"{(pb.accepted - pa.accepted) / max(1e-9, pb.at - pa.at):,.0f}",
                f"{max((p.backlog for p in progress if a <= p.at < b), default=0):,}",
                f"{ms(window_lat, 50)} / {ms(window_lat, 95)}",
                f"{ms(series, 50)} / {ms(series, 95)}",
                f"{ms(chart, 50)} / {ms(chart, 95)}",
                f"{sb.server_rss / MB:,.0f}",
                f"{sb.hot_rows:,}",
                f"{sb.compacted:,}",
                f"{sb.hot_bytes / MB:,.0f}",
                f"{cores_used(sa, sb, 'server_cpu'):.2f} / {cores_used(sa, sb, 'pg_db_cpu'):.2f}"
                f" / {cores_used(sa, sb, 'load_cpu'):.2f} / {machine_cores(sa, sb):.2f}",
            ]
        )
    say("")
    say(
        table(
            [
                "s",
                "accepted pts/s",
                "backlog peak",
                "ingest p50/p95 ms",
                "series p50/p95 ms",
                "chart p50/p95 ms",
                "RSS MB",
                "hot rows",
                "compacted pts",
                "hot table MB",
                "cores: server / pg / gen / all",
            ],
            rows,
        )
    )

    compacted_in_soak = end.compacted - before.compacted
    say(
        f"\ncompaction: {compacted_in_soak:,} points compacted during the soak "
        f"({compacted_in_soak / seconds:,.0f} points/s against {soak_pps:,.0f} accepted); hot "
        f"rows peak {max(s.hot_rows for s in loaded):,}, {end.hot_rows:,} at its end (live rows "
        f"from pg_stat_user_tables), hot table {end.hot_bytes / MB:,.0f} MB with its indexes; "
        f"history {prefill_points:,} points"
    )
    if sampler.failures:
        say("load generator failures: " + "; ".join(sampler.failures))
    if read_failures:
        say(f"read failures ({len(read_failures)}): " + "; ".join(read_failures[:10]))
    if errors or read_failures:
        say("server log tail:\n" + server_log_tail)

    drained = sent == offered and not sampler.failures
    no_errors = not errors and not read_failures and dropped == 0 and sent == accepted == stored
    verdicts = [
        Verdict(
            backlog_peak <= backlog_limit and drained,
            f"load sustained: {soak_pps:,.0f} of {offered_pps:,.0f} points/s accepted, "
            f"backlog peak {backlog_peak:,} steps in the second half (limit {backlog_limit:,}), "
            f"{'everything' if drained else 'NOT everything'} sent",
        ),
        Verdict(
            no_errors,
            f"no errors: {sum(errors.values())} ingest errors, {len(read_failures)} read "
            f"errors; points sent {sent:,}, accepted {accepted:,}, stored {stored:,}, given up "
            f"after retries {dropped:,}",
        ),
        Verdict(
            not math.isnan(slope) and slope <= args.rss_slope_limit,
            f"flat memory: server RSS slope {slope:+.2f} MB/min over the second half "
            f"(limit {args.rss_slope_limit:g}); {warm.server_rss / MB:,.0f} MB after warm-up, "
            f"{end.server_rss / MB:,.0f} MB at the end",
        ),
        Verdict(
            all(r <= READ_RATIO_LIMIT for r in ratios),
            "dashboard reads within 2x idle: ratios p50/p95 series "
            f"{ratios[0]:.2f}/{ratios[1]:.2f}, chart {ratios[2]:.2f}/{ratios[3]:.2f}",
        ),
    ]
    say("")
    for verdict in verdicts:
        say(verdict.line())
    if not verdicts[0].ok:
        say(
            f"(the load was not sustained: the other points were measured at the "
            f"{soak_pps:,.0f} points/s the server actually took)"
        )
    return 0 if all(v.ok for v in verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
