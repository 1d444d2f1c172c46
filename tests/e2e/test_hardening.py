"""Inputs and load that once made the service answer 500 or stall, against real servers.

Each test reproduces a failure seen in a probe of the service (a burst followed by an idle
spell, pool exhaustion, a 100k-name batch, oversized and malformed bodies, text and numbers
the database cannot store) and checks the answer a client should get: a 4xx naming what
is wrong, or 503 with ``Retry-After`` under overload; never 500, and nothing stored lost.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from normwatch.server.db import build_engine, session_factory
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.schedule import compact_everything
from normwatch.testing import ServerProcess, running_server
from tests.helpers.api import create_run, post_batch
from tests.helpers.receivers import Reply, WebhookReceiver
from tests.helpers.servers import ALERTING
from tests.helpers.tenants import Tenant, make_tenant

# --- the pool hands out clean connections -----------------------------------------------------


@pytest.fixture(scope="module")
def idle_ping_server(
    pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server whose pooled connections are pinged after 0.3 s idle (5 s by default)."""
    with running_server(
        pg_url, tmp_path_factory.mktemp("idle-ping"), NORMWATCH_DB_PING_IDLE_S="0.3"
    ) as server:
        yield server


def test_chart_reads_after_a_burst_and_an_idle_spell(idle_ping_server: ServerProcess) -> None:
    tenant = make_tenant(idle_ping_server.database_url)
    with httpx.Client(base_url=idle_ping_server.url, timeout=60) as api:
        run_id = create_run(api, tenant)
        batch = {"steps": list(range(100)), "metrics": {"loss": [1.0] * 100}}
        assert post_batch(api, tenant, run_id, batch).status_code == 202
        url = f"/api/v1/runs/{run_id}/series"
        params = {"metric": "loss"}

        def read(_: int) -> int:
            return api.get(url, params=params, headers=tenant.headers("read")).status_code

        with ThreadPoolExecutor(30) as pool:  # grows the pool past its idle connections
            assert set(pool.map(read, range(30))) == {200}
        time.sleep(1.0)  # every connection idles past the ping threshold
        statuses = [read(i) for i in range(15)]
        # The rule preview reads a snapshot the same way.
        rule = api.post(
            "/api/v1/alert-rules",
            json={"name": "loss", "metric": "loss", "condition": {"kind": "non_finite"}},
            headers=tenant.headers("admin"),
        )
        assert rule.status_code == 201, rule.text
        time.sleep(1.0)
        preview = api.get(
            f"/api/v1/alert-rules/{rule.json()['id']}/preview",
            params={"run": run_id},
            headers=tenant.headers("read"),
        )
    assert statuses == [200] * 15
    assert preview.status_code == 200, preview.text


def test_an_exhausted_pool_answers_503_with_retry_after(pg_url: str, tmp_path: Path) -> None:
    """A pool smaller than the admitted requests (a misconfiguration admission normally
    prevents) makes requests wait for a connection; past the wait they get 503, not 500."""
    with running_server(
        pg_url,
        tmp_path,
        NORMWATCH_DB_POOL_SIZE="1",
        NORMWATCH_DB_POOL_TIMEOUT_S="0.05",
        NORMWATCH_TOKEN_CACHE_S="0",
        # One token sends all 40: with its fair share of the read slots (8) it would hold
        # too few at once to run the pool dry.
        NORMWATCH_READ_PER_CALLER="16",
    ) as server:
        tenant = make_tenant(pg_url)
        with httpx.Client(base_url=server.url, timeout=60) as api:
            run_id = create_run(api, tenant)

            def read(_: int) -> httpx.Response:
                return api.get(f"/api/v1/runs/{run_id}", headers=tenant.headers("read"))

            with ThreadPoolExecutor(40) as pool:
                answers = list(pool.map(read, range(200)))
        log = server.log()
    statuses = {r.status_code for r in answers}
    assert statuses <= {200, 503}, statuses
    assert 503 in statuses, "a pool of 2 connections should not serve 40 at once"
    refused = [r for r in answers if r.status_code == 503]
    assert all(r.headers["retry-after"].isdigit() for r in refused)
    assert "no database connection free" in refused[0].json()["detail"]
    assert "Traceback" not in log


# --- sizes have bounds ------------------------------------------------------------------------


def test_a_batch_with_too_many_metric_names_is_refused(api: httpx.Client, tenant: Tenant) -> None:
    run_id = create_run(api, tenant)
    names = {f"m/{i}": [1.0] for i in range(100_000)}
    r = post_batch(api, tenant, run_id, {"steps": [1], "metrics": names})
    assert r.status_code == 413
    assert "100000 metrics" in r.json()["detail"] and "20000" in r.json()["detail"]
    metrics = api.get(f"/api/v1/runs/{run_id}/metrics", headers=tenant.headers("read"))
    assert metrics.json() == []


