"""Globs and expressions a read token can send, against a real server: none of them stalls
a worker, exhausts its memory or answers 500, and a bad glob is refused where it is written
and skipped where it was stored before globs were checked."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from normwatch.server.db import build_engine, session_factory
from normwatch.server.models import AlertRule, Silence, utcnow
from normwatch.server.services.full_resolution import MAX_ANALYSIS_SERIES
from normwatch.testing import ServerProcess
from tests.helpers.api import client_for, create_run
from tests.helpers.tenants import Tenant, make_tenant


def post(api: httpx.Client, tenant: Tenant, run_id: str, body: dict[str, Any]) -> None:
    r = api.post(
        f"/api/v1/runs/{run_id}/metrics", json=body, headers=tenant.headers("ingest"), timeout=60
    )
    assert r.status_code == 202, r.text


def test_sixteen_stars_answer_at_once_and_the_health_check_with_them(
    api: httpx.Client, tenant: Tenant
) -> None:
    """``rss(****************#)`` on a run with one 51-character name took 3.7 s and stalled
    ``/healthz`` as long, when each star was a backtracking ``.*``."""
    run_id = create_run(api, tenant, "stars")
    post(api, tenant, run_id, {"steps": [1], "metrics": {"x" * 51: [1.0]}})
    health: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            began = time.perf_counter()
            api.get("/healthz")
            health.append(time.perf_counter() - began)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for _ in range(5):
            r = api.get(
                f"/api/v1/runs/{run_id}/series",
                params={"metric": "rss(" + "*" * 16 + "#)"},
                headers=tenant.headers("read"),
            )
            # It matches nothing: a 404 naming it, at once.
            assert r.status_code == 404, r.text
            assert r.json()["unknown"] == ["*" * 16 + "#"]
    finally:
        done.set()
        poller.join()
    assert health and max(health) < 1.0  # slack for a loaded machine; it was 3.6 s

    r = api.get(
        f"/api/v1/runs/{run_id}/series",
        params={"metric": "rss(" + "*/" * 17 + ")"},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 422
    assert "at most 16" in r.json()["detail"]


def test_an_empty_range_is_the_callers_error_everywhere(api: httpx.Client, tenant: Tenant) -> None:
    """``[z-a]`` answered 500 on every read that takes a glob, and a rule or silence could
    be saved with it."""
    run_id = create_run(api, tenant, "ranges")
    post(api, tenant, run_id, {"steps": [1, 2], "metrics": {"grad/a": [1.0, 2.0]}})
    bad = "rss(grad/[z-a])"
    reads = [
        (f"/api/v1/runs/{run_id}/series", {"metric": bad}),
        ("/api/v1/compare", {"run": run_id, "metric": bad}),
        (f"/api/v1/runs/{run_id}/transitions", {"metric": bad}),
        (f"/api/v1/runs/{run_id}/spikes", {"metric": bad}),
    ]
    for path, params in reads:
        r = api.get(path, params=params, headers=tenant.headers("read"))
        assert r.status_code == 422, (path, r.text)
        assert "the range z-a in [z-a] is empty" in r.json()["detail"], (path, r.text)

    admin = tenant.headers("admin")
    rule = {"name": "r", "metric": "grad/*", "condition": {"kind": "non_finite"}}
    for wrong in (
        {"metric": "grad/[z-a]"},
        {"metric": "share(grad/[z-a], grad/total)"},
        {"runs": {"name": "exp-[z-a]"}},
    ):
        r = api.post("/api/v1/alert-rules", json={**rule, **wrong}, headers=admin)
        assert r.status_code == 422, r.text
        assert "z-a" in r.text
    created = api.post("/api/v1/alert-rules", json=rule, headers=admin)
    assert created.status_code == 201, created.text
    path = f"/api/v1/alert-rules/{created.json()['id']}"
    for wrong in ({"metric": "grad/[z-a]"}, {"runs": {"name": "[9-0]"}}):
        r = api.patch(path, json=wrong, headers=admin)
        assert r.status_code == 422, r.text
    assert api.get(path, headers=admin).json()["metric"] == "grad/*"
    silence = {"metric": "grad/[z-a]", "until_step": 10, "comment": "deploy"}
    r = api.post("/api/v1/silences", json=silence, headers=admin)
    assert r.status_code == 422 and "z-a" in r.text


def test_a_bad_glob_stored_earlier_never_fails_ingest(
    server: ServerProcess, api: httpx.Client
) -> None:
    """A rule or silence saved with ``[z-a]`` before globs were checked made every batch
    of its project answer 500; now it is skipped, and the project's other rules fire."""
    tenant = make_tenant(server.database_url)
    admin = tenant.headers("admin")
    ids = {}
    for name, metric in (("broken", "grad/*"), ("loss-high", "loss")):
        rule = {
            "name": name,
            "metric": metric,
            "condition": {"kind": "threshold", "op": ">=", "value": 1.0},
        }
        r = api.post("/api/v1/alert-rules", json=rule, headers=admin)
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    silence = {"metric": "loss*", "until_step": 100, "comment": "noisy"}
    r = api.post("/api/v1/silences", json=silence, headers=admin)
    assert r.status_code == 201, r.text
    engine = build_engine(server.database_url, pool_size=1)
    try:
        with session_factory(engine)() as session, session.begin():
            broken = session.get(AlertRule, ids["broken"])
            assert broken is not None
            broken.metric, broken.run_name, broken.updated_at = "grad/[z-a]", "[z-a]", utcnow()
            stored = session.get(Silence, r.json()["id"])
            assert stored is not None
            stored.metric = "loss[z-a]"
    finally:
        engine.dispose()

    run_id = create_run(api, tenant, "after-upgrade")
    post(api, tenant, run_id, {"steps": [1, 2], "metrics": {"loss": [0.5, 2.0], "grad/b": [3, 4]}})
    fired = api.get("/api/v1/alerts", params={"run": run_id}, headers=tenant.headers("read"))
    assert fired.status_code == 200, fired.text
    got = [(a["rule"]["id"], a["step"], a["silenced_by"]) for a in fired.json()]
    assert got == [(ids["loss-high"], 2, None)]  # the broken silence holds nothing back
    metrics = api.get(f"/api/v1/runs/{run_id}/metrics", headers=tenant.headers("read")).json()
    assert {m["name"] for m in metrics} == {"loss", "grad/b"}


@pytest.fixture
def wide_run(pg_server: ServerProcess) -> tuple[ServerProcess, Tenant, str]:
    """A run with more metrics than one request may read at full resolution."""
    tenant = make_tenant(pg_server.database_url)
    with client_for(pg_server, tenant, "ingest") as api:
        run_id = create_run(api, name="wide")
        names = [f"grad/norm/layers.{i}/w{j}" for i in range(64) for j in range(33)]
        assert len(names) > MAX_ANALYSIS_SERIES
        body = {"steps": [1, 2, 3], "metrics": {n: [1.0, 2.0, 3.0] for n in names}}
        r = api.post(f"/api/v1/runs/{run_id}/metrics", json=body, timeout=120)
        assert r.status_code == 202, r.text
    return pg_server, tenant, run_id


def test_an_expression_over_too_many_series_is_refused_before_reading(
    wide_run: tuple[ServerProcess, Tenant, str],
) -> None:
    """``rss(**)`` on a run of 20,000 metrics read every one of them, 5.3 s an expression and
    up to 64 expressions a request."""
    server, tenant, run_id = wide_run
    with client_for(server, tenant, "read") as api:
        r = api.get(f"/api/v1/runs/{run_id}/series", params={"metric": ["rss(**)"] * 64})
        assert r.status_code == 422, r.text
        assert f"{MAX_ANALYSIS_SERIES:,}" in r.json()["detail"]
        assert "2,112 series" in r.json()["detail"]
        # Under the limit, 64 expressions over the same 1,320 series read each one once.
        asked = ["rss(grad/norm/layers.[0-9]/**)", "rss(grad/norm/layers.[1-3]*/**)"] * 32
        r = api.get(f"/api/v1/runs/{run_id}/series", params={"metric": asked})
        assert r.status_code == 200, r.text
        got = r.json()["series"]
        assert len(got) == 64
        # Layers 0 to 9 hold 330 series; layers 1, 2, 3 and 10 to 39 hold 1,089.
        assert got[0]["values"] == pytest.approx([330**0.5 * v for v in (1.0, 2.0, 3.0)])
        assert got[1]["values"] == pytest.approx([1089**0.5 * v for v in (1.0, 2.0, 3.0)])


def test_a_comparison_reads_its_runs_within_one_budget(
    wide_run: tuple[ServerProcess, Tenant, str],
) -> None:
    """Each run of a comparison had a budget of its own: eight runs, eight budgets."""
    server, tenant, run_id = wide_run
    with client_for(server, tenant, "ingest") as api:
        other = create_run(api, name="wide-2")
        names = [f"grad/norm/layers.{i}/w{j}" for i in range(40) for j in range(33)]
        body = {"steps": [1, 2, 3], "metrics": {n: [2.0, 2.0, 2.0] for n in names}}
        r = api.post(f"/api/v1/runs/{other}/metrics", json=body, timeout=120)
        assert r.status_code == 202, r.text
    glob = "rss(grad/norm/layers.[1-3]*/**)"  # 1,089 series in each run
    with client_for(server, tenant, "read") as api:
        alone = api.get("/api/v1/compare", params={"run": run_id, "metric": glob})
        assert alone.status_code == 200, alone.text  # its range and its whole run: once
        [summary] = alone.json()["runs"]
        assert summary["series"]["values"] == pytest.approx([1089**0.5 * v for v in (1, 2, 3)])
        both = api.get("/api/v1/compare", params={"run": [run_id, other], "metric": glob})
        assert both.status_code == 422, both.text
        assert "2,178 series" in both.json()["detail"]
        assert f"{MAX_ANALYSIS_SERIES:,}" in both.json()["detail"]
