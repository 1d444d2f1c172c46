"""Export throughput: every stored point of a large run over HTTP, against a raw ``COPY TO``
of the same points, in the same run.

Setup, in a scratch Postgres database the script creates, migrates and drops: one run of
``--steps`` steps (1,000,000) logging ``--metrics`` metrics (20), every metric at every step
(a random walk each, float64), loaded as the ingest service stores a batch (binary ``COPY``
of hot blocks) and compacted with the default policy (4,096-point float32 chunks and their
summaries), as a run is once it has finished. The same points also go, untimed, into a plain
table ``points_plain(step bigint, metric text, value float8)``: what storing a point a row
would look like.

Measured, each ``--repeat`` times (median and range after one untimed run):

* **baseline**: ``COPY (SELECT step, metric, value FROM points_plain ORDER BY metric, step)
  TO STDOUT (FORMAT csv)`` read whole by psycopg: Postgres writing the same points as CSV
  text, a row a point;
* ``GET /api/v1/runs/{id}/export?metric=...`` (CSV) from a real server (``normwatch serve``,
  one worker), read by httpx as it streams: a row a step, a column a metric;
* the same with ``format=jsonl`` and ``format=parquet``, and ``Api.history_frame``;
* the server's memory: its resident size sampled every 20 ms during each kind of read
  (after one untimed read of that kind, which may import pyarrow), the largest growth over
  its size before.

Printed: points a second and the ratio of each time to the baseline's.

    .venv/bin/python benchmarks/export.py                         # 1M steps x 20 metrics
    .venv/bin/python benchmarks/export.py --steps 100000 --quick  # a smaller run, 1 repeat
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import psycopg
from _harness import (
    Timing,
    make_tokens,
    process_tree,
    rss_bytes,
    say,
    scratch_postgres,
    table,
    timed,
)

from normwatch.client import Api
from normwatch.scratch import admin_dsn
from normwatch.server.auth import authenticate, create_token
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.models import Run
from normwatch.server.schemas import RunCreate
from normwatch.server.services import runs
from normwatch.server.storage import blocks, pgcopy, schedule
from normwatch.server.storage.metric_ids import resolve_metric_ids
from normwatch.server.storage.policy import Policy
from normwatch.testing import ServerProcess, start_server

PIECE = 100_000


def names(metrics: int) -> list[str]:
    return [f"params/norm/layers.{i}.w" for i in range(metrics)]


def load(url: str, steps: int, metrics: int) -> tuple[str, int]:
    """Create the run and store its points (hot blocks, then compacted); the plain table
    too. Returns the run's id and its points."""
    engine = build_engine(url)
    factory = session_factory(engine)
    with session_scope(factory) as session:
        secret, _ = create_token(session, "bench", "ingest")
        who = authenticate(session, secret)
        assert who is not None
        run_id = runs.create_or_resume(session, who, RunCreate(name="export")).id
        key = int(session.query(Run).filter(Run.id == run_id).one().key)
        ids = resolve_metric_ids(session, key, names(metrics))
    rng = np.random.default_rng(0)
    all_steps = np.arange(steps, dtype=np.int64)
    dsn = admin_dsn(engine.url.render_as_string(hide_password=False))
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE points_plain (step bigint, metric text, value float8)")
        for i, name in enumerate(names(metrics)):
            values = 10.0 + np.cumsum(rng.standard_normal(steps)) * 0.01
            pieces = [
                blocks.encode(all_steps[lo : lo + PIECE], values[lo : lo + PIECE], ids[name])
                for lo in range(0, steps, PIECE)
            ]
            with conn.cursor().copy(pgcopy.COPY_BLOCKS) as copy:
                copy.write(pgcopy.encode_blocks(key, 1, pieces))
            with conn.cursor().copy(
                "COPY points_plain (step, metric, value) FROM STDIN (FORMAT binary)"
            ) as copy:
                copy.write(plain_rows(all_steps, name, values))
            conn.commit()
            say(f"  load: {i + 1} / {metrics} metrics ({time.perf_counter() - started:.0f} s)")
        conn.execute(f"UPDATE runs SET last_step = {steps - 1} WHERE key = {key}")
        conn.execute("ANALYZE points_plain")
        conn.commit()
    say("  compacting (default policy: 4096-point float32 chunks)")
    report = schedule.compact_everything(factory, Policy())
    say(f"  compacted {report.points:,} points in {time.perf_counter() - started:.0f} s (all)")
    engine.dispose()
    return run_id, steps * metrics


