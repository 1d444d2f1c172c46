"""`normwatch serve --workers 2` on Postgres: requests spread, counts add up, nothing doubles."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from normwatch.server.config import Settings
from normwatch.server.telemetry import INGEST_ROUTE
from normwatch.testing import ServerProcess, start_server
from tests.helpers.api import create_run
from tests.helpers.databases import scratch_pg
from tests.helpers.prometheus import LATENCY, Scrape
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.servers import ALERTING, server_of_its_own
from tests.helpers.tenants import make_tenant

BATCHES = 120
STEPS_PER_BATCH = 10


def wait_for_workers(url: str, count: int, timeout: float = 60.0) -> None:
    """Until a scrape counts ``count`` live workers (the first may answer before the rest)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = Scrape(httpx.get(f"{url}/metrics", timeout=10))
        if seen.value("normwatch_worker_processes") == count:
            return
        assert time.monotonic() < deadline, seen.text
        time.sleep(0.2)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Two worker processes, the only server on their database."""
    log_dir = tmp_path_factory.mktemp("workers")
    with server_of_its_own("workers", log_dir, workers=2, **ALERTING) as proc:
        wait_for_workers(proc.url, 2)
        yield proc


def fresh_connections(url: str, **headers: str) -> httpx.Client:
    """A client that opens a connection for every request, so that either worker may take it."""
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.Client(base_url=url, headers=headers, limits=limits, timeout=60)


def test_batches_spread_over_both_workers_and_are_counted_once(two_workers: ServerProcess) -> None:
    tenant = make_tenant(two_workers.database_url)
    with httpx.Client(base_url=two_workers.url, timeout=60) as api:
        run = create_run(api, tenant, "two-workers")
        before = Scrape(api.get("/metrics"))
    url = f"/api/v1/runs/{run}/metrics"
    batches = []
    for i in range(BATCHES):
        steps = list(range(i * STEPS_PER_BATCH, (i + 1) * STEPS_PER_BATCH))
        batches.append(
            {"steps": steps, "metrics": {"loss": [s / 10 for s in steps], "grad/norm": steps}}
        )
    resent = batches[::4]  # the same batches again, concurrently with the first sends
    with fresh_connections(two_workers.url, **tenant.headers("ingest")) as api:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda body: api.post(url, json=body), batches + resent))
    assert [a.status_code for a in answers] == [202] * len(answers), answers[0].text
    workers = {a.headers["x-normwatch-worker"] for a in answers}
    assert len(workers) == 2, workers
    accepted = sum(a.json()["accepted"] for a in answers)

    # Every step stored once: nothing lost, nothing doubled by the re-sends.
    total = BATCHES * STEPS_PER_BATCH
    with httpx.Client(base_url=two_workers.url, headers=tenant.headers("read")) as api:
        r = api.get(
            f"/api/v1/runs/{run}/series", params={"metric": ["loss", "grad/norm"], "points": total}
        )
        assert r.status_code == 200, r.text
        series = {s["metric"]: s for s in r.json()["series"]}
        assert series["loss"]["steps"] == list(range(total))
        assert series["loss"]["values"] == [s / 10 for s in range(total)]
        assert series["grad/norm"]["values"] == [float(s) for s in range(total)]

    # Whichever worker answers the scrape, it counts the batches both workers took.
    scrapes: list[Scrape] = []
    deadline = time.monotonic() + 30
    with fresh_connections(two_workers.url) as client:
        while len({s.worker for s in scrapes}) < 2 or len(scrapes) < 6:
            assert time.monotonic() < deadline, [s.worker for s in scrapes]
            scrapes.append(Scrape(client.get("/metrics")))
    ingest_2xx = {"route": INGEST_ROUTE, "method": "POST", "status": "2xx"}
    for after in scrapes:
        assert after.value("normwatch_worker_processes") == 2
        assert after.value("normwatch_http_requests_in_flight") == 1  # the scrape itself
        assert (
            after.value("normwatch_ingest_points_total")
            - before.value("normwatch_ingest_points_total")
            == accepted
        )
        assert after.value("normwatch_ingest_batches_total", code="202") - before.value(
            "normwatch_ingest_batches_total", code="202"
        ) == len(answers)
        assert after.value(f"{LATENCY}_count", **ingest_2xx) - before.value(
            f"{LATENCY}_count", **ingest_2xx
        ) == len(answers)
        pool_size = Settings.model_fields["db_pool_size"].default
        assert after.value("normwatch_db_pool_size") == 2 * pool_size  # a pool per worker


def test_each_notification_is_sent_once_by_one_of_the_dispatchers(
    two_workers: ServerProcess,
) -> None:
    with WebhookReceiver() as receiver:
        tenant = make_tenant(two_workers.database_url)
        with httpx.Client(base_url=two_workers.url, headers=tenant.headers(), timeout=30) as api:
            rule = {
                "name": "loss 5+",
                "metric": "loss",
                "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
                "channels": [{"type": "webhook", "url": receiver.url(), "secret": "s"}],
            }
            assert api.post("/api/v1/alert-rules", json=rule).status_code == 201
            run = create_run(api, tenant, "alerting")
            crossing = {"steps": [1, 2, 3], "metrics": {"loss": [1.0, 9.0, 2.0]}}
            r = api.post(f"/api/v1/runs/{run}/metrics", json=crossing)
            assert r.status_code == 202, r.text
        payloads = receiver.wait_for(2)
        time.sleep(1.0)  # several dispatcher ticks on both workers
        assert [(p["state"], p["step"]) for p in receiver.payloads()] == [
            ("firing", 2),
            ("resolved", 3),
        ], payloads
        with httpx.Client(base_url=two_workers.url, timeout=10) as client:
            deadline = time.monotonic() + 10
            while Scrape(client.get("/metrics")).value("normwatch_alert_notifications_pending"):
                assert time.monotonic() < deadline
                time.sleep(0.5)


def test_every_rule_change_reaches_both_workers_by_the_next_batch(
    two_workers: ServerProcess,
) -> None:
    """Workers keep each project's rules while its rule fingerprint is unchanged. Every
    change made through one worker (create, disable, enable, edit, delete) must decide the
    very next batch on either worker: a batch crossing the threshold fires or it does not."""
    tenant = make_tenant(two_workers.database_url)
    with httpx.Client(base_url=two_workers.url, headers=tenant.headers(), timeout=30) as admin:
        run = create_run(admin, tenant, "rule-changes")
    step = 0

    def fired(workers: set[str]) -> list[str]:
        """Send a batch that crosses 5 and comes back, several times over fresh connections
        (so that both workers take some); the states each one recorded."""
        nonlocal step
        states = []
        with fresh_connections(two_workers.url, **tenant.headers()) as api:
            for _ in range(6):
                steps = [step, step + 1]
                step += 2
                body = {"steps": steps, "metrics": {"loss": [9.0, 1.0]}}
                r = api.post(f"/api/v1/runs/{run}/metrics", json=body)
                assert r.status_code == 202, r.text
                workers.add(r.headers["x-normwatch-worker"])
                got = api.get("/api/v1/alerts", params={"run": run, "limit": 2000}).json()
                states.append(",".join(sorted(a["state"] for a in got if a["step"] in steps)))
        return states

    workers: set[str] = set()
    assert fired(workers) == [""] * 6  # no rule yet: both workers hold "none" for the project
    rule = {
        "name": "loss 5+",
        "metric": "loss",
        "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
    }
    with httpx.Client(base_url=two_workers.url, headers=tenant.headers(), timeout=30) as admin:
        created = admin.post("/api/v1/alert-rules", json=rule)
        assert created.status_code == 201, created.text
        rid = created.json()["id"]
        assert fired(workers) == ["firing,resolved"] * 6
        assert admin.patch(f"/api/v1/alert-rules/{rid}", json={"enabled": False}).is_success
        assert fired(workers) == [""] * 6
        assert admin.patch(f"/api/v1/alert-rules/{rid}", json={"enabled": True}).is_success
        assert fired(workers) == ["firing,resolved"] * 6
        edit = {"condition": {"kind": "threshold", "op": ">=", "value": 10.0}}
        assert admin.patch(f"/api/v1/alert-rules/{rid}", json=edit).is_success
        assert fired(workers) == [""] * 6  # 9 no longer crosses
        assert admin.delete(f"/api/v1/alert-rules/{rid}").status_code == 204
        assert fired(workers) == [""] * 6
    assert len(workers) == 2, workers


def test_values_of_an_earlier_run_are_cleared_at_start(tmp_path: Path) -> None:
    """A PROMETHEUS_MULTIPROC_DIR given by the operator is emptied, not inherited.

    One worker is enough: with the folder set, it keeps its values there too."""
    folder = tmp_path / "prometheus"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(folder)}
    with scratch_pg("multiproc") as url:
        tenant = make_tenant(url)
        first = start_server(url, tmp_path, **env)
        try:
            with httpx.Client(base_url=first.url, timeout=30) as api:
                run = create_run(api, tenant)
                batch = {"steps": [1], "metrics": {"loss": [1.0]}}
                r = api.post(
                    f"/api/v1/runs/{run}/metrics", json=batch, headers=tenant.headers("ingest")
                )
                assert r.status_code == 202
                assert Scrape(api.get("/metrics")).value("normwatch_ingest_points_total") == 1
        finally:
            first.stop()
        assert list(folder.glob("counter_*.db"))  # the operator's folder is kept
        second = start_server(url, tmp_path, **env)
        try:
            scrape = Scrape(httpx.get(f"{second.url}/metrics", timeout=10))
            assert scrape.value("normwatch_ingest_points_total") == 0
        finally:
            second.stop()