def test_a_run_cannot_grow_past_its_metric_limit(db_url: str, tmp_path: Path) -> None:
    with running_server(db_url, tmp_path, NORMWATCH_MAX_RUN_METRICS="50") as server:
        tenant = make_tenant(db_url)
        with httpx.Client(base_url=server.url, timeout=60) as api:
            run_id = create_run(api, tenant)
            first = {"steps": [1], "metrics": {f"a/{i}": [1.0] for i in range(40)}}
            assert post_batch(api, tenant, run_id, first).status_code == 202
            more = {"steps": [2], "metrics": {f"b/{i}": [1.0] for i in range(20)}}
            refused = post_batch(api, tenant, run_id, more)
            again = {"steps": [2], "metrics": {f"a/{i}": [2.0] for i in range(40)}}
            known = post_batch(api, tenant, run_id, again)
            listed = api.get(f"/api/v1/runs/{run_id}/metrics", headers=tenant.headers("read"))
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "metrics: the run has 40 metrics and this batch adds 20; a run may have at most 50 "
        "(NORMWATCH_MAX_RUN_METRICS)"
    )
    assert known.status_code == 202  # names it already has are always welcome
    assert len(listed.json()) == 40


@pytest.mark.slow
def test_a_run_with_more_metrics_than_a_statement_can_name_compacts(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    """A run with more metrics than one statement's 65,535 parameters could name (three a
    metric): the compactor failed on it every pass and held its memory."""
    count = 22_000
    pg_url = fresh_pg_url  # no other server's compactor may take part
    with running_server(
        pg_url,
        tmp_path,
        NORMWATCH_MAX_BATCH_METRICS=str(count),
        NORMWATCH_MAX_RUN_METRICS=str(count),
        NORMWATCH_COMPACTION="false",
    ) as server:
        tenant = make_tenant(pg_url)
        with httpx.Client(base_url=server.url, timeout=120) as api:
            run_id = create_run(api, tenant)
            names = {f"layer/{i}": [float(i)] for i in range(count)}
            r = post_batch(api, tenant, run_id, {"steps": [1], "metrics": names})
            assert r.status_code == 202, r.text
            engine = build_engine(pg_url, pool_size=1)
            try:
                report = compact_everything(session_factory(engine), Policy())
            finally:
                engine.dispose()
            assert (report.series, report.points) == (count, count)
            got = api.get(
                f"/api/v1/runs/{run_id}/series",
                params={"metric": ["layer/0", f"layer/{count - 1}"]},
                headers=tenant.headers("read"),
            ).json()["series"]
    assert [(s["steps"], s["values"]) for s in got] == [([1], [0.0]), ([1], [count - 1.0])]


def test_request_bodies_are_bounded_on_every_route(api: httpx.Client, tenant: Tenant) -> None:
    big_config = {"blob": "x" * (40 * 2**20)}
    r = api.post(
        "/api/v1/runs", json={"name": "big", "config": big_config}, headers=tenant.headers()
    )
    assert r.status_code == 413
    assert len(r.content) < 1000
    r = api.post("/login", content=b"token=" + b"x" * (2 * 2**20))
    assert r.status_code == 413
    runs = api.get("/api/v1/runs", headers=tenant.headers("read"))
    assert runs.status_code == 200 and runs.json() == []


def test_a_run_config_has_bounded_size_and_depth(api: httpx.Client, tenant: Tenant) -> None:
    wide = {f"k{i}": "v" * 100 for i in range(1000)}  # ~110 KB: under the body limit
    r = api.post("/api/v1/runs", json={"name": "wide", "config": wide}, headers=tenant.headers())
    assert r.status_code == 422
    assert "config" in json.dumps(r.json()) and "65536" in r.text
    assert len(r.content) < 2000, "the input is not echoed back"
    deep: object = 1
    for _ in range(100):
        deep = {"a": deep}
    r = api.post("/api/v1/runs", json={"name": "deep", "config": deep}, headers=tenant.headers())
    assert r.status_code == 422
    assert "nested" in r.text
    ok = api.post(
        "/api/v1/runs",
        json={"name": "fine", "config": {"model": {"layers": 48, "d": [1, 2]}}},
        headers=tenant.headers(),
    )
    assert ok.status_code == 200


def test_a_huge_declared_length_is_refused_without_waiting(
    server: ServerProcess, tenant: Tenant
) -> None:
    parts = urlsplit(server.url)
    assert parts.hostname is not None and parts.port is not None
    for path in ("/api/v1/runs", "/login", f"/api/v1/runs/{'0' * 32}/metrics"):
        with socket.create_connection((parts.hostname, parts.port), timeout=5) as conn:
            started = time.monotonic()
            conn.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer {tenant.ingest}\r\n"
                f"Content-Length: {10 * 2**30}\r\n\r\n".encode()
            )
            answer = conn.recv(4096)
            took = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 413 "), (path, answer)
        assert took < 2.0, (path, took)