def plain_rows(steps: np.ndarray, name: str, values: np.ndarray) -> bytes:
    """Postgres binary COPY of ``(step, name, value)`` rows, built by NumPy."""
    text = name.encode()
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("step_len", ">i4"),
            ("step", ">i8"),
            ("name_len", ">i4"),
            ("name", f"S{len(text)}"),
            ("value_len", ">i4"),
            ("value", ">f8"),
        ]
    )
    out = np.empty(len(steps), row)
    out["fields"], out["step_len"], out["name_len"], out["value_len"] = 3, 8, len(text), 8
    out["step"], out["name"], out["value"] = steps, text, values
    header = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8
    return header + out.tobytes() + b"\xff\xff"


def copy_to(url: str) -> int:
    """Bytes of the baseline's CSV."""
    engine = build_engine(url)
    dsn = admin_dsn(engine.url.render_as_string(hide_password=False))
    engine.dispose()
    size = 0
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        query = (
            "COPY (SELECT step, metric, value FROM points_plain ORDER BY metric, step) "
            "TO STDOUT (FORMAT csv)"
        )
        with cur.copy(query) as copy:
            for data in copy:
                size += len(data)
    return size


class Memory:
    """The server's largest resident size (its process tree) while sampling."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = self.now()
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now(self) -> int:
        return sum(rss_bytes(p) for p in process_tree(self.pid))

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> Memory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def exporter(server: ServerProcess, token: str, run_id: str, metrics: list[str], fmt: str) -> int:
    size = 0
    with (
        httpx.Client(base_url=server.url, timeout=600) as client,
        client.stream(
            "GET",
            f"/api/v1/runs/{run_id}/export",
            params={"metric": metrics, "format": fmt},
            headers={"Authorization": f"Bearer {token}"},
        ) as r,
    ):
        r.raise_for_status()
        for part in r.iter_raw():
            size += len(part)
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one repeat, no warm-up")
    args = parser.parse_args(argv)
    repeat, warmup = (1, 0) if args.quick else (args.repeat, 1)
    metric_names = names(args.metrics)
    with scratch_postgres("export") as url:
        say(f"run: {args.steps:,} steps x {args.metrics} metrics")
        run_id, points = load(url, args.steps, args.metrics)
        [token] = make_tokens(url, "bench", "read")
        logs = tempfile.TemporaryDirectory(prefix="normwatch-bench-")
        server = start_server(url, Path(logs.name))
        try:
            rows: list[list[str]] = []
            base, size = timed(lambda: copy_to(url), repeat=repeat, warmup=warmup)
            say(f"  COPY TO (csv): {base.median_ms / 1000:.2f} s, {size / 1e6:,.0f} MB")
            cases: list[tuple[str, Callable[[], object]]] = [
                ("export, csv", lambda: exporter(server, token, run_id, metric_names, "csv")),
                ("export, jsonl", lambda: exporter(server, token, run_id, metric_names, "jsonl")),
                (
                    "export, parquet",
                    lambda: exporter(server, token, run_id, metric_names, "parquet"),
                ),
                (
                    "Api.history_frame",
                    lambda: Api(server.url, token).history_frame(run_id, metric_names),
                ),
            ]
            rows.append(
                _row("COPY TO, csv (baseline)", base, points, base, f"{size / 1e6:,.0f}", "–")
            )
            for name, call in cases:
                call()  # warm: the first parquet export imports pyarrow (its libraries' pages)
                with Memory(server.process.pid) as memory:
                    timing, got = timed(call, repeat=repeat, warmup=0)
                growth = (memory.peak - memory.before) / 2**20
                mb = f"{got / 1e6:,.0f}" if isinstance(got, int) else "–"
                rows.append(_row(name, timing, points, base, mb, f"{growth:,.0f}"))
                say(f"  {name}: {timing.median_ms / 1000:.2f} s, server +{growth:,.0f} MiB")
            say("")
            headers = ["read", "median s", "range s", "points/s", "× COPY TO", "MB", "server MiB"]
            say(table(headers, rows))
            say(
                f"\nserver: {Memory(server.process.pid).before / 2**20:,.0f} MiB resident after; "
                "'server MiB' is the largest growth of its resident size during a read over its "
                f"size before it ({points:,} points a read)"
            )
        finally:
            server.stop()
            logs.cleanup()
    return 0


def _row(name: str, timing: Timing, points: int, base: Timing, size: str, memory: str) -> list[str]:
    return [
        name,
        f"{timing.median_ms / 1000:.2f}",
        f"{timing.min_ms / 1000:.2f}–{timing.max_ms / 1000:.2f}",
        f"{points / (timing.median_ms / 1000):,.0f}",
        f"{timing.median_ms / base.median_ms:.2f}",
        size,
        memory,
    ]


if __name__ == "__main__":
    raise SystemExit(main())
