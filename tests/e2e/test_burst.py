"""A burst of concurrent requests against a real server on Postgres degrades cleanly.

One wave of 200 requests at once, the mix a busy on-call morning brings (chart reads,
metric batches from many trainers, run lists), on a worker with default settings: every
answer is a success or 503 with ``Retry-After`` (never 500, never unanswered), ``/healthz``
answers within a second throughout, and every point of every accepted batch is stored.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from normwatch.scratch import admin_dsn
from normwatch.server.storage import blocks
from normwatch.testing import ServerProcess
from tests.helpers.coroutines import run_async
from tests.helpers.servers import server_of_its_own
from tests.helpers.tenants import Tenant, make_tenant

EventLike = Any  # a multiprocessing Event (its type is not public)
QueueLike = Any  # a multiprocessing Queue

SEED_STEPS = 20_000
BATCH_STEPS = 10
BATCH_METRICS = 50


@pytest.fixture(scope="module")
def burst_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, Tenant, str]]:
    # Without the compactor: what the test reads back stays in the hot table.
    with server_of_its_own(
        "burst", tmp_path_factory.mktemp("burst"), NORMWATCH_COMPACTION="false"
    ) as server:
        tenant = make_tenant(server.database_url)
        with httpx.Client(base_url=server.url, timeout=60) as api:
            run = api.post("/api/v1/runs", json={"name": "seeded"}, headers=tenant.headers())
            run_id = run.json()["id"]
            steps = list(range(SEED_STEPS))
            body = {
                "steps": steps,
                "metrics": {f"grad/norm/layers.{i}": [1.0 + i] * SEED_STEPS for i in range(5)},
            }
            seeded = api.post(f"/api/v1/runs/{run_id}/metrics", json=body, headers=tenant.headers())
            assert seeded.status_code == 202, seeded.text
        yield server, tenant, run_id


def poll_health(url: str, stop: EventLike, answers: QueueLike) -> None:
    """Poll ``url``/healthz every 50 ms until ``stop``; put ``(latency, failure)`` pairs."""
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            started = time.perf_counter()
            failure = None
            try:
                status = client.get("/healthz").status_code
            except httpx.HTTPError as exc:
                failure = repr(exc)
            else:
                if status != 200:
                    failure = f"HTTP {status}"
            answers.put((time.perf_counter() - started, failure))
            stop.wait(0.05)
    answers.put(None)


@dataclass
class HealthWatch:
    """Polls /healthz every 50 ms and keeps the latencies, from a process of its own: the
    latency is the server's, not this process's, whose event loop sends the burst."""

    url: str
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def __enter__(self) -> HealthWatch:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._answers: QueueLike = context.Queue()
        self._process = context.Process(
            target=poll_health, args=(self.url, self._stop, self._answers), daemon=True
        )
        self._process.start()
        # The first answer says the poller is up before the burst starts.
        self._take(self._answers.get(timeout=60))
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        while (answer := self._answers.get(timeout=30)) is not None:
            self._take(answer)
        self._process.join(10)

    def _take(self, answer: tuple[float, str | None] | None) -> None:
        assert answer is not None
        latency, failure = answer
        self.latencies.append(latency)
        if failure is not None:
            self.failures.append(failure)


@dataclass(frozen=True)
class Answer:
    kind: str
    status: int
    retry_after: str | None
    batch: int | None = None


async def burst(
    server: ServerProcess, tenant: Tenant, run_id: str, *, reads: int, batches: int, lists: int
) -> list[Answer]:
    """All requests of the wave sent at once, each on a connection of its own."""
    limits = httpx.Limits(max_connections=reads + batches + lists, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:

        async def read(_: int) -> Answer:
            r = await client.get(
                f"/api/v1/runs/{run_id}/series",
                params={"metric": [f"grad/norm/layers.{i}" for i in range(5)], "points": 2000},
                headers=tenant.headers("read"),
            )
            return Answer("read", r.status_code, r.headers.get("retry-after"))

        async def ingest(n: int) -> Answer:
            first = SEED_STEPS + n * BATCH_STEPS
            steps = list(range(first, first + BATCH_STEPS))
            body = {
                "steps": steps,
                "metrics": {f"m/{j}": [n + j / 100] * BATCH_STEPS for j in range(BATCH_METRICS)},
            }
            r = await client.post(
                f"/api/v1/runs/{run_id}/metrics", json=body, headers=tenant.headers("ingest")
            )
            return Answer("ingest", r.status_code, r.headers.get("retry-after"), n)

        async def list_runs(_: int) -> Answer:
            r = await client.get("/api/v1/runs", headers=tenant.headers("read"))
            return Answer("list", r.status_code, r.headers.get("retry-after"))

        wave = (
            [read(i) for i in range(reads)]
            + [ingest(i) for i in range(batches)]
            + [list_runs(i) for i in range(lists)]
        )
        return list(await asyncio.gather(*wave))


def stored_batches(database_url: str, run_id: str) -> dict[str, dict[int, float]]:
    """Every hot point of the burst's metrics, by metric and step (the server compacts
    nothing)."""
    with psycopg.connect(admin_dsn(database_url)) as conn:
        rows = conn.execute(
            "SELECT m.name, b.first_step, b.last_step, b.count, b.steps, b.data FROM blocks b "
            "JOIN metrics m ON m.id = b.metric_id JOIN runs r ON r.key = b.run_key "
            "WHERE r.id = %s AND m.name LIKE 'm/%%'",
            (run_id,),
        ).fetchall()
    out: dict[str, dict[int, float]] = {}
    for name, first, last, count, steps, data in rows:
        points = blocks.decode(first, last, count, steps, data)
        column = out.setdefault(name, {})
        for step, value in zip(points.steps.tolist(), points.values.tolist(), strict=True):
            assert step not in column, f"{name} step {step} stored twice"
            column[step] = value
    return out


def test_a_burst_of_200_mixed_requests(
    burst_server: tuple[ServerProcess, Tenant, str], capsys: pytest.CaptureFixture[str]
) -> None:
    server, tenant, run_id = burst_server
    with HealthWatch(server.url) as health:
        time.sleep(0.3)  # a few answers before the wave, as a baseline
        answers = run_async(burst(server, tenant, run_id, reads=80, batches=80, lists=40), 180)
        time.sleep(0.3)
    statuses = Counter((a.kind, a.status) for a in answers)
    with capsys.disabled():
        worst = max(health.latencies)
        print(f"\nburst statuses {dict(sorted(statuses.items()))}; /healthz worst {worst:.3f} s")
    assert len(answers) == 200
    assert {a.status for a in answers} <= {200, 202, 429, 503}, statuses
    assert all(a.retry_after and a.retry_after.isdigit() for a in answers if a.status >= 429)
    assert health.failures == []
    assert max(health.latencies) < 1.0, sorted(health.latencies)[-5:]
    assert len(health.latencies) >= 5

    accepted = [a.batch for a in answers if a.kind == "ingest" and a.status == 202]
    assert accepted, "some batches must get through"
    stored = stored_batches(server.database_url, run_id)
    expected = {
        f"m/{j}": {
            SEED_STEPS + n * BATCH_STEPS + k: n + j / 100
            for n in accepted
            if n is not None
            for k in range(BATCH_STEPS)
        }
        for j in range(BATCH_METRICS)
    }
    assert stored == expected, "every point of every accepted batch is stored, nothing else"
    with capsys.disabled():
        sent = len(accepted) * BATCH_STEPS * BATCH_METRICS
        print(f"points of accepted batches {sent}; stored {sum(map(len, stored.values()))}")


def test_sixty_concurrent_chart_reads(burst_server: tuple[ServerProcess, Tenant, str]) -> None:
    server, tenant, run_id = burst_server
    with HealthWatch(server.url) as health:
        answers = run_async(burst(server, tenant, run_id, reads=60, batches=0, lists=0), 180)
    assert Counter(a.status for a in answers) == {200: 60}
    assert health.failures == [] and max(health.latencies) < 1.0


def test_the_worker_answers_normally_after_the_burst(
    burst_server: tuple[ServerProcess, Tenant, str], tmp_path: Path
) -> None:
    server, tenant, run_id = burst_server
    time.sleep(1.0)
    with httpx.Client(base_url=server.url, timeout=10) as api:
        for _ in range(10):
            r = api.get(
                f"/api/v1/runs/{run_id}/series",
                params={"metric": "grad/norm/layers.0"},
                headers=tenant.headers("read"),
            )
            assert r.status_code == 200
    assert "Traceback" not in server.log()