def test_validation_errors_do_not_echo_the_input(api: httpx.Client, tenant: Tenant) -> None:
    r = api.post(
        "/api/v1/runs",
        json={"name": "n" * 300_000, "tags": ["t" * 300_000]},
        headers=tenant.headers(),
    )
    assert r.status_code == 422
    assert len(r.content) < 2000
    detail = r.json()["detail"]
    assert {tuple(d["loc"]) for d in detail} >= {("body", "name")}
    assert all(set(d) <= {"type", "loc", "msg", "ctx"} for d in detail)


# --- inputs the database cannot store are 4xx -------------------------------------------------


def test_deeply_nested_json_is_a_4xx(api: httpx.Client, tenant: Tenant) -> None:
    run_id = create_run(api, tenant)
    nested = b"[" * 5000 + b"]" * 5000
    for path in ("/api/v1/runs", f"/api/v1/runs/{run_id}/metrics", f"/api/v1/runs/{run_id}/events"):
        body = b'{"name": "x", "steps": [1], "metrics": {}, "config": ' + nested + b"}"
        r = api.post(
            path, content=body, headers={**tenant.headers(), "Content-Type": "application/json"}
        )
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:200])


def test_lone_surrogates_are_refused(api: httpx.Client, tenant: Tenant) -> None:
    run_id = create_run(api, tenant)
    headers = {**tenant.headers(), "Content-Type": "application/json"}
    bodies = {
        "/api/v1/runs": b'{"name": "bad\\ud800name"}',
        f"/api/v1/runs/{run_id}/metrics": b'{"steps": [1], "metrics": {"m\\udc00": [1.0]}}',
        f"/api/v1/runs/{run_id}/events": b'{"step": 1, "text": "x\\ud800"}',
        "/api/v1/alert-rules": b'{"name": "r\\ud800", "metric": "loss",'
        b' "condition": {"kind": "non_finite"}}',
    }
    for path, body in bodies.items():
        r = api.post(path, content=body, headers=headers)
        assert r.status_code in (400, 422), (path, r.status_code, r.text[:200])
        assert any(w in r.text.lower() for w in ("surrogate", "unicode", "json")), r.text


def test_nul_characters_are_refused(api: httpx.Client, tenant: Tenant) -> None:
    run_id = create_run(api, tenant)
    headers = tenant.headers()
    posts = {
        "/api/v1/runs": {"name": "ok", "tags": ["a\x00b"]},
        f"/api/v1/runs/{run_id}/events": {"step": 1, "text": "a\x00b"},
        f"/api/v1/runs/{run_id}/events#kind": {"step": 1, "kind": "a\x00", "text": "t"},
        "/api/v1/alert-rules": {
            "name": "r",
            "metric": "lo\x00ss",
            "condition": {"kind": "non_finite"},
        },
    }
    for path, body in posts.items():
        r = api.post(path.split("#")[0], json=body, headers=headers)
        assert r.status_code == 422, (path, r.status_code, r.text[:200])
    gets = [
        ("/api/v1/runs", {"project": "a\x00b"}),
        (f"/api/v1/runs/{run_id}/series", {"metric": "lo\x00ss"}),
        ("/api/v1/alerts", {"run": "a\x00"}),
        ("/api/v1/runs/a%00b", {}),
    ]
    for path, params in gets:
        r = api.get(path, params=params, headers=headers)
        assert r.status_code == 400, (path, r.status_code, r.text[:200])
        assert "NUL" in r.json()["detail"]


def test_numbers_past_their_column_are_refused(api: httpx.Client, tenant: Tenant) -> None:
    run_id = create_run(api, tenant)
    headers = tenant.headers()
    cases = [
        ("post", "/api/v1/runs", {"name": "far", "start_step": 2**63}),
        ("post", f"/api/v1/runs/{run_id}/events", {"step": 2**63, "text": "t"}),
        ("post", f"/api/v1/runs/{run_id}/events", {"step": 1, "text": "t", "segment": 2**31}),
        ("post", f"/api/v1/runs/{run_id}/metrics", {"steps": [1], "metrics": {}, "segment": 2**31}),
        ("get", f"/api/v1/alert-rules/{2**31}", None),
        ("get", f"/api/v1/alert-rules/{2**63}", None),
        ("patch", f"/api/v1/alert-rules/{2**31}", {"enabled": False}),
        ("delete", f"/api/v1/alert-rules/{2**40}", None),
        ("get", f"/api/v1/runs/{run_id}/series?metric=loss&start={2**63}", None),
        ("get", f"/api/v1/runs/{run_id}/series?metric=loss&end={-(2**63) - 1}", None),
    ]
    for method, path, body in cases:
        r = api.request(method, path, json=body, headers=headers)
        assert r.status_code in (404, 422), (method, path, r.status_code, r.text[:200])


