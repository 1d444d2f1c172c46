"""`normwatch.client.Api` against a real server on each backend: runs found by name, state,
tags and config; `history` and `history_frame` equal what was logged, point for point; the
analyses as the HTTP API answers them; refusals as `ApiError` with the server's reason."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from normwatch.client import Api, ApiError
from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant

GRAD, LOSS = "grad/norm/total", "train/loss"


def create(server: ServerProcess, tenant: Tenant, name: str, **body: Any) -> str:
    r = httpx.post(
        f"{server.url}/api/v1/runs", json={"name": name, **body}, headers=tenant.headers("ingest")
    )
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def post(server: ServerProcess, tenant: Tenant, run_id: str, steps: Any, **metrics: Any) -> None:
    def enc(v: float) -> object:
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(repr(v), v)

    body = {
        "steps": [int(s) for s in steps],
        "metrics": {k: [enc(float(x)) for x in v] for k, v in metrics.items()},
    }
    r = httpx.post(
        f"{server.url}/api/v1/runs/{run_id}/metrics",
        json=body,
        headers=tenant.headers("ingest"),
        timeout=60,
    )
    assert r.status_code == 202, r.text


@pytest.fixture
def api(server: ServerProcess, tenant: Tenant) -> Any:
    with Api(server.url, tenant.read) as client:
        yield client


def test_runs_are_found_by_name_state_tags_and_config(
    api: Api, server: ServerProcess, tenant: Tenant
) -> None:
    a = create(server, tenant, "lr-3e-4", config={"optimizer": {"lr": 3e-4}}, tags=["base"])
    b = create(server, tenant, "lr-1e-3", config={"optimizer": {"lr": 1e-3}}, tags=["base", "x"])
    c = create(server, tenant, "other", config={"optimizer": {"lr": 3e-4}})
    r = httpx.patch(
        f"{server.url}/api/v1/runs/{b}", json={"status": "finished"}, headers=tenant.headers()
    )
    assert r.status_code == 200, r.text
    assert {run["id"] for run in api.runs()} == {a, b, c}
    assert [run["id"] for run in api.runs(name="lr-*")] in ([a, b], [b, a])
    [found] = api.runs(name="lr-3e-4")
    assert found["state"] == found["status"] == "running" and found["project"] == tenant.project
    assert [run["id"] for run in api.runs(state="finished")] == [b]
    assert {run["id"] for run in api.runs(tags=["base"])} == {a, b}
    assert [run["id"] for run in api.runs(tags=["base", "x"])] == [b]
    assert {run["id"] for run in api.runs(config={"optimizer.lr": 0.0003})} == {a, c}
    assert api.runs(config={"optimizer.momentum": 0.9}) == []
    assert api.run(a)["name"] == "lr-3e-4"


def test_history_is_every_point_as_logged(api: Api, server: ServerProcess, tenant: Tenant) -> None:
    run = create(server, tenant, "history")
    rng = np.random.default_rng(0)
    grad = rng.lognormal(size=1000)
    grad[[3, 500]] = [np.nan, np.inf]
    loss_steps = np.arange(0, 1000, 4)
    loss = 3 + rng.standard_normal(len(loss_steps))
    loss[7] = -np.inf
    post(server, tenant, run, range(1000), **{GRAD: grad})
    post(server, tenant, run, loss_steps, **{LOSS: loss})

    h = api.history(run, [GRAD, LOSS])
    assert list(h) == ["step", GRAD, LOSS] and h["step"] == list(range(1000))
    got = np.array(h[GRAD])
    assert np.array_equal(got, grad, equal_nan=True)  # every float64 bit for bit
    want_loss = {int(s): float(v) for s, v in zip(loss_steps, loss, strict=True)}
    assert [v for v in h[LOSS] if v is not None] == list(want_loss.values())
    assert all((h[LOSS][s] is None) == (s not in want_loss) for s in range(1000))

    frame = api.history_frame(run, [GRAD, LOSS], start=100, end=199)
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == ["step", GRAD, LOSS]
    assert frame["step"].tolist() == list(range(100, 200)) and frame["step"].dtype == np.int64
    assert np.array_equal(frame[GRAD].to_numpy(), grad[100:200])
    assert frame[LOSS].isna().sum() == 75 and frame[LOSS][0] == want_loss[100]

    one = api.history(run, GRAD, start=998)
    assert one == {"step": [998, 999], GRAD: [float(grad[998]), float(grad[999])]}
    assert api.history(run, GRAD, start=2000) == {"step": [], GRAD: []}
    with pytest.raises(ApiError, match="no metric 'never/logged' in this run") as unknown:
        api.history(run, "never/logged")
    assert (unknown.value.status, unknown.value.unknown) == (404, ["never/logged"])


def test_history_of_an_earlier_segment_has_the_steps_a_restart_replaced(
    api: Api, server: ServerProcess, tenant: Tenant
) -> None:
    run = create(server, tenant, "restarted")
    post(server, tenant, run, range(10), **{LOSS: [3.0] * 10})
    create(server, tenant, "restarted", start_step=5)  # back to the checkpoint at step 5
    post(server, tenant, run, range(5, 8), **{LOSS: [2.0] * 3})
    assert [s["segment"] for s in api.run(run)["segments"]] == [1, 2]
    assert api.history(run, LOSS) == {"step": list(range(8)), LOSS: [3.0] * 5 + [2.0] * 3}
    assert api.history(run, LOSS, segment=1) == {"step": list(range(10)), LOSS: [3.0] * 10}
    with pytest.raises(ApiError, match="has no segment 3"):
        api.history(run, LOSS, segment=3)
    with pytest.raises(ValueError, match="segment"):
        api.history(run, LOSS, segment="first")


def test_export_writes_the_format_its_suffix_names(
    api: Api, server: ServerProcess, tenant: Tenant, tmp_path: Path
) -> None:
    run = create(server, tenant, "files")
    post(server, tenant, run, range(5), **{GRAD: [0.5, 1.5, math.nan, 2.5, 3.5]})
    written = api.export(run, GRAD, tmp_path / "grad.csv")
    assert list(csv.reader(written.read_text().splitlines())) == [
        ["step", GRAD],
        ["0", "0.5"],
        ["1", "1.5"],
        ["2", "NaN"],
        ["3", "2.5"],
        ["4", "3.5"],
    ]
    lines = api.export(run, GRAD, tmp_path / "grad.jsonl").read_text().splitlines()
    assert lines[0] == f'{{"step":0,"{GRAD}":0.5}}' and len(lines) == 5
    table = pq.read_table(api.export(run, GRAD, tmp_path / "grad.parquet")).to_pydict()
    assert table["step"] == [0, 1, 2, 3, 4] and table[GRAD][3] == 2.5


def test_the_analyses_answer_as_the_http_api_does(
    api: Api, server: ServerProcess, tenant: Tenant
) -> None:
    run = create(server, tenant, "analysed")
    steps = np.arange(2000)
    rng = np.random.default_rng(1)
    update = 1.0 + 0.01 * rng.standard_normal(2000)
    update[[700, 1400]] *= 2.0
    layers = {f"grad/norm/layers.{i}": 1.0 + 0.1 * rng.random(2000) for i in range(4)}
    post(server, tenant, run, steps, **{"updates/norm/total": update}, **layers)
    spikes = api.spikes(run, "updates/norm/total")
    assert [s["start"] for s in spikes["spikes"]] == [700, 1400]
    grid = api.layers(run, "grad/norm", points=100)
    assert grid["layers"] == [f"layers.{i}" for i in range(4)]
    assert len(grid["u_index"]) == len(grid["steps"])
    assert api.transitions(run, "updates/norm/total")["transitions"] == []
    [series] = api.series(run, "updates/norm/total", points=10)
    assert series["metric"] == "updates/norm/total" and series["downsampled"]
    event = {"step": 700, "kind": "note", "text": "data shard 12"}
    r = httpx.post(
        f"{server.url}/api/v1/runs/{run}/events", json=event, headers=tenant.headers("ingest")
    )
    assert r.status_code == 201, r.text
    assert [(e["step"], e["text"]) for e in api.events(run)] == [(700, "data shard 12")]
    assert api.alerts(run=run) == []
    compared = api.compare([run], "updates/norm/total")
    assert [r["run"] for r in compared["runs"]] == [run]
    assert [m["name"] for m in api.metrics(run)] == sorted([*layers, "updates/norm/total"])


def test_refusals_are_api_errors_with_the_servers_reason(
    api: Api, server: ServerProcess, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = create(server, tenant, "refused")
    with pytest.raises(ApiError, match="ratio") as bad:
        api.history(run, "ratio(a)")
    assert bad.value.status == 422
    with pytest.raises(ApiError) as missing:
        api.run("no-such-run")
    assert missing.value.status == 404 and "no run" in missing.value.detail
    with pytest.raises(ApiError, match="threshold: Input should be greater than or equal to 2"):
        api.spikes(run, GRAD, threshold=1)
    with Api(server.url, "nw_not-a-token") as stranger, pytest.raises(ApiError) as denied:
        stranger.runs()
    assert denied.value.status == 401
    monkeypatch.delenv("NORMWATCH_URL", raising=False)
    monkeypatch.delenv("NORMWATCH_TOKEN", raising=False)
    with pytest.raises(ValueError, match="NORMWATCH_URL and NORMWATCH_TOKEN"):
        Api()
    monkeypatch.setenv("NORMWATCH_URL", server.url)
    monkeypatch.setenv("NORMWATCH_TOKEN", tenant.read)
    with Api() as from_environment:
        assert [r["id"] for r in from_environment.runs(name="refused")] == [run]
