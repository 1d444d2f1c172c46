"""Small requests, normwatch beside MLflow: how fast each server takes metric points when every
request carries 1,000 of them (MLflow's limit for one ``log-batch``), and the server CPU a
request costs.

What runs, one system after the other (never both at once, so that neither competes with the
other for the cores):

* **normwatch**: a real ``normwatch serve`` process (one uvicorn worker, default settings but
  ``NORMWATCH_COMPACTION_IDLE_S=5`` and ``NORMWATCH_COMPACTION_INTERVAL_S=1``) on a scratch
  Postgres database that the script creates, migrates and drops. Runs are made with
  ``POST /api/v1/runs``; batches go to ``POST /api/v1/runs/{id}/metrics`` in the columnar
  format ``{"steps": [...], "metrics": {name: [values...]}}`` with an ingest token.
* **MLflow**: a real tracking server from its own virtual environment,
  ``benchmarks/peers/.venv-mlflow`` (made on first use from ``requirements-mlflow.txt``,
  reused afterwards), started as::

      .venv-mlflow/bin/mlflow server \\
          --backend-store-uri postgresql+psycopg2://postgres@127.0.0.1:5432/<scratch> \\
          --host 127.0.0.1 --port <free port> --workers 1

  on a scratch Postgres database of its own, created empty for the run (MLflow makes its
  tables at start) and dropped afterwards (``+psycopg2``: the SQLAlchemy 2.1 that MLflow
  brings would open a bare ``postgresql://`` with psycopg 3, which is not installed); should
  the server not come up on Postgres, on a SQLite file instead, and the output says so. One
  experiment and the runs are made with ``POST /api/2.0/mlflow/experiments/create`` and
  ``/runs/create``; batches go to ``POST /api/2.0/mlflow/runs/log-batch`` as
  ``{"run_id": ..., "metrics": [{"key", "value", "timestamp", "step"}, ...]}``.

**Request shape**, the same for both: 10 consecutive steps x 100 metric keys = 1,000 points a
request, the same keys and the same values (eight blocks of random values in turn), plain
JSON, no compression. By default normwatch is also run a second time with the same bodies
gzip-compressed (level 1, ``Content-Encoding: gzip``), as its trainer client sends them;
``--no-gzip`` leaves that out.

**Load.** ``--senders`` threads (4), each on a run of its own and on its own keep-alive
``httpx`` connection, post back to back for ``--seconds`` (20). A body is put together from
pre-rendered pieces (only the step numbers change), outside the timed part of a request; the
gzip bodies are compressed before the clock starts. One untimed request per run goes first.
A request answered with anything but 2xx (or, on normwatch, accepting fewer than its 1,000
points) is an error.

**CPU.** User + system CPU seconds, from ``/proc``, before and after each phase: of the
server's whole process tree, of the Postgres processes working for its database (backends
and the shared ones: WAL writer, checkpointer...), and of this process (the senders). Each
is divided by the requests of the phase: "CPU ms a request". MLflow's tree holds, besides
its uvicorn worker, the job runner and huey consumers that ``mlflow server`` starts by
default (idle once started); each phase starts only when the server's tree has gone idle.
normwatch keeps newly taken points "hot" and compacts them in the background; the script
waits until its compactor has taken in every hot point and reports the server and Postgres
CPU *including* that work as well. MLflow writes its rows at once, so its two numbers are
the same measurement.

**Before and after.** ``--before REV`` first measures the normwatch server of commit ``REV``
(built into a temporary folder, on a scratch database its own tree migrated) with the same
bodies, so that a change is measured against its starting point in one run.

**Check.** After each phase, every point sent must be stored: the script counts the rows
(MLflow's ``metrics`` table; normwatch's hot and compacted points) and reads one key of
every run back through each system's API (MLflow ``GET /api/2.0/mlflow/metrics/get-history``,
normwatch ``GET /api/v1/runs/{id}/series``), which must hold every step sent and the last
value (on normwatch to float32 precision, as its compacted chunks keep values by default). A
failed check makes the exit status 1.

Client, servers and Postgres share the machine; on a 2-core one the senders' Python takes a
good part of a core, so rates are lower than the server alone would allow. Compare the ratio
and the CPU a request; the absolute rates move with the hardware.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``, by default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, which must allow CREATE DATABASE)::

    .venv/bin/python benchmarks/peers/small_requests.py --seconds 20   # ~2.5 min
    .venv/bin/python benchmarks/peers/small_requests.py --quick        # 5 s a phase
    .venv/bin/python benchmarks/peers/small_requests.py --only mlflow --senders 8

Output: one row a system, with requests/s, points/s, latency p50/p99, errors, server and
Postgres CPU ms a request, then normwatch points/s / MLflow points/s (above 1: normwatch takes
more points a second) and MLflow server CPU a request / normwatch server CPU a request.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/, for _harness

from _harness import (  # noqa: E402
    base_pg_url,
    make_tokens,
    percentile,
    process_cpu_seconds,
    process_tree,
    say,
    scratch_postgres,
    table,
)
from storage import built, database  # noqa: E402

from normwatch.scratch import admin_dsn, create_database, drop_database  # noqa: E402
from normwatch.testing import free_port, running_server, wait_healthy  # noqa: E402

HERE = Path(__file__).resolve().parent
MLFLOW_VENV = HERE / ".venv-mlflow"
MLFLOW_REQUIREMENTS = HERE / "requirements-mlflow.txt"
STEPS = 10
KEYS = 100
POINTS = STEPS * KEYS  # MLflow's MAX_METRICS_PER_BATCH
VALUE_BLOCKS = 8
STARTUP_TIMEOUT_S = 180.0
COMPACTION_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 120.0


# --- request bodies -----------------------------------------------------------------------


def metric_names(count: int) -> list[str]:
    """Per-layer norm names in the shape a trainer logs them (valid MLflow keys too)."""
    kinds = ("grad/norm", "params/norm", "updates/norm")
    parts = ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w_in", "mlp.w_out", "ln1", "ln2")
    names = []
    for i in range(count):
        layer, part = divmod(i // len(kinds), len(parts))
        names.append(f"{kinds[i % len(kinds)]}/layers.{layer}.{parts[part]}.weight")
    return names


class Payloads:
    """The points of request ``i`` of a run: steps ``i*STEPS .. i*STEPS+STEPS-1`` of every
    key, with the values of block ``i % VALUE_BLOCKS``; rendered for either system from
    pieces made once, so that putting a body together costs microseconds."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.names = metric_names(KEYS)
        # values[b][k][s]: block b, key k, step offset s
        self.values = [
            rng.lognormal(-1.0, 0.5, size=(KEYS, STEPS)).tolist() for _ in range(VALUE_BLOCKS)
        ]
        self.timestamp = int(time.time() * 1000)
        self._nw_blocks = [
            orjson.dumps(dict(zip(self.names, block, strict=True))) for block in self.values
        ]
        # MLflow: for each block and step offset, the 100 entries of that step split around
        # the step number, so that b"<step>".join(pieces) renders them.
        self._ml_pieces: list[list[list[bytes]]] = []
        for block in self.values:
            per_offset = []
            for s in range(STEPS):
                pieces = [b""]
                for k, name in enumerate(self.names):
                    entry = orjson.dumps(
                        {"key": name, "value": block[k][s], "timestamp": self.timestamp}
                    )
                    sep = b"," if k else b""
                    pieces[-1] += sep + entry[:-1] + b',"step":'
                    pieces.append(b"}")
                per_offset.append(pieces)
            self._ml_pieces.append(per_offset)

    def steps(self, i: int) -> list[int]:
        return list(range(i * STEPS, (i + 1) * STEPS))

    def value(self, i: int, key: int, offset: int) -> float:
        value: float = self.values[i % VALUE_BLOCKS][key][offset]
        return value

    def normwatch(self, i: int) -> bytes:
        block = self._nw_blocks[i % VALUE_BLOCKS]
        return b'{"steps":' + orjson.dumps(self.steps(i)) + b',"metrics":' + block + b"}"

    def mlflow(self, run_id: str, i: int) -> bytes:
        pieces = self._ml_pieces[i % VALUE_BLOCKS]
        entries = b",".join(
            str(step).encode().join(pieces[s]) for s, step in enumerate(self.steps(i))
        )
        return b'{"run_id":"' + run_id.encode() + b'","metrics":[' + entries + b"]}"


