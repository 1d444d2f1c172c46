"""Alert latency: from posting a crossing point to its webhook arriving, under ingest load.

What is measured: a real ``normwatch serve`` process (one uvicorn worker, the shipped
dispatch tick of 1 s) on a scratch Postgres database that the script creates, migrates and
drops, and a real webhook receiver (a threaded ``http.server`` on 127.0.0.1) that records
when each notification arrives and its ``X-Normwatch-Delivery`` id. The project has 50
enabled rules, all with a webhook channel to the receiver:

* on the watched metric ``train/grad_norm_total`` of the ``alerts`` run: the one that fires
  (threshold ``>= 10``) and three that never do (a threshold far above it, ``non_finite``,
  a slope);
* on the load's own metrics, evaluated on every load batch and never firing: spike on
  ``grad/norm/layers.*`` (factor 50), ``non_finite`` on ``params/norm/*``, a threshold on
  ``updates/norm/*``, a slope on ``grad/norm/layers.0.*``;
* 42 on metrics nobody logs (thresholds, spikes, ``non_finite`` and slopes on
  ``eval/*``, ``val/*``, ``system/*`` names), which the server still has to match.

``--senders`` background threads, one run each, post batches of 25 steps x ``--metrics``
metrics (gzip level 1, the client's columnar format) back to back for the whole timed
phase. Meanwhile the main thread posts ``--alerts`` batches to the ``alerts`` run, one at a
time, each 25 steps of three metrics: the odd ones end with a value of 20 at the last step
(the rule fires), the even ones hold 1.0 (it resolves at the first step), so each POST owes
exactly one notification. Latency: from just before the POST to the notification's arrival
at the receiver (both read from this process's ``perf_counter``). Two warm-up alerts go
first and are not counted. After the last one the script waits a few seconds more and
checks that each alert arrived exactly once (distinct delivery ids, one per expected
transition) and that no other rule fired.

Baseline, in the same run: the HTTP round trip of the same alert POSTs (request sent to
``202 Accepted``), i.e. ingesting the batch alone. Ratio: alert latency / ingest round trip,
at p50 and p95. Also reported: the load's accepted points/s during the timed phase and its
request latency.

The load generator, the server, the receiver and Postgres share the machine.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``, by default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, which must allow CREATE DATABASE)::

    .venv/bin/python benchmarks/alert_latency.py                  # 200 alerts, 2 x 1000 metrics
    .venv/bin/python benchmarks/alert_latency.py --quick          # 30 alerts, 1 x 500 metrics
    .venv/bin/python benchmarks/alert_latency.py --alerts 100 --senders 1 --metrics 2000
"""

from __future__ import annotations

import argparse
import gzip
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from _harness import percentile, say, scratch_postgres, table
from ingest_http import cpu_seconds, machine_busy, metric_names

from normwatch.server.auth import create_token
from normwatch.server.db import build_engine, session_factory
from normwatch.testing import free_port, running_server

STEPS_PER_BATCH = 25
WATCHED = "train/grad_norm_total"
FIRES_AT = 10.0
WARMUP_ALERTS = 2
DISTINCT_VALUE_BLOCKS = 8
ARRIVAL_TIMEOUT_S = 60.0
SETTLE_S = 3.0


@dataclass
class Arrival:
    """One notification as the receiver saw it."""

    at: float
    delivery: str
    rule: str
    run: str
    state: str
    step: int


@dataclass
class Receiver:
    """A webhook endpoint on 127.0.0.1 that records every POST with its arrival time."""

    port: int
    arrivals: list[Arrival] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    server: ThreadingHTTPServer | None = None

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                at = time.perf_counter()
                payload = orjson.loads(body)
                arrival = Arrival(
                    at=at,
                    delivery=self.headers.get("X-Normwatch-Delivery", ""),
                    rule=payload["rule"]["name"],
                    run=payload["run"]["id"],
                    state=payload["state"],
                    step=int(payload["step"]),
                )
                self.send_response(200)
                self.end_headers()
                with receiver.changed:
                    receiver.arrivals.append(arrival)
                    receiver.changed.notify_all()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def wait_for(self, run: str, state: str, step: int, timeout: float) -> Arrival | None:
        """The first arrival for (run, state, step), waiting up to ``timeout`` seconds."""
        deadline = time.perf_counter() + timeout
        seen = 0
        with self.changed:
            while True:
                for arrival in self.arrivals[seen:]:
                    if (arrival.run, arrival.state, arrival.step) == (run, state, step):
                        return arrival
                seen = len(self.arrivals)
                left = deadline - time.perf_counter()
                if left <= 0:
                    return None
                self.changed.wait(left)