# --- what read tokens see of alert channels ---------------------------------------------------


HOOK_PATH = "/hooks/T0k3n-in-path"
REFUSAL = b"upstream refused: api_key=sk-live-12345 expired"
"""What the receiver answers every POST, with a 500: a body that tells too much."""


def test_read_tokens_see_neither_webhook_paths_nor_receiver_answers(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    # A database of its own: every server on a database delivers from its outbox, and
    # another test's server, without this allow list, would refuse the receiver.
    pg_url = fresh_pg_url
    with (
        WebhookReceiver(reply=Reply(500, body=REFUSAL)) as receiver,
        running_server(pg_url, tmp_path, **ALERTING) as server,
    ):
        tenant = make_tenant(pg_url)
        with httpx.Client(base_url=server.url, timeout=30) as api:
            rule = {
                "name": "nan",
                "metric": "loss",
                "condition": {"kind": "non_finite"},
                "channels": [{"type": "webhook", "url": receiver.url(HOOK_PATH), "secret": "s"}],
            }
            made = api.post("/api/v1/alert-rules", json=rule, headers=tenant.headers())
            assert made.status_code == 201, made.text
            run_id = create_run(api, tenant)
            batch = {"steps": [1], "metrics": {"loss": ["NaN"]}}
            assert post_batch(api, tenant, run_id, batch).status_code == 202
            receiver.wait_for_requests(1)
            time.sleep(0.5)  # the attempt is recorded after the answer

            def seen(scope: str) -> tuple[str, str | None]:
                rules = api.get("/api/v1/alert-rules", headers=tenant.headers(scope)).json()
                alerts = api.get("/api/v1/alerts", headers=tenant.headers(scope)).json()
                return rules[0]["channels"][0]["url"], alerts[0]["notifications"][0]["last_error"]

            admin_url, admin_error = seen("admin")
            read_url, read_error = seen("read")
    assert admin_url == receiver.url(HOOK_PATH)  # admins edit rules: they see where it posts
    assert admin_error is not None and "api_key=sk-live-12345" in admin_error
    assert read_url == f"http://127.0.0.1:{receiver.port}/••••"
    assert read_error == "HTTP 500"


# --- listings and renames ---------------------------------------------------------------------


def test_runs_are_listed_up_to_a_limit(api: httpx.Client, tenant: Tenant) -> None:
    for name in ("a", "b", "c"):
        create_run(api, tenant, name)
    listed = api.get("/api/v1/runs", params={"limit": 2}, headers=tenant.headers("read"))
    assert [r["name"] for r in listed.json()] == ["c", "b"]
    too_many = api.get("/api/v1/runs", params={"limit": 10**6}, headers=tenant.headers("read"))
    assert too_many.status_code == 422


def test_renaming_a_rule_to_a_taken_name_is_a_conflict(api: httpx.Client, tenant: Tenant) -> None:
    """The rename was flushed before its savepoint, and the conflict came out as a 500."""
    ids = []
    for name in ("dup-1", "dup-2"):
        rule = {"name": name, "metric": "loss", "condition": {"kind": "non_finite"}}
        made = api.post("/api/v1/alert-rules", json=rule, headers=tenant.headers())
        assert made.status_code == 201, made.text
        ids.append(made.json()["id"])
    clash = api.patch(
        f"/api/v1/alert-rules/{ids[1]}",
        json={"name": "dup-1", "enabled": False},
        headers=tenant.headers(),
    )
    assert clash.status_code == 409
    assert clash.json() == {
        "detail": f"project {tenant.project!r} already has a rule named 'dup-1'"
    }
    kept = api.get(f"/api/v1/alert-rules/{ids[1]}", headers=tenant.headers()).json()
    assert (kept["name"], kept["enabled"]) == ("dup-2", True)
    renamed = api.patch(
        f"/api/v1/alert-rules/{ids[1]}", json={"name": "dup-3"}, headers=tenant.headers()
    )
    assert renamed.status_code == 200 and renamed.json()["name"] == "dup-3"
