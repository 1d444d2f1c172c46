"""Alerts end to end: real server process, real Postgres, a real local HTTP receiver."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from normwatch.server.alerts.signing import verify

from normwatch.testing import ServerProcess, free_port, start_server
from tests.conftest import Tenant, create_scratch_pg, drop_scratch_pg, make_tenant

SECRET = "s3cret"
ENV = {"NORMWATCH_WEBHOOK_ALLOW": "127.0.0.1", "NORMWATCH_DISPATCH_TICK_S": "0.2"}


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST.

    It answers 500 to the first ``fail_first`` requests and to any before ``healthy_at``
    (a ``time.monotonic()`` value).
    """

    port: int
    fail_first: int = 0
    healthy_at: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.fail_first > 0 or time.monotonic() < receiver.healthy_at:
                    receiver.fail_first = max(0, receiver.fail_first - 1)
                    self.send_response(500)
                    self.end_headers()
                    return
                receiver.received.append(
                    {"body": body, "headers": dict(self.headers), "at": time.monotonic()}
                )
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.received]

    def wait_for(self, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.received) < count:
            time.sleep(0.02)
        return self.payloads()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port())
    r.start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def alert_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The only server on its database: no other process's dispatcher shares the outbox."""
    url = create_scratch_pg("alerts")
    proc = start_server(url, tmp_path_factory.mktemp("alerts"), **ENV)
    yield proc
    proc.stop()
    drop_scratch_pg(url)


def api_for(server: ServerProcess, tenant: Tenant, scope: str = "admin") -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=tenant.headers(scope), timeout=30)


