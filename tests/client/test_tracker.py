"""Trackers and the module-level API, the latter against a real server."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import httpx
import pytest

import normwatch.client as nw
from normwatch.client import CompositeTracker, MemoryTracker, NoopTracker, Run, Tracker
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant


class Exploding:
    def log(self, metrics: Mapping[str, object], *, step: int) -> None:
        raise RuntimeError("backend down")

    def event(self, text: str, *, step: int, kind: str = "note") -> None:
        raise RuntimeError("backend down")

    def finish(self, timeout: float = 30.0, status: str = "finished") -> None:
        raise RuntimeError("backend down")


def test_memory_tracker_keeps_floats_and_drops_garbage(caplog: pytest.LogCaptureFixture) -> None:
    mem = MemoryTracker()
    mem.log({"loss": 2.5, "gnorm": 1, "bad": "x"}, step=1)
    mem.log({"loss": float("nan")}, step=2)
    mem.event("lr drop", step=2, kind="config")
    mem.finish(status="failed")
    assert mem.series("loss")[0] == [1, 2]
    assert mem.history[0] == (1, {"loss": 2.5, "gnorm": 1.0})
    assert math.isnan(mem.last("loss")) and math.isnan(mem.last("never"))
    assert mem.events == [(2, "config", "lr drop")]
    assert mem.status == "failed"
    assert "dropped bad='x'" in caplog.text


def test_composite_survives_a_failing_tracker(caplog: pytest.LogCaptureFixture) -> None:
    mem = MemoryTracker()
    both = CompositeTracker(Exploding(), mem)  # type: ignore[arg-type]
    both.log({"loss": 1.0}, step=7)
    both.event("restart", step=7)
    both.finish()
    assert mem.history == [(7, {"loss": 1.0})] and mem.status == "finished"
    assert [r.getMessage().split(" failed in ")[1] for r in caplog.records] == [
        "log(); continuing",
        "event(); continuing",
        "finish(); continuing",
    ]


def test_every_backend_is_a_tracker() -> None:
    for tracker in (NoopTracker(), MemoryTracker(), CompositeTracker()):
        assert isinstance(tracker, Tracker)
    run = Run(
        "http://127.0.0.1:9",
        token="t",
        name="x",
        transport=httpx.MockTransport(lambda r: httpx.Response(503)),
    )
    try:
        assert isinstance(run, Tracker)
    finally:
        run.finish(timeout=0.2)


def test_init_log_finish_reach_the_server(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = make_tenant(server.database_url)
    monkeypatch.setenv("NORMWATCH_URL", server.url)
    monkeypatch.setenv("NORMWATCH_TOKEN", tenant.ingest)
    run = nw.init("module-api", config={"lr": 1e-3}, start_step=0)
    assert isinstance(run, Run)
    for step in range(5):
        nw.log({"train/loss": 1.0 / (step + 1)}, step=step)
    nw.event("warmup done", step=4)
    assert not nw.should_stop() and not nw.should_checkpoint()
    deadline = time.monotonic() + 10
    while run.run_id is None and time.monotonic() < deadline:
        time.sleep(0.05)
    with httpx.Client(base_url=server.url, headers=tenant.headers()) as admin:
        asked = admin.post(f"/api/v1/runs/{run.run_id}/control", json={"action": "checkpoint"})
        assert asked.status_code == 201, asked.text
    step = 5
    while not nw.should_checkpoint() and time.monotonic() < deadline:
        nw.log({"train/loss": 0.1}, step=step)  # the answer to a batch brings the request
        step += 1
        time.sleep(0.05)
    assert [r.action for r in run.control_requests] == ["checkpoint"]
    assert not nw.should_checkpoint(), "once per request"
    nw.finish()
    assert not nw.should_stop(), "after finish: no run"
    with httpx.Client(base_url=server.url, headers=tenant.headers("read")) as api:
        [listed] = api.get("/api/v1/runs").json()
        assert (listed["name"], listed["status"], listed["last_step"]) == (
            "module-api",
            "finished",
            step - 1,
        )
        got = api.get(
            f"/api/v1/runs/{listed['id']}/series", params={"metric": "train/loss"}
        ).json()["series"][0]
        assert got["steps"] == list(range(step))
        assert got["values"] == [1.0, 0.5, 1.0 / 3, 0.25, 0.2] + [0.1] * (step - 5)
        events = api.get(f"/api/v1/runs/{listed['id']}/events").json()
        assert sorted((e["kind"], e["text"]) for e in events)[1] == ("note", "warmup done")
        assert sorted(e["kind"] for e in events) == ["control", "note"]


def test_init_outside_process_zero_or_disabled_is_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NORMWATCH_URL", raising=False)
    monkeypatch.delenv("NORMWATCH_TOKEN", raising=False)
    monkeypatch.setenv("NORMWATCH_MODE", "disabled")
    assert isinstance(nw.init("x"), NoopTracker)
    monkeypatch.delenv("NORMWATCH_MODE")
    if "jax" not in __import__("sys").modules:
        monkeypatch.setenv("RANK", "3")
        assert nw.process_index() == 3
        assert isinstance(nw.init("x"), NoopTracker)
        monkeypatch.delenv("RANK")
    with pytest.raises(ValueError, match="NORMWATCH_TOKEN"):
        nw.init("x")
    nw.log({"loss": 1.0}, step=0)  # after a failed init: a no-op, not an error
    nw.finish()
