"""Interactive requests ahead of metric batches within a worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from normwatch.server.admission import ReadsFirst, _is_batch
from normwatch.testing import running_server

from tests.conftest import make_tenant


def test_a_batch_waits_while_a_read_runs_and_goes_on_when_it_ends() -> None:
    gate = ReadsFirst(max_wait_s=30.0)
    assert gate.wait_turn() == 0.0  # nothing interactive: no wait at all
    waited: list[float] = []
    with gate.interactive():
        batch = threading.Thread(target=lambda: waited.append(gate.wait_turn()))
        batch.start()
        batch.join(0.3)
        assert batch.is_alive()  # held back while the read runs
    batch.join(5.0)
    assert not batch.is_alive() and waited and 0.25 < waited[0] < 5.0
    assert gate.active == 0


def test_a_long_read_holds_a_batch_back_only_up_to_the_limit() -> None:
    gate = ReadsFirst(max_wait_s=0.2)
    with gate.interactive(), gate.interactive():
        assert gate.active == 2
        started = time.perf_counter()
        waited = gate.wait_turn()
        assert 0.19 <= waited <= time.perf_counter() - started
    assert gate.active == 0 and gate.wait_turn() == 0.0


@pytest.mark.parametrize(
    ("method", "path", "batch"),
    [
        ("POST", "/api/v1/runs/abc123/metrics", True),
        ("GET", "/api/v1/runs/abc123/metrics", False),  # the metric list is a read
        ("GET", "/api/v1/runs/abc123/series", False),
        ("POST", "/api/v1/runs", False),
        ("POST", "/api/v1/runs/abc/events", False),
        ("POST", "/api/v1/runs//metrics", False),
        ("POST", "/api/v1/runs/a/b/metrics", False),
        ("POST", "/_dash-update-component", False),
        ("GET", "/metrics", False),
    ],
)
def test_only_metric_batches_are_batch_work(method: str, path: str, batch: bool) -> None:
    assert _is_batch({"type": "http", "method": method, "path": path}) is batch


def test_the_server_holds_batches_back_while_a_request_is_in_progress(
    pg_url: str, tmp_path: Path
) -> None:
    """A request whose body is still arriving is in progress; a batch sent meanwhile is
    answered only once it is over (or after the limit), and the wait is counted."""
    tenant = make_tenant(pg_url)
    auth = tenant.headers("ingest")
    release = threading.Event()

    def slow_body() -> Iterator[bytes]:
        yield b'{"name": "slow-'
        release.wait(30)
        yield b'run"}'

    with running_server(pg_url, tmp_path, NORMWATCH_INTERACTIVE_FIRST_S="20") as server:
        with httpx.Client(base_url=server.url, headers=auth, timeout=60) as api:
            run_id = api.post("/api/v1/runs", json={"name": "trainer"}).json()["id"]
            batch = {"steps": [1, 2], "metrics": {"loss": [2.0, 1.5]}}
            assert api.post(f"/api/v1/runs/{run_id}/metrics", json=batch).status_code == 202

            answers: dict[str, httpx.Response] = {}

            def send(name: str, **request: object) -> None:
                with httpx.Client(base_url=server.url, headers=auth, timeout=60) as own:
                    answers[name] = own.request(**request)  # type: ignore[arg-type]

            slow = threading.Thread(
                target=send,
                args=("slow",),
                kwargs={
                    "method": "POST",
                    "url": "/api/v1/runs",
                    "content": slow_body(),
                    "headers": {"Content-Type": "application/json"},
                },
            )
            slow.start()
            time.sleep(0.5)  # the slow request's headers are in: it is in progress
            sender = threading.Thread(
                target=send,
                args=("batch",),
                kwargs={
                    "method": "POST",
                    "url": f"/api/v1/runs/{run_id}/metrics",
                    "json": {"steps": [3], "metrics": {"loss": [1.0]}},
                },
            )
            sender.start()
            sender.join(1.5)
            assert sender.is_alive() and "batch" not in answers  # standing aside
            release.set()
            slow.join(30)
            sender.join(30)
            assert answers["slow"].status_code == 200, answers["slow"].text
            assert answers["batch"].status_code == 202, answers["batch"].text
            series = api.get(
                f"/api/v1/runs/{run_id}/series",
                params={"metric": "loss"},
                headers=tenant.headers("read"),
            ).json()
            assert series["series"][0]["steps"] == [1, 2, 3]
            scrape = api.get("/metrics").text
    deferred = [
        float(line.split()[-1])
        for line in scrape.splitlines()
        if line.startswith("normwatch_ingest_deferred_seconds_total")
    ]
    assert deferred and deferred[0] >= 1.0