def rules(receiver: Receiver) -> list[dict[str, Any]]:
    """The project's 50 rules: one that fires, 49 that never do."""
    found: list[tuple[str, str, dict[str, Any], str]] = [
        ("grad norm 10+", WATCHED, {"kind": "threshold", "op": ">=", "value": FIRES_AT}, "alerts"),
        ("grad norm huge", WATCHED, {"kind": "threshold", "op": ">", "value": 1e9}, "*"),
        ("grad norm nan", WATCHED, {"kind": "non_finite"}, "*"),
        ("grad norm climbs", WATCHED, {"kind": "slope", "op": ">", "per_1k_steps": 1e9}, "*"),
        (
            "layer spikes",
            "grad/norm/layers.*",
            {"kind": "spike", "factor": 50.0, "window": 50},
            "*",
        ),
        ("param nan", "params/norm/*", {"kind": "non_finite"}, "*"),
        ("update huge", "updates/norm/*", {"kind": "threshold", "op": ">", "value": 1e6}, "*"),
        (
            "layer 0 climbs",
            "grad/norm/layers.0.*",
            {"kind": "slope", "op": ">", "per_1k_steps": 1e9, "window": 20},
            "*",
        ),
    ]
    kinds: list[dict[str, Any]] = [
        {"kind": "threshold", "op": "<", "value": -1.0},
        {"kind": "spike", "factor": 5.0, "window": 20},
        {"kind": "non_finite"},
        {"kind": "slope", "op": "<", "per_1k_steps": -1e9, "window": 50},
    ]
    families = ("eval", "val", "system")
    i = 0
    while len(found) < 50:
        family = families[i % len(families)]
        found.append((f"idle {i}", f"{family}/metric_{i}", kinds[i % len(kinds)], "*"))
        i += 1
    channels = [{"type": "webhook", "url": receiver.url, "secret": "bench-secret"}]
    return [
        {
            "name": name,
            "metric": metric,
            "condition": cond,
            "channels": channels,
            "runs": {"name": runs},
        }
        for name, metric, cond, runs in found
    ]


def make_tokens(database_url: str, project: str) -> tuple[str, str]:
    """An ingest token and an admin token of a new project."""
    engine = build_engine(database_url, pool_size=1)
    try:
        with session_factory(engine)() as session, session.begin():
            ingest, _ = create_token(session, project, "ingest")
            admin, _ = create_token(session, project, "admin")
    finally:
        engine.dispose()
    return ingest, admin


def gzip_doc(steps: list[int], metrics: bytes) -> bytes:
    doc = b'{"steps":' + orjson.dumps(steps) + b',"metrics":' + metrics + b"}"
    return gzip.compress(doc, compresslevel=1, mtime=0)


HEADERS = {"Content-Encoding": "gzip", "Content-Type": "application/json"}


@dataclass
class LoadSender:
    """One thread posting one run's batches back to back until told to stop."""

    url: str
    token: str
    run_id: str
    blocks: list[bytes]
    stop: threading.Event
    counting: threading.Event
    accepted: int = 0
    requests: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=120) as client:
            batch = 0
            while not self.stop.is_set():
                steps = list(range(batch * STEPS_PER_BATCH, (batch + 1) * STEPS_PER_BATCH))
                body = gzip_doc(steps, self.blocks[batch % len(self.blocks)])
                batch += 1
                counting = self.counting.is_set()
                t0 = time.perf_counter()
                try:
                    response = client.post(
                        f"/api/v1/runs/{self.run_id}/metrics", content=body, headers=HEADERS
                    )
                    ok = response.status_code == 202
                    key = "" if ok else f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    ok, key = False, type(exc).__name__
                elapsed = time.perf_counter() - t0
                if not counting or not self.counting.is_set():
                    continue
                self.requests += 1
                self.latencies.append(elapsed)
                if ok:
                    self.accepted += int(response.json()["accepted"])
                else:
                    self.errors[key] = self.errors.get(key, 0) + 1