# --- senders ------------------------------------------------------------------------------


class Rejected(Exception):
    """A request that was not taken as a whole."""


@dataclass
class Clock:
    start: float = 0.0
    deadline: float = float("inf")


@dataclass
class Sender:
    """One thread posting one run's requests back to back until the deadline."""

    base_url: str
    path: str
    headers: dict[str, str]
    body: Any  # (i) -> bytes
    check: Any  # (response) -> None, raises Rejected
    bodies: list[bytes] | None = None  # pre-built (gzip): used instead of ``body``
    latencies: list[float] = field(default_factory=list)
    requests: int = 0
    accepted: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    ran_out: bool = False
    finished: float = 0.0
    sent: int = 0  # requests sent in all, the untimed first one included

    def content(self, i: int) -> bytes | None:
        if self.bodies is None:
            return self.body(i)  # type: ignore[no-any-return]
        return self.bodies[i] if i < len(self.bodies) else None

    def run(self, barrier: threading.Barrier, clock: Clock) -> None:
        try:
            with httpx.Client(
                base_url=self.base_url, headers=self.headers, timeout=REQUEST_TIMEOUT_S
            ) as client:
                try:
                    self.check(client.post(self.path, content=self.content(0)))
                    self.sent = 1
                except BaseException:
                    barrier.abort()
                    raise
                barrier.wait()
                i = 1
                while time.perf_counter() < clock.deadline:
                    content = self.content(i)
                    if content is None:
                        self.ran_out = True
                        break
                    t0 = time.perf_counter()
                    try:
                        self.check(client.post(self.path, content=content))
                        self.accepted += POINTS
                    except Rejected as exc:
                        self.count_error(str(exc))
                    except (httpx.HTTPError, ValueError) as exc:
                        self.count_error(type(exc).__name__)
                    self.latencies.append(time.perf_counter() - t0)
                    self.requests += 1
                    i += 1
                self.sent = i
        finally:
            self.finished = time.perf_counter()

    def count_error(self, key: str) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1


