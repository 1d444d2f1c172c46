"""GET /runs/{id}/export over HTTP against a real server: CSV, JSON lines and Parquet of
what was logged, point for point, with its edges (absent cells, non-finite values, names
that need quoting, refusals)."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import httpx
import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

from tests.helpers.tenants import Tenant, make_tenant

GRAD, LOSS = "grad/norm/total", "train/loss"


def new_run(api: httpx.Client, tenant: Tenant, name: str) -> str:
    r = api.post("/api/v1/runs", json={"name": name}, headers=tenant.headers("ingest"))
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def post(api: httpx.Client, tenant: Tenant, run_id: str, steps: list[int], **metrics: Any) -> None:
    r = api.post(
        f"/api/v1/runs/{run_id}/metrics",
        json={"steps": steps, "metrics": metrics},
        headers=tenant.headers("ingest"),
        timeout=60,
    )
    assert r.status_code == 202, r.text


def export(api: httpx.Client, tenant: Tenant, run_id: str, **params: Any) -> httpx.Response:
    return api.get(
        f"/api/v1/runs/{run_id}/export", params=params, headers=tenant.headers("read"), timeout=60
    )


@pytest.fixture
def run_id(api: httpx.Client, tenant: Tenant) -> str:
    """Two metrics at different steps, with NaN and both infinities."""
    run = new_run(api, tenant, "exported")
    post(api, tenant, run, [0, 1, 2, 3], **{GRAD: [0.5, "NaN", 1e-7, 3.0]})
    post(api, tenant, run, [1, 3, 5], **{LOSS: [2.25, "Infinity", "-Infinity"]})
    return run


def test_csv_has_a_row_a_step_and_an_empty_cell_where_absent(
    api: httpx.Client, tenant: Tenant, run_id: str
) -> None:
    r = export(api, tenant, run_id, metric=[GRAD, LOSS])
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == 'attachment; filename="exported.csv"'
    assert r.text == (
        f"step,{GRAD},{LOSS}\n0,0.5,\n1,NaN,2.25\n2,1e-7,\n3,3.0,Infinity\n5,,-Infinity\n"
    )
    ranged = export(api, tenant, run_id, metric=[LOSS, GRAD], start=2, end=3)
    assert ranged.text == f"step,{LOSS},{GRAD}\n2,,1e-7\n3,Infinity,3.0\n"
    assert 'filename="exported_2-3.csv"' in ranged.headers["content-disposition"]


def test_jsonl_and_parquet_hold_the_same_rows(
    api: httpx.Client, tenant: Tenant, run_id: str
) -> None:
    lines = export(api, tenant, run_id, metric=[GRAD, LOSS], format="jsonl")
    assert lines.status_code == 200 and lines.headers["content-type"] == "application/x-ndjson"
    assert [orjson.loads(line) for line in lines.text.splitlines()] == [
        {"step": 0, GRAD: 0.5, LOSS: None},
        {"step": 1, GRAD: "NaN", LOSS: 2.25},
        {"step": 2, GRAD: 1e-7, LOSS: None},
        {"step": 3, GRAD: 3.0, LOSS: "Infinity"},
        {"step": 5, GRAD: None, LOSS: "-Infinity"},
    ]
    parquet = export(api, tenant, run_id, metric=[GRAD, LOSS], format="parquet")
    assert parquet.status_code == 200, parquet.text
    table = pq.read_table(io.BytesIO(parquet.content)).to_pydict()
    assert table["step"] == [0, 1, 2, 3, 5]
    assert table[GRAD][0] == 0.5 and math.isnan(table[GRAD][1]) and table[GRAD][4] is None
    assert table[LOSS] == [None, 2.25, None, math.inf, -math.inf]


def test_globs_expressions_and_names_that_need_quoting(api: httpx.Client, tenant: Tenant) -> None:
    run = new_run(api, tenant, "layers")
    steps = list(range(50))
    rng = np.random.default_rng(0)
    layers = {f"grad/norm/layers.{i}": rng.lognormal(size=50).tolist() for i in range(3)}
    post(api, tenant, run, steps, **layers, **{"odd,name": [1.0] * 50})
    metrics = ["grad/norm/layers.*", "rss(grad/norm/layers.*)", "odd,name"]
    r = export(api, tenant, run, metric=metrics)
    assert r.status_code == 200, r.text
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["step", *sorted(layers), "rss(grad/norm/layers.*)", "odd,name"]
    assert len(rows) == 51
    for row in rows[1:]:
        step = int(row[0])
        parts = [layers[name][step] for name in sorted(layers)]
        assert [float(v) for v in row[1:4]] == parts  # every value as logged
        assert float(row[4]) == pytest.approx(math.sqrt(sum(p * p for p in parts)), rel=1e-12)


def test_a_range_without_points_is_a_header_only(
    api: httpx.Client, tenant: Tenant, run_id: str
) -> None:
    r = export(api, tenant, run_id, metric=GRAD, start=100)
    assert r.status_code == 200 and r.text == f"step,{GRAD}\n"
    assert export(api, tenant, run_id, metric=GRAD, start=100, format="jsonl").text == ""


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"metric": "ratio(a)"}, "ratio"),
        ({"metric": GRAD, "format": "xml"}, "csv"),
        ({"metric": GRAD, "start": 2**63}, "less than or equal to"),
        ({}, "metric"),
        ({"metric": [f"m{i}" for i in range(257)]}, "at most 256"),
        ({"metric": GRAD, "segment": 0}, "greater than or equal to 1"),
        ({"metric": GRAD, "segment": 9}, "has no segment 9"),
    ],
)
def test_bad_requests_are_422s_saying_why(
    api: httpx.Client, tenant: Tenant, run_id: str, params: dict[str, Any], message: str
) -> None:
    r = export(api, tenant, run_id, **params)
    assert r.status_code == 422 and message in r.text, r.text


def test_another_projects_run_is_refused_and_no_run_is_a_404(
    api: httpx.Client, tenant: Tenant, run_id: str, server: Any
) -> None:
    other = make_tenant(server.database_url)
    r = api.get(
        f"/api/v1/runs/{run_id}/export", params={"metric": GRAD}, headers=other.headers("read")
    )
    assert r.status_code == 403
    assert export(api, tenant, "no-such-run", metric=GRAD).status_code == 404


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_names_the_run_never_logged_are_a_404_naming_them_in_every_format(
    api: httpx.Client, tenant: Tenant, run_id: str, kind: str
) -> None:
    """A misspelt name, a glob that matches nothing and an expression over a misspelt name
    are refused before a byte is sent, each named with the closest names the run has."""
    empty = new_run(api, tenant, "empty")
    r = export(api, tenant, empty, metric=GRAD, format=kind)
    assert r.status_code == 404, r.text
    assert r.json() == {
        "detail": f"no metric {GRAD!r} in this run",
        "unknown": [GRAD],
        "suggestions": {GRAD: []},
    }
    asked = [GRAD, "grad/norm/totl", "train/*loss*", "trian/*", "ratio(train/los, grad/norm/total)"]
    r = export(api, tenant, run_id, metric=asked, format=kind)
    assert r.status_code == 404, r.text
    body = r.json()
    assert body["unknown"] == ["grad/norm/totl", "trian/*", "train/los"]
    assert body["suggestions"] == {
        "grad/norm/totl": [GRAD],
        "trian/*": ["train/*", LOSS],
        "train/los": [LOSS],
    }
    assert body["detail"] == (
        "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total'); "
        "'trian/*' matches no metric of this run (closest: 'train/*', 'train/loss'); "
        "no metric 'train/los' in this run (closest: 'train/loss')"
    )
