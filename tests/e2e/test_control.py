"""Asking a trainer to stop or checkpoint, end to end: the Flax example trainer streaming
packed norms through the real client to a real server, an admin's request or an alert
rule's, and the trainer acting on it between its steps."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from flax import serialization

from normwatch.client import Run
from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flax_packed.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flax_packed_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tenant(pg_server: ServerProcess) -> Tenant:
    return make_tenant(pg_server.database_url)


@pytest.fixture
def admin(pg_server: ServerProcess, tenant: Tenant) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers(), timeout=30) as client:
        yield client


def trainer_run(server: ServerProcess, tenant: Tenant, name: str, spool: Path) -> Run:
    return Run(
        server.url,
        token=tenant.ingest,
        project=tenant.project,
        name=name,
        flush_interval=0.1,
        spool_dir=spool,
    )


def test_the_trainer_stops_within_two_logged_steps_of_the_answer_carrying_a_stop(
    example: ModuleType,
    pg_server: ServerProcess,
    admin: httpx.Client,
    tenant: Tenant,
    tmp_path: Path,
) -> None:
    run = trainer_run(pg_server, tenant, "flax-stop", tmp_path / "spool")
    logged_at: list[tuple[int, float]] = []
    asked: dict[str, Any] = {}

    def on_step(step: int) -> None:
        logged_at.append((step, time.time()))
        if not asked and run.sent_points > 0:  # the server has steps of the run
            r = admin.post(
                f"/api/v1/runs/{run.run_id}/control",
                json={"action": "stop", "reason": "grad norm diverging", "by": "on-call"},
            )
            assert r.status_code == 201, r.text
            asked.update(r.json())

    outcome = example.train(
        run, steps=5000, width=32, layers=3, checkpoint_dir=tmp_path / "ckpt", on_step=on_step
    )
    run.finish(timeout=30)

    assert outcome.stopped_by == "grad norm diverging"
    [request] = run.control_requests
    assert (request.id, request.action, request.source) == (asked["id"], "stop", "admin")
    after_answer = [step for step, at in logged_at if at >= request.received_at]
    assert after_answer, "the answer came while the trainer was still logging"
    assert outcome.last_step <= after_answer[0] + 1, (outcome.last_step, after_answer[:3])
    assert asked["step"] is not None and asked["step"] < outcome.last_step < 5000

    [checkpoint] = outcome.checkpoints
    assert checkpoint.name == f"step_{outcome.last_step:08d}.msgpack"
    restored = serialization.msgpack_restore(checkpoint.read_bytes())
    assert set(restored) == {"params", "opt_state"}

    read = {"Authorization": f"Bearer {tenant.read}"}
    [listed] = admin.get(f"/api/v1/runs/{run.run_id}/control", headers=read).json()
    assert (listed["state"], listed["requested_by"]) == ("seen", "on-call")
    events = admin.get(f"/api/v1/runs/{run.run_id}/events", headers=read).json()
    assert [(e["kind"], e["step"]) for e in events] == [
        ("control", asked["step"]),
        ("checkpoint", outcome.last_step),
    ]
    described = admin.get(f"/api/v1/runs/{run.run_id}", headers=read).json()
    assert (described["status"], described["last_step"]) == ("finished", outcome.last_step)
    totals = admin.get(
        f"/api/v1/runs/{run.run_id}/series",
        params={"metric": ["grad/norm/total", "grad/norm/layers.2", "train/loss"]},
        headers=read,
    ).json()["series"]
    assert [len(s["steps"]) for s in totals] == [outcome.last_step + 1] * 3


def test_a_rule_asks_for_a_checkpoint_and_the_trainer_saves_one(
    example: ModuleType,
    pg_server: ServerProcess,
    admin: httpx.Client,
    tenant: Tenant,
    tmp_path: Path,
) -> None:
    r = admin.post(
        "/api/v1/alert-rules",
        json={
            "name": "checkpoint once the loss is under 0.1",
            "metric": "train/loss",
            "condition": {"kind": "threshold", "op": "<=", "value": 0.1},
            "control": "checkpoint",
        },
    )
    assert r.status_code == 201, r.text
    run = trainer_run(pg_server, tenant, "flax-rule", tmp_path / "spool")
    saved: list[int] = []

    def on_step(step: int) -> None:
        if run.control_requests and not saved:
            saved.append(step)

    outcome = example.train(
        run, steps=400, width=32, layers=3, checkpoint_dir=tmp_path / "ckpt", on_step=on_step
    )
    run.finish(timeout=30)

    assert outcome.stopped_by is None and outcome.last_step == 399
    [request] = run.control_requests
    assert (request.action, request.source) == ("checkpoint", "rule")
    assert request.reason.startswith("checkpoint once the loss is under 0.1: train/loss")
    [checkpoint] = outcome.checkpoints
    step = int(checkpoint.stem.removeprefix("step_"))
    assert request.step is not None and request.step < step <= saved[0] + 1

    read = {"Authorization": f"Bearer {tenant.read}"}
    loss = admin.get(
        f"/api/v1/runs/{run.run_id}/series", params={"metric": "train/loss"}, headers=read
    ).json()["series"][0]
    first_under = next(s for s, v in zip(loss["steps"], loss["values"], strict=True) if v <= 0.1)
    assert request.step == first_under, "the rule fired at the first step under 0.1"
    [listed] = admin.get(f"/api/v1/runs/{run.run_id}/control", headers=read).json()
    assert listed["state"] == "seen"
    alerts = admin.get("/api/v1/alerts", headers=read).json()
    assert [(a["state"], a["step"]) for a in alerts] == [("firing", first_under)]