def make_rule(api: httpx.Client, receiver: Receiver, **rule: Any) -> dict[str, Any]:
    body = {
        "name": rule.pop("name", "rule"),
        "channels": [{"type": "webhook", "url": receiver.url, "secret": SECRET}],
        **rule,
    }
    r = api.post("/api/v1/alert-rules", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def post(api: httpx.Client, run_id: str, steps: list[int], **metrics: list[Any]) -> None:
    r = api.post(f"/api/v1/runs/{run_id}/metrics", json={"steps": steps, "metrics": metrics})
    assert r.status_code == 202, r.text


def new_run(api: httpx.Client, name: str = "r") -> str:
    return str(api.post("/api/v1/runs", json={"name": name, "start_step": 0}).json()["id"])


def test_threshold_fires_at_the_step_then_resolves_signed(
    alert_server: ServerProcess, receiver: Receiver
) -> None:
    tenant = make_tenant(alert_server.database_url)
    with api_for(alert_server, tenant) as api:
        rule = make_rule(
            api,
            receiver,
            name="grad norm 5+",
            metric="grad/norm/total",
            condition={"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 2},
        )
        assert rule["channels"][0]["secret"] != SECRET  # masked
        run = new_run(api)
        post(api, run, list(range(10)), **{"grad/norm/total": [1.0] * 10})
        posted = time.monotonic()
        post(api, run, [10, 11, 12, 13], **{"grad/norm/total": [5.5, 4.0, 5.0, 6.0]})
        [firing] = receiver.wait_for(1)
        assert receiver.received[0]["at"] - posted < 2.0
        assert (firing["state"], firing["step"], firing["value"], firing["threshold"]) == (
            "firing",
            13,
            6.0,
            5.0,
        )
        assert firing["metric"] == "grad/norm/total" and firing["run"]["id"] == run
        assert firing["rule"]["name"] == "grad norm 5+" and "secret" not in json.dumps(firing)
        assert "start=" in firing["url"] and f"/runs/{run}" in firing["url"]
        headers = receiver.received[0]["headers"]
        assert verify(
            SECRET,
            headers["X-Normwatch-Timestamp"],
            headers["X-Normwatch-Signature"],
            receiver.received[0]["body"],
        )
        post(api, run, [14, 15], **{"grad/norm/total": [3.0, 7.0]})
        payloads = receiver.wait_for(2)
        assert [(p["state"], p["step"]) for p in payloads] == [("firing", 13), ("resolved", 14)]
        # Re-sending the same batch changes nothing.
        post(api, run, [14, 15], **{"grad/norm/total": [3.0, 7.0]})
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        assert [(a["state"], a["step"]) for a in history] == [("resolved", 14), ("firing", 13)]
        assert all(a["notifications"][0]["status"] == "delivered" for a in history)
        time.sleep(0.5)
        assert len(receiver.received) == 2


def test_glob_over_48_layers_fires_only_for_the_spiking_layer(
    alert_server: ServerProcess, receiver: Receiver
) -> None:
    tenant = make_tenant(alert_server.database_url)
    with api_for(alert_server, tenant) as api:
        make_rule(
            api,
            receiver,
            name="layer spikes",
            metric="grad/norm/layers.*",
            condition={"kind": "spike", "factor": 3.0, "window": 20},
        )
        run = new_run(api)
        steps = list(range(60))
        layers = {f"grad/norm/layers.{i}": [1.0 + 0.01 * (s % 3) for s in steps] for i in range(48)}
        layers["grad/norm/layers.31"][45] = 9.0
        post(api, run, steps, **layers)
        payloads = receiver.wait_for(2)
        assert [(p["state"], p["metric"], p["step"]) for p in payloads] == [
            ("firing", "grad/norm/layers.31", 45),
            ("resolved", "grad/norm/layers.31", 46),
        ]


def test_nan_fires_and_preview_matches(alert_server: ServerProcess, receiver: Receiver) -> None:
    tenant = make_tenant(alert_server.database_url)
    with api_for(alert_server, tenant) as api:
        rule = make_rule(
            api, receiver, name="nan", metric="train/loss", condition={"kind": "non_finite"}
        )
        run = new_run(api)
        post(api, run, [0, 1, 2, 3], **{"train/loss": [2.0, "NaN", None, 1.5]})
        payloads = receiver.wait_for(2)
        assert [(p["state"], p["step"], p["value"]) for p in payloads] == [
            ("firing", 1, "NaN"),
            ("resolved", 3, 1.5),
        ]
        preview = api.get(f"/api/v1/alert-rules/{rule['id']}/preview", params={"run": run}).json()
        assert [(t["state"], t["step"]) for t in preview["transitions"]] == [
            ("firing", 1),
            ("resolved", 3),
        ]


def test_stale_fires_for_a_run_that_stops_sending(
    alert_server: ServerProcess, receiver: Receiver
) -> None:
    tenant = make_tenant(alert_server.database_url)
    with api_for(alert_server, tenant) as api:
        make_rule(api, receiver, name="hung", metric="*", condition={"kind": "stale", "seconds": 1})
        run = new_run(api)
        post(api, run, [0, 1], loss=[1.0, 1.0])
        [firing] = receiver.wait_for(1, timeout=10)
        assert (firing["state"], firing["run"]["id"], firing["step"]) == ("firing", run, 1)
        post(api, run, [2], loss=[1.0])
        payloads = receiver.wait_for(2, timeout=10)
        assert payloads[1]["state"] == "resolved"


def test_receiver_down_then_failing_then_up_delivers_each_once(
    alert_server: ServerProcess,
) -> None:
    tenant = make_tenant(alert_server.database_url)
    receiver = Receiver(free_port(), fail_first=3)  # not listening yet: connection refused
    with api_for(alert_server, tenant) as api:
        make_rule(
            api,
            receiver,
            name="down",
            metric="g",
            condition={"kind": "threshold", "op": ">", "value": 1.0},
        )
        run = new_run(api)
        post(api, run, [0, 1, 2, 3], g=[2.0, 0.0, 2.0, 0.0])  # firing, resolved, firing, resolved
        time.sleep(1.5)
        receiver.start()
        try:
            payloads = receiver.wait_for(4, timeout=60)
            ids = [r["headers"]["X-Normwatch-Delivery"] for r in receiver.received]
            assert len(ids) == len(set(ids)) == 4
            assert sorted((p["step"], p["state"]) for p in payloads) == [
                (0, "firing"),
                (1, "resolved"),
                (2, "firing"),
                (3, "resolved"),
            ]
            history = api.get("/api/v1/alerts", params={"run": run}).json()
            assert all(a["notifications"][0]["attempts"] >= 2 for a in history)
        finally:
            receiver.stop()


def test_sigkill_before_delivery_delivers_after_restart_once(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    pg_url = fresh_pg_url
    receiver = Receiver(free_port())  # down while the alert fires
    server = start_server(pg_url, tmp_path, **ENV)
    tenant = make_tenant(pg_url)
    try:
        with api_for(server, tenant) as api:
            make_rule(
                api,
                receiver,
                name="kill",
                metric="g",
                condition={"kind": "threshold", "op": ">", "value": 1.0},
            )
            run = new_run(api)
            post(api, run, [0], g=[2.0])
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        receiver.start()
        port = int(server.url.rsplit(":", 1)[1])
        server = start_server(pg_url, tmp_path, port=port, **ENV)
        payloads = receiver.wait_for(1, timeout=60)
        time.sleep(1.0)
        assert [(p["state"], p["step"]) for p in receiver.payloads()] == [("firing", 0)]
        assert payloads[0]["run"]["id"] == run
    finally:
        server.stop()
        receiver.stop()


def test_rule_api_guards(alert_server: ServerProcess, receiver: Receiver) -> None:
    tenant = make_tenant(alert_server.database_url)
    rule = {"name": "x", "metric": "g", "condition": {"kind": "non_finite"}, "channels": []}
    with api_for(alert_server, tenant, "read") as reader:
        assert reader.post("/api/v1/alert-rules", json=rule).status_code == 403
    with api_for(alert_server, tenant) as api:
        private = {**rule, "channels": [{"type": "webhook", "url": "http://10.1.2.3/x"}]}
        r = api.post("/api/v1/alert-rules", json=private)
        assert r.status_code == 422 and "channels[0]" in r.text
        bad = {**rule, "condition": {"kind": "threshold", "op": "=>", "value": 1}}
        assert api.post("/api/v1/alert-rules", json=bad).status_code == 422
        slack = {
            **rule,
            "channels": [
                {"type": "slack", "url": "https://hooks.slack.com/services/T/B/XYZSECRET"}
            ],
        }
        created = api.post("/api/v1/alert-rules", json=slack)
        assert created.status_code == 201, created.text
        assert "XYZSECRET" not in created.text
        assert "XYZSECRET" not in api.get("/api/v1/alert-rules").text
        assert api.post("/api/v1/alert-rules", json=slack).status_code == 409
        rid = created.json()["id"]
        other = make_tenant(alert_server.database_url)
        with api_for(alert_server, other) as stranger:
            assert stranger.get(f"/api/v1/alert-rules/{rid}").status_code == 403
            assert stranger.delete(f"/api/v1/alert-rules/{rid}").status_code == 403
        assert (
            api.patch(f"/api/v1/alert-rules/{rid}", json={"enabled": False}).json()["enabled"]
            is False
        )
        assert api.delete(f"/api/v1/alert-rules/{rid}").status_code == 204
        assert api.get(f"/api/v1/alert-rules/{rid}").status_code == 404


@pytest.mark.parametrize(
    ("condition", "series", "expected"),
    [
        # Flat, then rising 0.2 a step (200 per 1k steps) from step 50.
        (
            {"kind": "slope", "op": ">", "per_1k_steps": 100.0, "window": 10},
            [1.0 if s < 50 else 1.0 + 0.2 * (s - 49) for s in range(80)],
            range(51, 56),
        ),
        # Rising 0.01 a step toward 5: fewer than 100 steps to go from step 300 on.
        (
            {"kind": "forecast", "op": ">=", "value": 5.0, "within_steps": 100, "window": 20},
            [1.0 + 0.01 * s for s in range(350)],
            range(300, 303),
        ),
    ],
    ids=["slope", "forecast"],
)
def test_slope_and_forecast_fire_where_the_fit_says(
    alert_server: ServerProcess,
    receiver: Receiver,
    condition: dict[str, Any],
    series: list[float],
    expected: range,
) -> None:
    tenant = make_tenant(alert_server.database_url)
    with api_for(alert_server, tenant) as api:
        rule = make_rule(
            api,
            receiver,
            name=condition["kind"],
            metric="params/norm/final_norm",
            condition=condition,
        )
        run = new_run(api)
        for lo in range(0, len(series), 25):  # several batches, as a trainer sends them
            chunk = series[lo : lo + 25]
            post(api, run, list(range(lo, lo + len(chunk))), **{"params/norm/final_norm": chunk})
        [firing] = receiver.wait_for(1)
        assert firing["state"] == "firing" and firing["step"] in expected
        preview = api.get(f"/api/v1/alert-rules/{rule['id']}/preview", params={"run": run}).json()
        assert preview["transitions"][0]["step"] == firing["step"]


def test_two_minute_outage_then_every_notification_arrives_once(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    """A minute of refused connections, a minute of 500s, then up: all arrive, each once."""
    pg_url = fresh_pg_url
    receiver = Receiver(free_port())
    server = start_server(pg_url, tmp_path, NORMWATCH_RETRY_MAX_DELAY_S="5", **ENV)
    tenant = make_tenant(pg_url)
    try:
        with api_for(server, tenant) as api:
            make_rule(
                api,
                receiver,
                name="outage",
                metric="g",
                condition={"kind": "threshold", "op": ">", "value": 1.0},
            )
            run = new_run(api)
            post(api, run, list(range(6)), g=[2.0, 0.0] * 3)  # 3 firings, 3 resolves
            started = time.monotonic()
            time.sleep(60)  # connection refused all along
            receiver.healthy_at = time.monotonic() + 60
            receiver.start()  # a minute of 500s
            payloads = receiver.wait_for(6, timeout=120)
            assert time.monotonic() - started >= 120
            time.sleep(2)
            ids = [r["headers"]["X-Normwatch-Delivery"] for r in receiver.received]
            assert len(ids) == len(set(ids)) == 6
            assert sorted((p["step"], p["state"]) for p in payloads) == [
                (0, "firing"),
                (1, "resolved"),
                (2, "firing"),
                (3, "resolved"),
                (4, "firing"),
                (5, "resolved"),
            ]
            history = api.get("/api/v1/alerts", params={"run": run}).json()
            attempts = [a["notifications"][0]["attempts"] for a in history]
            assert all(n >= 10 for n in attempts), attempts
            assert all(a["notifications"][0]["status"] == "delivered" for a in history)
    finally:
        server.stop()
        receiver.stop()