def postgres_pids(conn: psycopg.Connection[Any]) -> list[int]:
    """The Postgres processes working for ``conn``'s database: its backends (but the one
    asking) and the shared ones (WAL writer, checkpointer...)."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE (datname = current_database() "
        "OR datname IS NULL) AND pid <> pg_backend_pid()"
    ).fetchall()
    return [pid for (pid,) in rows]


@dataclass(frozen=True)
class CpuMark:
    """CPU seconds so far of the server's process tree, of Postgres, of this process."""

    server: float
    postgres: dict[int, float]
    senders: float

    @classmethod
    def take(cls, server_pid: int, watch: psycopg.Connection[Any] | None) -> CpuMark:
        pg = {} if watch is None else {p: process_cpu_seconds(p) for p in postgres_pids(watch)}
        return cls(
            server=sum(process_cpu_seconds(pid) for pid in process_tree(server_pid)),
            postgres=pg,
            senders=time.process_time(),
        )

    def until(self, later: CpuMark) -> dict[str, float]:
        return {
            "server": later.server - self.server,
            "postgres": sum(t - self.postgres.get(p, 0.0) for p, t in later.postgres.items()),
            "senders": later.senders - self.senders,
        }


@dataclass
class Result:
    """One system's phase."""

    system: str
    senders: list[Sender]
    elapsed: float
    cpu: dict[str, float]
    cpu_after: dict[str, float] | None = None  # normwatch: until compacted
    postgres_measured: bool = True
    checks: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(s.requests for s in self.senders)

    @property
    def points_per_s(self) -> float:
        return sum(s.accepted for s in self.senders) / self.elapsed

    def errors(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.senders:
            for key, n in s.errors.items():
                out[key] = out.get(key, 0) + n
        return out

    def per_request_ms(self, who: str, after: bool = False) -> float:
        cpu = self.cpu_after if after and self.cpu_after is not None else self.cpu
        return 1000 * cpu[who] / max(1, self.requests)


def wait_idle(pid: int, label: str) -> None:
    """Wait until the process tree of ``pid`` uses less than 5 % of a core over a second
    (a server that has just answered its health check may still be starting helpers)."""
    start = time.perf_counter()
    before = sum(process_cpu_seconds(p) for p in process_tree(pid))
    while time.perf_counter() - start < STARTUP_TIMEOUT_S:
        time.sleep(1.0)
        now = sum(process_cpu_seconds(p) for p in process_tree(pid))
        if now - before < 0.05:
            waited = time.perf_counter() - start
            if waited > 1.5:
                say(f"  {label}: idle after {waited:.0f} s")
            return
        before = now
    say(f"WARNING: {label} still busy after {STARTUP_TIMEOUT_S:.0f} s")


def run_phase(
    label: str, senders: list[Sender], seconds: float, mark: Any
) -> tuple[float, list[Any]]:
    """Start one thread a sender; once every one has sent its untimed request, the clock runs
    for ``seconds``. Returns the elapsed time and the CPU marks at start and end."""
    clock = Clock()
    marks: list[Any] = []

    def go() -> None:
        marks.append(mark())
        clock.start = time.perf_counter()
        clock.deadline = clock.start + seconds

    barrier = threading.Barrier(len(senders) + 1, action=go, timeout=STARTUP_TIMEOUT_S)
    threads = [threading.Thread(target=s.run, args=(barrier, clock), daemon=True) for s in senders]
    for t in threads:
        t.start()
    barrier.wait()
    tick = clock.start
    while any(t.is_alive() for t in threads):
        tick += 5.0
        for t in threads:
            t.join(timeout=max(0.0, tick - time.perf_counter()))
        elapsed = time.perf_counter() - clock.start
        reqs = sum(s.requests for s in senders)
        done = sum(s.accepted for s in senders)
        say(f"  {label} {elapsed:5.1f} s: {reqs:>6,} requests, {done / elapsed:>10,.0f} points/s")
    marks.append(mark())
    return max(s.finished for s in senders) - clock.start, marks


# --- normwatch ----------------------------------------------------------------------------


def normwatch_check(response: httpx.Response) -> None:
    if response.status_code // 100 != 2:
        raise Rejected(f"HTTP {response.status_code}")
    if response.json().get("accepted") != POINTS:
        raise Rejected("partial")


def stored_points(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(hot, compacted) points held, read in one snapshot."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        hot = conn.execute("SELECT coalesce(sum(count), 0) FROM blocks").fetchone()
        done = conn.execute("SELECT coalesce(sum(points), 0) FROM series").fetchone()
    return int(hot[0] if hot else 0), int(done[0] if done else 0)


def wait_compacted(conn: psycopg.Connection[Any]) -> float:
    """Seconds until the compactor has taken in every hot point."""
    start = time.perf_counter()
    hot, _ = stored_points(conn)
    say(f"  waiting for the compactor: {hot:,} points hot")
    while hot:
        if time.perf_counter() - start > COMPACTION_TIMEOUT_S:
            raise RuntimeError(f"{hot:,} points still hot after {COMPACTION_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
        hot, _ = stored_points(conn)
    return time.perf_counter() - start


def verify_normwatch(
    url: str, read_token: str, run_ids: list[str], senders: list[Sender], payloads: Payloads
) -> list[str]:
    """Problems found reading one key of every run back; none when all is there."""
    problems = []
    key = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {read_token}"}) as api:
        for run_id, s in zip(run_ids, senders, strict=True):
            response = api.get(
                f"/api/v1/runs/{run_id}/series",
                params={"metric": payloads.names[key], "points": 20_000},
                timeout=REQUEST_TIMEOUT_S,
            )
            response.raise_for_status()
            (series,) = response.json()["series"]
            expected = s.sent * STEPS
            last_step = s.sent * STEPS - 1
            last_value = payloads.value(s.sent - 1, key, STEPS - 1)
            if series["total_points"] != expected:
                problems.append(f"run {run_id}: {series['total_points']} points, {expected} sent")
            # Compacted values are float32 by default (the server's storage policy).
            stored_value = float(series["values"][-1])
            if series["steps"][-1] != last_step or not math.isclose(
                stored_value, last_value, rel_tol=1e-6
            ):
                problems.append(
                    f"run {run_id}: last point {series['steps'][-1]}={series['values'][-1]}, "
                    f"sent {last_step}={last_value}"
                )
    return problems


def run_normwatch(
    payloads: Payloads,
    senders: int,
    seconds: float,
    with_gzip: bool,
    json_requests: int | None,
    at: str | None = None,
) -> list[Result]:
    """normwatch's phases; with ``at`` (a commit), the server of that commit instead, on a
    database its own tree migrated."""
    results = []
    with contextlib.ExitStack() as stack:
        settings = {"NORMWATCH_COMPACTION_IDLE_S": "5", "NORMWATCH_COMPACTION_INTERVAL_S": "1"}
        if at is None:
            url = stack.enter_context(scratch_postgres("normwatch_bench_peers"))
        else:
            lib = stack.enter_context(built(at))
            # PYTHONSAFEPATH: ``python -m normwatch`` from the repository root would find this
            # tree's package in the working directory before PYTHONPATH.
            settings |= {"PYTHONPATH": str(lib), "PYTHONSAFEPATH": "1"}
            url = stack.enter_context(database(False, settings))
        logs = stack.enter_context(tempfile.TemporaryDirectory(prefix="normwatch-bench-"))
        with (
            running_server(url, Path(logs), **settings) as server,
            psycopg.connect(admin_dsn(url), autocommit=True) as watch,
        ):
            say(f"normwatch serve (pid {server.process.pid}) at {server.url}")
            ingest, read = make_tokens(url, "bench-peers", "ingest", "read")
            pid = server.process.pid
            name = "normwatch" if at is None else f"normwatch at {at}"
            phases = [(name, False)] + ([(f"{name}, gzip", True)] if with_gzip else [])
            for label, gz in phases:
                before = sum(stored_points(watch))
                run_ids = []
                with httpx.Client(
                    base_url=server.url, headers={"Authorization": f"Bearer {ingest}"}
                ) as api:
                    for i in range(senders):
                        run_name = f"{label.replace(', ', '-').replace(' ', '-')}-{i}"
                        response = api.post("/api/v1/runs", json={"name": run_name}, timeout=30)
                        response.raise_for_status()
                        run_ids.append(response.json()["id"])
                headers = {"Authorization": f"Bearer {ingest}", "Content-Type": "application/json"}
                bodies = None
                if gz:
                    headers["Content-Encoding"] = "gzip"
                    # Pre-compressed, for twice the requests the plain phase managed (so the
                    # senders do not compress on the clock); a sender that runs out stops.
                    count = 2 + 2 * (json_requests or int(2000 * seconds)) // senders
                    say(f"  compressing {count:,} bodies (shared by the {senders} senders)")
                    bodies = [
                        gzip.compress(payloads.normwatch(i), compresslevel=1, mtime=0)
                        for i in range(count)
                    ]
                    wire = sum(len(b) for b in bodies) / len(bodies)
                    say(f"  body: {len(payloads.normwatch(0)):,} B JSON, {wire:,.0f} B gzip")
                load = [
                    Sender(
                        server.url,
                        f"/api/v1/runs/{run_id}/metrics",
                        headers,
                        payloads.normwatch,
                        normwatch_check,
                        bodies,
                    )
                    for run_id in run_ids
                ]
                wait_idle(pid, "normwatch server")
                say(f"{label}: posting back to back for {seconds:.0f} s with {senders} senders")
                elapsed, marks = run_phase(label, load, seconds, lambda: CpuMark.take(pid, watch))
                compact_s = wait_compacted(watch)
                marks.append(CpuMark.take(pid, watch))
                result = Result(label, load, elapsed, marks[0].until(marks[1]))
                result.cpu_after = marks[0].until(marks[2])
                json_requests = json_requests or result.requests + senders
                # Every request sent, the untimed first ones included, must be stored.
                expected = sum(s.sent for s in load) * POINTS
                stored = sum(stored_points(watch)) - before
                result.checks.append(
                    f"{stored:,} points stored of {expected:,} sent "
                    f"(all compacted {compact_s:.1f} s after the phase)"
                )
                if stored != expected:
                    result.failed.append(f"{stored:,} points stored, {expected:,} sent")
                result.failed += verify_normwatch(server.url, read, run_ids, load, payloads)
                result.checks.append(
                    f"series read back: key {payloads.names[0]!r} of {senders} runs"
                )
                results.append(result)
                bodies = None
    return results


# --- MLflow -------------------------------------------------------------------------------


def ensure_mlflow_venv() -> Path:
    """``.venv-mlflow`` with the pinned MLflow, made (or brought up to date with
    ``requirements-mlflow.txt``) when needed; the path of its ``mlflow`` command."""
    mlflow = MLFLOW_VENV / "bin" / "mlflow"
    stamp = MLFLOW_VENV / "requirements-mlflow.txt"
    wanted = MLFLOW_REQUIREMENTS.read_text()
    if mlflow.exists() and stamp.exists() and stamp.read_text() == wanted:
        return mlflow
    python3 = shutil.which("python3") or sys.executable
    if not (MLFLOW_VENV / "bin" / "python").exists():
        say(f"creating {MLFLOW_VENV}")
        subprocess.run([python3, "-m", "venv", str(MLFLOW_VENV)], check=True)
    say(f"installing {' '.join(wanted.split())} into {MLFLOW_VENV.name} (a minute or two)")
    pip = [str(MLFLOW_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-r", str(MLFLOW_REQUIREMENTS)], check=True)
    stamp.write_text(wanted)
    return mlflow


def mlflow_version(mlflow: Path) -> str:
    out = subprocess.run([str(mlflow), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip().rsplit(" ", 1)[-1]


@dataclass
class MlflowServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        """SIGTERM to the server's process group (the CLI, uvicorn, the job runner and its
        consumers); SIGKILL to what is left of it after 20 s."""
        group = self.process.pid
        try:
            os.killpg(group, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                self.process.poll()
                os.killpg(group, 0)  # raises once every process of the group is gone
                time.sleep(0.2)
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)


def start_mlflow(mlflow: Path, backend: str, workdir: Path) -> MlflowServer:
    """``mlflow server`` on a free port, in ``workdir`` (its artifacts go there); waits until
    ``/health`` answers. Raises RuntimeError with the server's output when it does not."""
    port = free_port()
    log_path = workdir / f"mlflow-{port}.log"
    command = [str(mlflow), "server", "--backend-store-uri", backend]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = MlflowServer(f"http://127.0.0.1:{port}", process, log_path)
    if wait_healthy(server.url, process, STARTUP_TIMEOUT_S, path="/health"):
        return server
    server.stop()
    tail = log_path.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"mlflow server did not become healthy on {backend}:\n{tail}")


def mlflow_check(response: httpx.Response) -> None:
    if response.status_code // 100 != 2:
        raise Rejected(f"HTTP {response.status_code}")


def mlflow_history(api: httpx.Client, run_id: str, key: str) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    token = None
    while True:
        params: dict[str, Any] = {"run_id": run_id, "metric_key": key, "max_results": 25_000}
        if token:
            params["page_token"] = token
        response = api.get(
            "/api/2.0/mlflow/metrics/get-history", params=params, timeout=REQUEST_TIMEOUT_S
        )
        response.raise_for_status()
        body = response.json()
        points += body.get("metrics", [])
        token = body.get("next_page_token")
        if not token:
            return points


def verify_mlflow(
    api: httpx.Client, run_ids: list[str], senders: list[Sender], payloads: Payloads
) -> list[str]:
    """Problems found reading one key of every run back; none when all is there."""
    problems = []
    key = 0
    for run_id, s in zip(run_ids, senders, strict=True):
        history = sorted(mlflow_history(api, run_id, payloads.names[key]), key=lambda m: m["step"])
        expected = s.sent * STEPS
        last_step = s.sent * STEPS - 1
        last_value = payloads.value(s.sent - 1, key, STEPS - 1)
        if len(history) != expected:
            problems.append(f"run {run_id}: {len(history)} points, {expected} sent")
        if (
            not history
            or int(history[-1]["step"]) != last_step
            or history[-1]["value"] != last_value
        ):
            last = history[-1] if history else None
            problems.append(f"run {run_id}: last point {last}, sent {last_step}={last_value}")
    return problems


def count_mlflow_rows(
    backend: str, watch: psycopg.Connection[Any] | None, run_ids: list[str]
) -> int:
    query = "SELECT count(*) FROM metrics WHERE run_uuid IN ({})"
    if watch is not None:
        row = watch.execute(query.format(", ".join(["%s"] * len(run_ids))), run_ids).fetchone()
    else:
        import sqlite3

        with sqlite3.connect(backend.removeprefix("sqlite:///")) as conn:
            row = conn.execute(query.format(", ".join("?" * len(run_ids))), run_ids).fetchone()
    return int(row[0]) if row else 0


def run_mlflow(payloads: Payloads, senders: int, seconds: float) -> tuple[Result, str, str]:
    """The MLflow phase; its result, the MLflow version and the backend it ran on."""
    mlflow = ensure_mlflow_venv()
    version = mlflow_version(mlflow)
    base = base_pg_url()
    url = create_database(base, "mlflow_bench_peers", migrate=False)
    try:
        with tempfile.TemporaryDirectory(prefix="normwatch-bench-mlflow-") as folder:
            workdir = Path(folder)
            # SQLAlchemy 2.1 (MLflow's) opens a bare postgresql:// with psycopg 3; name the
            # driver that requirements-mlflow.txt installs.
            backend = admin_dsn(url).replace("postgresql://", "postgresql+psycopg2://", 1)
            try:
                server = start_mlflow(mlflow, backend, workdir)
                backend_note = "Postgres"
            except RuntimeError as exc:
                say(f"WARNING: {exc}\nfalling back to a SQLite backend")
                backend = f"sqlite:///{workdir / 'mlflow.db'}"
                server = start_mlflow(mlflow, backend, workdir)
                backend_note = "SQLite (Postgres backend failed)"
            try:
                result = mlflow_phase(server, backend, url, payloads, senders, seconds)
            finally:
                server.stop()
    finally:
        drop_database(base, url)
    return result, version, backend_note


def mlflow_phase(
    server: MlflowServer, backend: str, url: str, payloads: Payloads, senders: int, seconds: float
) -> Result:
    say(f"mlflow server (pid {server.process.pid}) at {server.url}")
    on_postgres = backend.startswith("postgresql")
    with (
        httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as api,
        psycopg.connect(admin_dsn(url), autocommit=True) as pg,
    ):
        watch = pg if on_postgres else None
        response = api.post("/api/2.0/mlflow/experiments/create", json={"name": "bench-peers"})
        response.raise_for_status()
        experiment = response.json()["experiment_id"]
        run_ids = []
        for i in range(senders):
            response = api.post(
                "/api/2.0/mlflow/runs/create",
                json={
                    "experiment_id": experiment,
                    "run_name": f"mlflow-{i}",
                    "start_time": payloads.timestamp,
                },
            )
            response.raise_for_status()
            run_ids.append(response.json()["run"]["info"]["run_id"])
        headers = {"Content-Type": "application/json"}
        load = [
            Sender(
                server.url,
                "/api/2.0/mlflow/runs/log-batch",
                headers,
                lambda i, run_id=run_id: payloads.mlflow(run_id, i),
                mlflow_check,
            )
            for run_id in run_ids
        ]
        pid = server.process.pid
        wait_idle(pid, "mlflow server")
        say(f"MLflow: posting back to back for {seconds:.0f} s with {senders} senders")
        elapsed, marks = run_phase("MLflow", load, seconds, lambda: CpuMark.take(pid, watch))
        result = Result("MLflow", load, elapsed, marks[0].until(marks[1]))
        result.postgres_measured = on_postgres
        expected = sum(s.sent for s in load) * POINTS
        stored = count_mlflow_rows(backend, watch, run_ids)
        result.checks.append(f"{stored:,} metric rows stored of {expected:,} points sent")
        if stored != expected:
            result.failed.append(f"{stored:,} metric rows stored, {expected:,} points sent")
        result.failed += verify_mlflow(api, run_ids, load, payloads)
        result.checks.append(f"get-history: key {payloads.names[0]!r} of {senders} runs")
    return result


# --- report -------------------------------------------------------------------------------


def latency_cell(result: Result) -> str:
    ms = sorted(x * 1000 for s in result.senders for x in s.latencies)
    return f"{percentile(ms, 50):,.1f} / {percentile(ms, 99):,.1f}"


def report(results: list[Result], senders: int) -> None:
    def row(label: str, cell: Any) -> list[str]:
        return [label] + [cell(r) for r in results]

    def ms(who: str, after: bool = False) -> Any:
        def cell(r: Result) -> str:
            if who == "postgres" and not r.postgres_measured:
                return "-"
            return f"{r.per_request_ms(who, after):.2f}"

        return cell

    def cores(r: Result) -> str:
        used = r.cpu["server"] + (r.cpu["postgres"] if r.postgres_measured else 0.0)
        return f"{used / r.elapsed:.2f} + {r.cpu['senders'] / r.elapsed:.2f}"

    rows = [
        row("timed phase (s)", lambda r: f"{r.elapsed:.1f}"),
        row("requests", lambda r: f"{r.requests:,}"),
        row("requests/s", lambda r: f"{r.requests / r.elapsed:,.1f}"),
        row("**points/s**", lambda r: f"**{r.points_per_s:,.0f}**"),
        row("latency p50 / p99 (ms)", latency_cell),
        row("errors", lambda r: ", ".join(f"{k} x{n}" for k, n in r.errors().items()) or "0"),
        row("**server CPU ms a request**", lambda r: f"**{r.per_request_ms('server'):.2f}**"),
        row("server CPU ms a request, compaction included", ms("server", after=True)),
        row("Postgres CPU ms a request", ms("postgres")),
        row("Postgres CPU ms a request, compaction included", ms("postgres", after=True)),
        row("senders CPU ms a request", ms("senders")),
        row("cores busy: server + Postgres, senders", cores),
        row("every point stored and read back", lambda r: "no" if r.failed else "yes"),
    ]
    shape = f"{senders} senders x {STEPS} steps x {KEYS} keys = {POINTS:,} points a request"
    say(f"\n## Small requests, {shape}, one server worker each\n")
    say(table(["", *(r.system for r in results)], rows))
    by_name = {r.system: r for r in results}
    ml = by_name.get("MLflow")
    if ml is not None and len(results) > 1:
        lines = []
        for nw in results:
            if nw is ml:
                continue
            name = nw.system
            server = ml.per_request_ms("server") / max(nw.per_request_ms("server"), 1e-9)
            server_after = ml.per_request_ms("server") / max(
                nw.per_request_ms("server", after=True), 1e-9
            )
            lines.append(
                [
                    name,
                    f"**{nw.points_per_s / ml.points_per_s:.2f}**",
                    f"{server:.2f}",
                    f"{server_after:.2f}",
                ]
            )
        say("\n## normwatch against MLflow\n")
        say(
            table(
                [
                    "",
                    "points/s, normwatch / MLflow",
                    "server CPU a request, MLflow / normwatch",
                    "the same, normwatch's compaction included",
                ],
                lines,
            )
        )
    for r in results:
        for line in r.checks:
            say(f"{r.system}: {line}")
        for line in r.failed:
            say(f"{r.system}: CHECK FAILED: {line}")
        if any(s.ran_out for s in r.senders):
            say(f"{r.system}: NOTE: a sender used up its pre-built bodies before the deadline")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=None, help="a phase (20)")
    parser.add_argument("--senders", type=int, default=4, help="concurrent runs a phase (4)")
    parser.add_argument("--quick", action="store_true", help="5 s a phase")
    parser.add_argument("--only", choices=("normwatch", "mlflow"), default=None)
    parser.add_argument(
        "--no-gzip", action="store_true", help="leave out the normwatch phase with gzip bodies"
    )
    parser.add_argument(
        "--before",
        metavar="REV",
        default=None,
        help="also measure the normwatch server of commit REV (its own schema), first",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    payloads = Payloads(args.seed)
    say(
        f"request: {STEPS} steps x {KEYS} keys = {POINTS:,} points, "
        f"{len(payloads.normwatch(0)):,} B JSON to normwatch, "
        f"{len(payloads.mlflow('0' * 32, 0)):,} B JSON to MLflow"
    )
    started = time.perf_counter()
    results: list[Result] = []
    version = backend = None
    if args.only != "normwatch":
        # MLflow first: the gzip phase of normwatch sizes its pre-built bodies on normwatch's
        # plain phase, not on this one.
        mlflow_result, version, backend = run_mlflow(payloads, args.senders, seconds)
        results.append(mlflow_result)
    if args.only != "mlflow":
        results[:0] = run_normwatch(
            payloads, args.senders, seconds, not args.no_gzip, json_requests=None
        )
        if args.before:
            results[:0] = run_normwatch(
                payloads, args.senders, seconds, False, json_requests=None, at=args.before
            )
    report(results, args.senders)
    if version is not None:
        say(f"MLflow {version}, backend {backend}, `mlflow server --workers 1` (uvicorn)")
    say(f"total wall time {time.perf_counter() - started:.0f} s")
    failed = any(r.failed or r.errors() or any(s.ran_out for s in r.senders) for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