def alert_body(index: int) -> tuple[bytes, str, int]:
    """The ``index``-th alert batch: body, the transition it owes and at which step."""
    start = index * STEPS_PER_BATCH
    steps = list(range(start, start + STEPS_PER_BATCH))
    watched = [1.0] * STEPS_PER_BATCH
    if index % 2 == 0:
        watched[-1] = 2 * FIRES_AT
        state, step = "firing", steps[-1]
    else:
        state, step = "resolved", steps[0]
    metrics = {
        WATCHED: watched,
        "train/loss": [2.0 - 0.001 * s for s in steps],
        "train/lr": [3e-4] * STEPS_PER_BATCH,
    }
    return gzip_doc(steps, orjson.dumps(metrics)), state, step


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q):,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--alerts", type=int, default=None, help="timed alerts (200)")
    parser.add_argument("--senders", type=int, default=None, help="load runs (2)")
    parser.add_argument("--metrics", type=int, default=None, help="metrics a load batch (1000)")
    parser.add_argument("--quick", action="store_true", help="30 alerts, 1 sender x 500 metrics")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    alerts = args.alerts or (30 if args.quick else 200)
    senders = args.senders or (1 if args.quick else 2)
    metrics = args.metrics or (500 if args.quick else 1000)
    rng = np.random.default_rng(args.seed)
    names = metric_names(metrics)
    blocks = [
        orjson.dumps(
            dict(
                zip(
                    names,
                    rng.lognormal(-1.0, 0.5, size=(metrics, STEPS_PER_BATCH)).tolist(),
                    strict=True,
                )
            )
        )
        for _ in range(DISTINCT_VALUE_BLOCKS)
    ]

    started = time.perf_counter()
    receiver = Receiver(free_port())
    receiver.start()
    try:
        with (
            scratch_postgres("normwatch_bench_alerts") as url,
            tempfile.TemporaryDirectory(prefix="normwatch-bench-") as logs,
            running_server(url, Path(logs), NORMWATCH_WEBHOOK_ALLOW="127.0.0.1") as server,
        ):
            ingest, admin = make_tokens(url, "bench-alerts")
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {admin}"}, timeout=30
            ) as api:
                for rule in rules(receiver):
                    response = api.post("/api/v1/alert-rules", json=rule)
                    if response.status_code != 201:
                        raise RuntimeError(f"rule {rule['name']}: {response.text}")
                run_ids = []
                for name in ["alerts", *(f"load-{i}" for i in range(senders))]:
                    response = api.post("/api/v1/runs", json={"name": name, "start_step": 0})
                    response.raise_for_status()
                    run_ids.append(str(response.json()["id"]))
            say(f"50 rules; {senders} load run(s) of 25 steps x {metrics:,} metrics a batch")

            stop, counting = threading.Event(), threading.Event()
            load = [
                LoadSender(server.url, ingest, run_id, blocks, stop, counting)
                for run_id in run_ids[1:]
            ]
            threads = [threading.Thread(target=s.run, daemon=True) for s in load]
            for t in threads:
                t.start()

            alert_run = run_ids[0]
            latencies: list[float] = []
            round_trips: list[float] = []
            missing: list[tuple[str, int]] = []
            expected: list[tuple[str, int]] = []
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {ingest}"}, timeout=60
            ) as client:
                # Let the load's first batches (which create its metric rows) go through.
                time.sleep(3.0)
                say(f"posting {WARMUP_ALERTS} warm-up + {alerts} alerts under load")
                for index in range(WARMUP_ALERTS + alerts):
                    if index == WARMUP_ALERTS:
                        counting.set()
                        t_start = time.perf_counter()
                        server_cpu0 = cpu_seconds(server.process.pid)
                        client_cpu0 = time.process_time()
                        busy0, total0 = machine_busy()
                    body, state, step = alert_body(index)
                    expected.append((state, step))
                    t0 = time.perf_counter()
                    response = client.post(
                        f"/api/v1/runs/{alert_run}/metrics", content=body, headers=HEADERS
                    )
                    t1 = time.perf_counter()
                    if response.status_code != 202:
                        raise RuntimeError(f"alert {index}: HTTP {response.status_code}")
                    arrival = receiver.wait_for(alert_run, state, step, ARRIVAL_TIMEOUT_S)
                    if index < WARMUP_ALERTS:
                        continue
                    round_trips.append((t1 - t0) * 1000)
                    if arrival is None:
                        missing.append((state, step))
                    else:
                        latencies.append((arrival.at - t0) * 1000)
                    done = index + 1 - WARMUP_ALERTS
                    if done % max(1, alerts // 10) == 0 or done == alerts:
                        elapsed = time.perf_counter() - t_start
                        points = sum(s.accepted for s in load)
                        say(
                            f"  {done:>4} alerts, {elapsed:5.1f} s: latency p50 "
                            f"{ms(sorted(latencies), 50)} ms, load {points / elapsed:,.0f} pts/s"
                        )
                    time.sleep(float(rng.uniform(0.0, 0.1)))  # no lockstep with the load
            elapsed = time.perf_counter() - t_start
            counting.clear()
            server_cpu = cpu_seconds(server.process.pid) - server_cpu0
            client_cpu = time.process_time() - client_cpu0
            busy1, total1 = machine_busy()
            stop.set()
            for t in threads:
                t.join(timeout=120)
            time.sleep(SETTLE_S)  # a duplicate or a late retry would arrive by now

        with receiver.changed:
            arrivals = list(receiver.arrivals)
    finally:
        receiver.stop()

    ours = [a for a in arrivals if a.run == alert_run and a.rule == "grad norm 10+"]
    others = [a for a in arrivals if a not in ours]
    distinct = {a.delivery for a in ours}
    per_transition: dict[tuple[str, int], int] = {}
    for a in ours:
        per_transition[(a.state, a.step)] = per_transition.get((a.state, a.step), 0) + 1
    timed = expected[WARMUP_ALERTS:]
    once = sum(1 for key in timed if per_transition.get(key) == 1)
    duplicates = len(ours) - len(distinct)
    unexpected = sum(1 for key in per_transition if key not in set(expected))

    lat = sorted(latencies)
    rtt = sorted(round_trips)
    load_points = sum(s.accepted for s in load)
    load_requests = sum(s.requests for s in load)
    load_latency = sorted(x * 1000 for s in load for x in s.latencies)
    load_errors: dict[str, int] = {}
    for s in load:
        for key, n in s.errors.items():
            load_errors[key] = load_errors.get(key, 0) + n
    cores = os.cpu_count() or 1
    machine_cpu = busy1 - busy0

    say(
        f"\n## Alert latency, {alerts} alerts, 50 rules, load {senders} x 25 steps x "
        f"{metrics:,} metrics\n"
    )
    rows = [
        [label, ms(lat, q), ms(rtt, q), f"{percentile(lat, q) / percentile(rtt, q):.1f}"]
        for label, q in (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))
    ]
    say(table(["", "POST → webhook (ms)", "POST → 202 (ms)", "ratio"], rows))
    say("")
    say(
        table(
            ["measure", "value"],
            [
                ["timed phase (s)", f"{elapsed:.1f}"],
                ["alerts posted / arrived", f"{alerts} / {len(lat)}"],
                [
                    "arrived exactly once (distinct delivery ids)",
                    f"{once} of {alerts} ({len(distinct)} ids for {len(ours)} receipts, "
                    f"{WARMUP_ALERTS} of them warm-up)",
                ],
                [
                    "duplicates / unexpected / other rules",
                    f"{duplicates} / {unexpected} / {len(others)}",
                ],
                ["load accepted points/s", f"{load_points / elapsed:,.0f}"],
                [
                    "load requests (p50 / p99 ms)",
                    f"{load_requests:,} ({ms(load_latency, 50)} / {ms(load_latency, 99)})",
                ],
                ["load errors", ", ".join(f"{k} x{n}" for k, n in load_errors.items()) or "0"],
                ["CPU s: server / this process", f"{server_cpu:.1f} / {client_cpu:.1f}"],
                [
                    "machine CPU busy",
                    f"{100 * machine_cpu / (total1 - total0):.0f} % of {cores} cores",
                ],
            ],
        )
    )
    say(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    ok = not missing and duplicates == 0 and unexpected == 0 and not others
    ok = ok and once == alerts
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
