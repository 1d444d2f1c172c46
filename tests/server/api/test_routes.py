"""The HTTP API against a real server process, on Postgres and on SQLite."""

from __future__ import annotations

import gzip
import json
import random

import httpx
import pytest

from tests.helpers.databases import migrated_sqlite
from tests.helpers.tenants import Tenant, make_tenant


def create_run(api: httpx.Client, tenant: Tenant, name: str = "exp", **extra: object) -> dict:
    r = api.post(
        "/api/v1/runs",
        json={"project": tenant.project, "name": name, **extra},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 200, r.text
    return r.json()


def series(api: httpx.Client, tenant: Tenant, run_id: str, *metrics: str, **params: object) -> dict:
    r = api.get(
        f"/api/v1/runs/{run_id}/series",
        params={"metric": list(metrics), **params},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 200, r.text
    return {s["metric"]: s for s in r.json()["series"]}


def test_health(api: httpx.Client) -> None:
    r = api.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


def test_create_post_and_read_back(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant, config={"lr": 3e-4}, tags=["32b"], start_step=81000)
    assert run["project"] == tenant.project
    assert run["segment"] == 1
    batch = {
        "steps": [81000, 81001, 81002],
        "metrics": {
            "grad/norm/total": [0.31, "NaN", "Infinity"],
            "params/norm/final_norm.weight": [341.2, None, "-Infinity"],
        },
    }
    r = api.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=gzip.compress(json.dumps(batch).encode()),
        headers={
            **tenant.headers("ingest"),
            "Content-Encoding": "gzip",
            "Content-Type": "application/json",
        },
    )
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 5
    got = series(api, tenant, run["id"], "grad/norm/total", "params/norm/final_norm.weight")
    assert got["grad/norm/total"]["steps"] == [81000, 81001, 81002]
    assert got["grad/norm/total"]["values"] == [0.31, "NaN", "Infinity"]
    assert got["params/norm/final_norm.weight"]["steps"] == [81000, 81002]
    assert got["params/norm/final_norm.weight"]["values"] == [341.2, "-Infinity"]
    assert got["grad/norm/total"]["downsampled"] is False

    metrics = api.get(f"/api/v1/runs/{run['id']}/metrics", headers=tenant.headers("read")).json()
    by_name = {m["name"]: m for m in metrics}
    assert by_name["grad/norm/total"] == {
        "name": "grad/norm/total",
        "last_step": 81002,
        "last_value": "Infinity",
    }
    runs = api.get("/api/v1/runs", headers=tenant.headers("read")).json()
    assert [(r["id"], r["last_step"], r["status"]) for r in runs] == [(run["id"], 81002, "running")]


def test_bare_nan_tokens_are_accepted(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant)
    r = api.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=b'{"steps": [1, 2, 3], "metrics": {"loss": [NaN, Infinity, -Infinity]}}',
        headers={**tenant.headers("ingest"), "Content-Type": "application/json"},
    )
    assert r.status_code == 202, r.text
    assert series(api, tenant, run["id"], "loss")["loss"]["values"] == [
        "NaN",
        "Infinity",
        "-Infinity",
    ]


def test_auth(api: httpx.Client, tenant: Tenant, server) -> None:  # type: ignore[no-untyped-def]
    run = create_run(api, tenant)
    url = f"/api/v1/runs/{run['id']}/series"
    assert api.get(url, params={"metric": "x"}).status_code == 401
    bad = api.get(url, params={"metric": "x"}, headers={"Authorization": "Bearer nw_nope"})
    assert bad.status_code == 401
    other = make_tenant(server.database_url)
    assert api.get(url, params={"metric": "x"}, headers=other.headers("admin")).status_code == 403
    assert (
        api.get(
            "/api/v1/runs", params={"project": tenant.project}, headers=other.headers("read")
        ).status_code
        == 403
    )
    r = api.post(
        "/api/v1/runs",
        json={"project": tenant.project, "name": "x"},
        headers=other.headers("ingest"),
    )
    assert r.status_code == 403
    # Scopes: a read token cannot write, an ingest token cannot read.
    post = api.post(
        f"/api/v1/runs/{run['id']}/metrics",
        json={"steps": [1], "metrics": {}},
        headers=tenant.headers("read"),
    )
    assert post.status_code == 403
    assert api.get(url, params={"metric": "x"}, headers=tenant.headers("ingest")).status_code == 403
    # The admin gets past the checks: to the 404 for a metric the run never logged.
    read = api.get(url, params={"metric": "x"}, headers=tenant.headers("admin"))
    assert read.status_code == 404 and read.json()["unknown"] == ["x"]
    missing = api.get("/api/v1/runs/doesnotexist/metrics", headers=tenant.headers("read"))
    assert missing.status_code == 404


