"""GET /metrics scraped from a real server process, on Postgres and on SQLite."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from normwatch.server.config import Settings
from normwatch.server.telemetry import INGEST_ROUTE
from normwatch.testing import ServerProcess, free_port, running_server
from tests.helpers.api import create_run
from tests.helpers.databases import migrated_sqlite
from tests.helpers.prometheus import LATENCY, scrape
from tests.helpers.servers import ALERTING
from tests.helpers.tenants import Tenant, make_tenant


def test_ingest_counters_move_by_exactly_what_was_posted(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant)
    url = f"/api/v1/runs/{run}/metrics"
    before = scrape(api)
    batch = {"steps": [1, 2, 3], "metrics": {"loss": [1.0, None, "NaN"], "grad/norm": [1, 2, 3]}}
    accepted = api.post(url, json=batch, headers=tenant.headers("ingest"))
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["accepted"] == 5
    again = api.post(url, json=batch, headers=tenant.headers("ingest"))  # every point stored
    assert again.json()["accepted"] == 0 and again.json()["ignored"] == 5
    bad = {"steps": [1, 2], "metrics": {"loss": [1.0]}}
    assert api.post(url, json=bad, headers=tenant.headers("ingest")).status_code == 422
    assert api.post(url, json=batch).status_code == 401
    after = scrape(api)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert delta("normwatch_ingest_points_total") == 5
    assert delta("normwatch_ingest_ignored_points_total") == 5
    assert delta("normwatch_ingest_batches_total", code="202") == 2
    assert delta("normwatch_ingest_batches_total", code="422") == 1
    assert delta("normwatch_ingest_batches_total", code="401") == 1
    post = {"route": INGEST_ROUTE, "method": "POST"}
    assert delta(f"{LATENCY}_count", **post, status="2xx") == 2
    assert delta(f"{LATENCY}_count", **post, status="4xx") == 2
    assert delta(f"{LATENCY}_bucket", **post, status="4xx", le="+Inf") == 2
    # Nothing names a project, a run or a token.
    for secret in (run, tenant.project, tenant.ingest, tenant.admin):
        assert secret not in after.text


def test_latency_is_labelled_by_route_template_only(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant, "templates")
    logged = api.post(
        f"/api/v1/runs/{run}/metrics",
        json={"steps": [0, 1], "metrics": {"x": [1.0, 2.0]}},
        headers=tenant.headers("ingest"),
    )
    assert logged.status_code == 202, logged.text
    headers = tenant.headers("read")
    assert api.get(f"/api/v1/runs/{run}/metrics", headers=headers).status_code == 200
    before = scrape(api)
    for _ in range(3):
        r = api.get(f"/api/v1/runs/{run}/series", params={"metric": "x"}, headers=headers)
        assert r.status_code == 200, r.text
    assert api.get(f"/api/v1/runs/{run}/nothing-here").status_code == 404
    after = scrape(api)
    series = {"route": "/api/v1/runs/{run_id}/series", "method": "GET", "status": "2xx"}
    assert (
        after.value(f"{LATENCY}_count", **series) - before.value(f"{LATENCY}_count", **series) == 3
    )
    unmatched = {"route": "unmatched", "method": "GET", "status": "4xx"}
    assert (
        after.value(f"{LATENCY}_count", **unmatched) - before.value(f"{LATENCY}_count", **unmatched)
        == 1
    )
    routes = after.label_values(f"{LATENCY}_count", "route")
    assert {"/api/v1/runs", "/metrics", "/healthz"} <= routes
    assert all(r == "unmatched" or r.startswith("/") and run not in r for r in routes), routes
    assert after.value(f"{LATENCY}_bucket", **series, le="+Inf") == after.value(
        f"{LATENCY}_count", **series
    )


def test_pool_and_process_gauges(server: ServerProcess, api: httpx.Client) -> None:
    metrics = scrape(api)
    # NORMWATCH_DB_POOL_SIZE (its default) on Postgres; SQLAlchemy's default pool (5) for an
    # SQLite file.
    default = Settings.model_fields["db_pool_size"].default
    expected_size = default if server.database_url.startswith("postgresql") else 5
    assert metrics.value("normwatch_db_pool_size") == expected_size
    # Between requests the server holds no connection beyond its pool. (How many it has
    # checked out depends on its background workers at that instant: `test_telemetry`
    # counts them exactly, in process.)
    assert metrics.value("normwatch_db_pool_overflow") == 0
    assert metrics.value("normwatch_worker_processes") == 1
    assert metrics.value("normwatch_http_requests_in_flight") == 1  # this scrape
    assert metrics.value("normwatch_scrape_collector_up", collector="alert_backlog") == 1
    assert metrics.worker == str(server.process.pid)


def test_alert_backlog_follows_an_undeliverable_notification(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/hook"  # refuses connections: retried, pending
    with running_server(fresh_pg_url, tmp_path, **ALERTING) as srv:
        tenant = make_tenant(fresh_pg_url)
        with httpx.Client(base_url=srv.url, headers=tenant.headers(), timeout=30) as api:
            quiet = scrape(api)
            assert quiet.value("normwatch_alert_notifications_pending") == 0
            assert quiet.value("normwatch_alert_notifications_oldest_pending_age_seconds") == 0
            rule = {
                "name": "loss 5+",
                "metric": "loss",
                "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
                "channels": [{"type": "webhook", "url": nobody, "secret": "s"}],
            }
            assert api.post("/api/v1/alert-rules", json=rule).status_code == 201
            run = create_run(api, tenant)
            batch = {"steps": [1, 2], "metrics": {"loss": [1.0, 9.0]}}
            assert api.post(f"/api/v1/runs/{run}/metrics", json=batch).status_code == 202
            posted = time.monotonic()
            pending = scrape(api)
            while pending.value("normwatch_alert_notifications_pending") != 1:
                assert time.monotonic() - posted < 10, pending.text
                time.sleep(0.25)
                pending = scrape(api)
            first_age = pending.value("normwatch_alert_notifications_oldest_pending_age_seconds")
            assert 0 < first_age < 10
            time.sleep(2.5)  # longer than the scrape cache
            later = scrape(api)
            assert later.value("normwatch_alert_notifications_pending") == 1
            age = later.value("normwatch_alert_notifications_oldest_pending_age_seconds")
            assert age >= first_age + 2
            [alert] = api.get("/api/v1/alerts", params={"run": run}).json()
            assert alert["notifications"][0]["status"] == "pending"


def test_metrics_token_is_required_when_set(tmp_path: Path) -> None:
    database_url = migrated_sqlite(tmp_path / "token.db")
    tenant = make_tenant(database_url)
    with (
        running_server(database_url, tmp_path, NORMWATCH_METRICS_TOKEN="scrape-me") as srv,
        httpx.Client(base_url=srv.url, timeout=30) as client,
    ):
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Basic scrape-me"},
            tenant.headers("admin"),  # API tokens belong to projects, not to the service
        ):
            r = client.get("/metrics", headers=headers)
            assert r.status_code == 401, headers
            assert r.headers["WWW-Authenticate"] == "Bearer"
        metrics = scrape(client, Authorization="Bearer scrape-me")
        assert metrics.value("normwatch_worker_processes") == 1
        assert client.get("/healthz").status_code == 200


def test_openmetrics_when_asked(api: httpx.Client) -> None:
    r = api.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")


def test_compaction_gauges_follow_the_backlog(tmp_path: Path) -> None:
    database_url = migrated_sqlite(tmp_path / "lag.db")
    tenant = make_tenant(database_url)
    with (
        running_server(
            database_url,
            tmp_path,
            NORMWATCH_COMPACTION="false",
        ) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as client,
    ):
        created = time.time()
        run = create_run(client, tenant)
        body = {"steps": list(range(500)), "metrics": {"g": [1.0] * 500, "h": [2.0] * 500}}
        r = client.post(f"/api/v1/runs/{run}/metrics", json=body, headers=tenant.headers())
        assert r.status_code == 202
        metrics = scrape(client)
        since = time.time() - created
        assert metrics.value("normwatch_compaction_pending_runs") == 1
        assert metrics.value("normwatch_hot_points") == 1000
        # Never compacted: the lag runs from the run's creation, within this test's clock.
        assert 0 < metrics.value("normwatch_compaction_lag_seconds") <= since
    with (
        running_server(
            database_url,
            tmp_path,
            NORMWATCH_COMPACTION_INTERVAL_S="0.2",
            NORMWATCH_COMPACTION_IDLE_S="0.5",
        ) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as client,
    ):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metrics = scrape(client)
            if metrics.value("normwatch_hot_points") == 0:
                break
            time.sleep(0.5)
        assert metrics.value("normwatch_hot_points") == 0
        assert metrics.value("normwatch_compaction_pending_runs") == 0
        assert metrics.value("normwatch_scrape_collector_up", collector="compaction") == 1
