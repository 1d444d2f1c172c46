"""HTTP ingest throughput of a real server, against a raw binary COPY in the same run.

What is measured: a real ``normwatch serve`` process (one uvicorn worker) on a scratch
Postgres database that the script creates, migrates and drops. ``--senders`` threads, one
run each, post columnar batches of 25 steps x ``--metrics`` metrics (the trainer client's
format: ``{"steps": [...], "metrics": {name: [values...]}}``, gzip level 1,
``Content-Encoding: gzip``) to ``POST /api/v1/runs/{id}/metrics`` back to back for
``--seconds``. Every request body is built and compressed before the clock starts, so the
senders only wait on the network. One untimed batch per run goes first (it creates the
run's metric rows). Reported: accepted points/s, requests/s, request latency p50/p99,
errors, and the CPU seconds used by the server process, by this process, and by the rest
of the machine (mostly Postgres) during the timed phase.

Baseline: the same number of rows, in the same shape (one transaction per 25 x metrics
rows), sent by one connection as binary ``COPY ... FROM STDIN`` into a bare table with the
same columns and primary key as ``points``. The COPY stream is built with NumPy, so the
client costs next to nothing and the number is roughly what this Postgres can take in.
Ratio: HTTP points/s / COPY points/s.

The client, the server and Postgres share the machine: on a small one the senders' and
server's Python compete with Postgres for the same cores.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``, by default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, which must allow CREATE DATABASE)::

    .venv/bin/python benchmarks/ingest_http.py                    # 20 s, 2 senders, 2000 metrics
    .venv/bin/python benchmarks/ingest_http.py --quick            # 5 s, 500 metrics
    .venv/bin/python benchmarks/ingest_http.py --seconds 60 --senders 4 --metrics 500
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import orjson
import psycopg
from _harness import (
    admin_dsn,
    make_ingest_token,
    percentile,
    say,
    scratch_postgres,
    table,
)

from normwatch.testing import running_server

STEPS_PER_BATCH = 25
# Bodies are pre-built for a rate no server here reaches; a sender that runs out stops early.
MAX_POINTS_PER_S = 1_500_000
DISTINCT_VALUE_BLOCKS = 8
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
    names: list[str], batches: int, rng: np.random.Generator
) -> tuple[list[bytes], int]:
    """``batches`` gzip bodies with consecutive steps; returns them and the raw JSON size."""
    blocks = []
    for _ in range(DISTINCT_VALUE_BLOCKS):
        values = rng.lognormal(-1.0, 0.5, size=(len(names), STEPS_PER_BATCH))
        blocks.append(orjson.dumps(dict(zip(names, values.tolist(), strict=True))))
    bodies = []
    raw = 0
    for b in range(batches):
        steps = list(range(b * STEPS_PER_BATCH, (b + 1) * STEPS_PER_BATCH))
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
class Sender:
    """One thread posting one run's pre-built bodies until the deadline."""

    url: str
    token: str
    run_id: str
    bodies: list[bytes]
    latencies: list[float] = field(default_factory=list)
    accepted: int = 0
    requests: int = 0
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

    def run(self, start: threading.Barrier, deadline: list[float]) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            with httpx.Client(base_url=self.url, headers=headers, timeout=120) as client:
                try:
                    self.post(client, self.bodies[0])  # untimed: creates the metric rows
                except BaseException:
                    start.abort()  # nobody waits forever for a sender that cannot start
                    raise
                start.wait()
                for body in self.bodies[1:]:
                    if time.perf_counter() >= deadline[0]:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=None, help="timed phase (20)")
    parser.add_argument("--senders", type=int, default=2, help="concurrent runs (2)")
    parser.add_argument("--metrics", type=int, default=None, help="metrics a batch (2000)")
    parser.add_argument("--quick", action="store_true", help="5 s with 500 metrics")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    metrics = args.metrics or (500 if args.quick else 2000)
    senders = args.senders
    per_batch = STEPS_PER_BATCH * metrics
    rng = np.random.default_rng(args.seed)

    batches = 2 + int(MAX_POINTS_PER_S * seconds / per_batch / senders)
    say(
        f"building {senders} x {batches} gzip bodies of {STEPS_PER_BATCH} steps x "
        f"{metrics:,} metrics ({per_batch:,} points each)"
    )
    names = metric_names(metrics)
    built = [build_bodies(names, batches, rng) for _ in range(senders)]
    wire = sum(len(b) for bodies, _ in built for b in bodies) // (senders * batches)
    raw_json = built[0][1]
    say(f"  body: {raw_json / 1e6:.2f} MB JSON, {wire / 1e6:.2f} MB gzip")

    started = time.perf_counter()
    with (
        scratch_postgres("normwatch_bench_http") as url,
        tempfile.TemporaryDirectory(prefix="normwatch-bench-") as logs,
        running_server(url, Path(logs)) as server,
    ):
        token = make_ingest_token(url, "bench-http")
        threads_state = []
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as api:
            for i, (bodies, _) in enumerate(built):
                response = api.post("/api/v1/runs", json={"name": f"sender-{i}"})
                response.raise_for_status()
                threads_state.append(Sender(server.url, token, response.json()["id"], bodies))
        built.clear()

        barrier = threading.Barrier(senders + 1, timeout=300)
        deadline = [float("inf")]
        threads = [
            threading.Thread(target=s.run, args=(barrier, deadline), daemon=True)
            for s in threads_state
        ]
        for t in threads:
            t.start()
        barrier.wait()  # every run has its metric rows; the clock starts now
        t0 = time.perf_counter()
        deadline[0] = t0 + seconds
        server_cpu0, client_cpu0 = cpu_seconds(server.process.pid), time.process_time()
        busy0, total0 = machine_busy()
        say(f"posting for {seconds:.0f} s with {senders} sender(s)")
        tick = t0
        while any(t.is_alive() for t in threads):
            tick += 2.0
            for t in threads:
                t.join(timeout=max(0.0, tick - time.perf_counter()))
            elapsed = time.perf_counter() - t0
            done = sum(s.accepted for s in threads_state)
            reqs = sum(s.requests for s in threads_state)
            say(f"  {elapsed:5.1f} s: {reqs:>5} requests, {done / elapsed:>10,.0f} points/s")
        elapsed = max(s.finished for s in threads_state) - t0
        server_cpu = cpu_seconds(server.process.pid) - server_cpu0
        client_cpu = time.process_time() - client_cpu0
        busy1, total1 = machine_busy()
        machine_cpu = busy1 - busy0
        cores = os.cpu_count() or 1
        others = machine_cpu - server_cpu - client_cpu

        accepted = sum(s.accepted for s in threads_state)
        requests = sum(s.requests for s in threads_state)
        errors: dict[str, int] = {}
        for s in threads_state:
            for key, n in s.errors.items():
                errors[key] = errors.get(key, 0) + n
        latencies = sorted(x * 1000 for s in threads_state for x in s.latencies)
        ran_out = any(s.ran_out for s in threads_state)
        with psycopg.connect(admin_dsn(url)) as conn:
            row = conn.execute("SELECT count(*) FROM points").fetchone()
        stored = 0 if row is None else int(row[0])
        expected = accepted + senders * per_batch
        if stored != expected:
            say(f"WARNING: points holds {stored:,} rows, expected {expected:,}")

        say(f"COPY baseline: {accepted:,} rows in batches of {per_batch:,}")
        copy_s = copy_baseline(url, max(accepted, per_batch), metrics, rng)
    http_pps = accepted / elapsed
    copy_pps = max(accepted, per_batch) / copy_s

    say(f"\n## HTTP ingest, {senders} senders x {STEPS_PER_BATCH} steps x {metrics:,} metrics\n")
    say(
        table(
            ["measure", "value"],
            [
                ["timed phase (s)", f"{elapsed:.1f}"],
                ["requests (req/s)", f"{requests:,} ({requests / elapsed:.1f})"],
                ["body JSON / gzip (MB)", f"{raw_json / 1e6:.2f} / {wire / 1e6:.2f}"],
                ["accepted points/s (HTTP)", f"{http_pps:,.0f}"],
                [
                    "latency p50 / p99 (ms)",
                    f"{percentile(latencies, 50):,.0f} / {percentile(latencies, 99):,.0f}",
                ],
                ["errors", ", ".join(f"{k} x{n}" for k, n in errors.items()) or "0"],
                [
                    "CPU s: server / senders / rest (Postgres, other)",
                    f"{server_cpu:.1f} / {client_cpu:.1f} / {others:.1f}",
                ],
                [
                    "machine CPU busy",
                    f"{100 * machine_cpu / (total1 - total0):.0f} % of {cores} cores",
                ],
                ["points/s (binary COPY, 1 connection)", f"{copy_pps:,.0f}"],
                ["ratio HTTP / COPY", f"{http_pps / copy_pps:.2f}"],
            ],
        )
    )
    if ran_out:
        say("NOTE: a sender used up its pre-built bodies before the deadline")
    say(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 1 if errors or ran_out else 0


if __name__ == "__main__":
    raise SystemExit(main())