BAD_BATCHES = [
    (b'{"steps": [1, 2], "metrics": {"a": [1.0, 2.0]', 400, "JSON"),
    (b"[1, 2]", 422, "object"),
    (b'{"steps": [1, 2], "metrics": {"a": [1.0]}}', 422, "metrics['a']: has 1 values"),
    (b'{"steps": [1, 2.5], "metrics": {"a": [1.0, 2.0]}}', 422, "steps[1]"),
    (b'{"steps": [1, "2"], "metrics": {"a": [1.0, 2.0]}}', 422, "steps[1]"),
    (b'{"steps": [1, 2], "metrics": {"a": [1.0, "nan"]}}', 422, "metrics['a'][1]"),
    (b'{"steps": [1, 2], "metrics": {"a": [1.0, true]}}', 422, "metrics['a'][1]"),
    (b'{"steps": [-1], "metrics": {"a": [1.0]}}', 422, "steps[0]"),
    (b'{"steps": [1], "metrics": {"a": [1.0]}, "segment": 9}', 422, "segment"),
    (b'{"steps": [1], "metric": {"a": [1.0]}}', 422, "metric"),
]


@pytest.mark.parametrize(("body", "status", "needle"), BAD_BATCHES)
def test_bad_batches_are_rejected_whole(
    api: httpx.Client, tenant: Tenant, body: bytes, status: int, needle: str
) -> None:
    run = create_run(api, tenant)
    good = {"steps": [0], "metrics": {"a": [0.5]}}
    assert (
        api.post(
            f"/api/v1/runs/{run['id']}/metrics", json=good, headers=tenant.headers("ingest")
        ).status_code
        == 202
    )
    r = api.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=body,
        headers={**tenant.headers("ingest"), "Content-Type": "application/json"},
    )
    assert r.status_code == status, r.text
    assert needle in r.json()["detail"]
    got = series(api, tenant, run["id"], "a")["a"]
    assert (got["steps"], got["values"]) == ([0], [0.5])


def test_same_batch_three_times_is_stored_once(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant)
    batch = {"steps": list(range(100)), "metrics": {"loss": [float(i) for i in range(100)]}}
    for _ in range(3):
        r = api.post(
            f"/api/v1/runs/{run['id']}/metrics", json=batch, headers=tenant.headers("ingest")
        )
        assert r.status_code == 202
    got = series(api, tenant, run["id"], "loss", points=1000)["loss"]
    assert got["total_points"] == 100
    assert got["steps"] == list(range(100))


def test_resume_with_lower_start_step_opens_segment(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant, name="32b-exp1295", start_step=0)
    url = f"/api/v1/runs/{run['id']}/metrics"
    first = {"steps": list(range(0, 100)), "metrics": {"loss": [1.0] * 100}}
    assert api.post(url, json=first, headers=tenant.headers("ingest")).status_code == 202

    again = create_run(api, tenant, name="32b-exp1295", start_step=60)
    assert again["id"] == run["id"]
    assert again["segment"] == 2
    assert [s["start_step"] for s in again["segments"]] == [0, 60]
    second = {"steps": list(range(60, 80)), "metrics": {"loss": [2.0] * 20}}
    assert api.post(url, json=second, headers=tenant.headers("ingest")).status_code == 202

    got = series(api, tenant, run["id"], "loss")["loss"]
    assert got["steps"] == list(range(80))
    assert got["values"] == [1.0] * 60 + [2.0] * 20
    listed = api.get(f"/api/v1/runs/{run['id']}/metrics", headers=tenant.headers("read")).json()
    assert listed == [{"name": "loss", "last_step": 79, "last_value": 2.0}]
    assert (
        api.get(f"/api/v1/runs/{run['id']}", headers=tenant.headers("read")).json()["last_step"]
        == 79
    )
    # Nothing of segment 1 was dropped or overwritten: it is still readable as such.
    old = {"steps": [99], "metrics": {"loss": [7.0]}, "segment": 1}
    assert api.post(url, json=old, headers=tenant.headers("ingest")).status_code == 202
    # Resuming at a later step keeps the segment.
    assert create_run(api, tenant, name="32b-exp1295", start_step=500)["segment"] == 2


def test_body_limits(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant)
    url = f"/api/v1/runs/{run['id']}/metrics"
    # A gzip bomb: 200 MB of zeros compressed to ~200 KB, far above the 32 MiB limit.
    bomb = gzip.compress(b"0" * 200_000_000, compresslevel=9)
    r = api.post(
        url, content=bomb, headers={**tenant.headers("ingest"), "Content-Encoding": "gzip"}
    )
    assert r.status_code == 413
    huge = b'{"steps": [1], "metrics": {"a": [1.0]}, "pad": "' + b"x" * 40_000_000 + b'"}'
    assert api.post(url, content=huge, headers=tenant.headers("ingest")).status_code == 413
    r = api.post(
        url, content=b"not gzip", headers={**tenant.headers("ingest"), "Content-Encoding": "gzip"}
    )
    assert r.status_code == 400


def test_events(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant)
    r = api.post(
        f"/api/v1/runs/{run['id']}/events",
        json={"step": 81000, "kind": "config", "text": "near-dropless EP routing"},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 201, r.text
    events = api.get(f"/api/v1/runs/{run['id']}/events", headers=tenant.headers("read")).json()
    assert [(e["step"], e["kind"], e["text"]) for e in events] == [
        (81000, "config", "near-dropless EP routing")
    ]
    # A re-sent event (its acknowledgement lost, or a spool replayed) is the stored one again;
    # another text, kind or step is another event.
    again = api.post(
        f"/api/v1/runs/{run['id']}/events",
        json={"step": 81000, "kind": "config", "text": "near-dropless EP routing"},
        headers=tenant.headers("ingest"),
    )
    assert again.status_code == 201 and again.json() == r.json()
    for other in (
        {"step": 81000, "kind": "note", "text": "near-dropless EP routing"},
        {"step": 81001, "kind": "config", "text": "near-dropless EP routing"},
        {"step": 81000, "kind": "config", "text": "dropless EP routing"},
    ):
        posted = api.post(
            f"/api/v1/runs/{run['id']}/events", json=other, headers=tenant.headers("ingest")
        )
        assert posted.status_code == 201 and posted.json()["id"] != r.json()["id"]
    events = api.get(f"/api/v1/runs/{run['id']}/events", headers=tenant.headers("read")).json()
    assert len(events) == 4
    bad = api.post(
        f"/api/v1/runs/{run['id']}/events",
        json={"step": "x", "text": "t"},
        headers=tenant.headers("ingest"),
    )
    assert bad.status_code == 422


def test_million_step_spike_survives_downsampling(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant)
    n = 1_000_000
    rng = random.Random(7)
    spike = rng.randrange(n)
    url = f"/api/v1/runs/{run['id']}/metrics"
    chunk = 100_000
    for lo in range(0, n, chunk):
        values = [0.3 + 0.01 * ((s * 7919) % 13) / 13 for s in range(lo, lo + chunk)]
        if lo <= spike < lo + chunk:
            values[spike - lo] = 50.0
        body = gzip.compress(
            json.dumps(
                {"steps": list(range(lo, lo + chunk)), "metrics": {"grad/norm/total": values}}
            ).encode()
        )
        r = api.post(
            url, content=body, headers={**tenant.headers("ingest"), "Content-Encoding": "gzip"}
        )
        assert r.status_code == 202, r.text
    got = series(api, tenant, run["id"], "grad/norm/total", points=1000)["grad/norm/total"]
    assert got["downsampled"] is True
    assert got["total_points"] == n
    assert len(got["steps"]) <= 4000
    assert spike in got["steps"]
    assert got["values"][got["steps"].index(spike)] == 50.0
    assert got["steps"] == sorted(got["steps"])
    # Zoomed in around the spike: every point, exact.
    zoom = series(
        api, tenant, run["id"], "grad/norm/total", start=spike - 500, end=spike + 500, points=1000
    )["grad/norm/total"]
    assert zoom["downsampled"] is False
    assert zoom["steps"] == list(range(max(0, spike - 500), min(n, spike + 501)))


def test_overload_answers_503_with_retry_after(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With every ingest slot taken, a batch is refused at once and nothing is lost."""
    import select
    import socket
    from urllib.parse import urlsplit

    from normwatch.testing import running_server

    # A database of its own: nothing else may hold SQLite's write lock meanwhile.
    database_url = migrated_sqlite(tmp_path / "overload.db")
    with running_server(database_url, tmp_path, NORMWATCH_INGEST_CONCURRENCY="1") as srv:
        tenant = make_tenant(database_url)
        with httpx.Client(base_url=srv.url, timeout=30) as api:
            run = create_run(api, tenant)
            url = f"/api/v1/runs/{run['id']}/metrics"
            body = json.dumps({"steps": [1], "metrics": {"loss": [0.5]}}).encode()
            # Hold the only slot: headers and half a body, then nothing. If the slow request
            # arrived while another held the slot it was refused at once: try again.
            parts = urlsplit(srv.url)
            head = (
                f"POST {url} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer {tenant.ingest}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            for _ in range(20):
                slow = socket.create_connection((parts.hostname, parts.port))
                slow.sendall(head + body[:10])
                readable, _, _ = select.select([slow], [], [], 2.0)
                if not readable:
                    break  # no answer yet: it is waiting for the rest of its body
                slow.close()
            try:
                r = api.post(url, content=body, headers=tenant.headers("ingest"))
                assert r.status_code == 503
                assert r.headers["Retry-After"] == "1"
                slow.sendall(body[10:])
                slow.settimeout(30)
                answer = b""
                while b"\r\n\r\n" not in answer:
                    chunk = slow.recv(4096)
                    assert chunk, answer
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 202 "), answer
            finally:
                slow.close()
            assert api.post(url, content=body, headers=tenant.headers("ingest")).status_code == 202
            got = series(api, tenant, run["id"], "loss")["loss"]
            assert (got["steps"], got["values"]) == ([1], [0.5])
