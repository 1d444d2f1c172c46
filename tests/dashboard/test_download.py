"""The run page's "download CSV" (``/runs/{id}/export.csv``) over HTTP with a viewer's
session, on each backend: values as logged, bit for bit; a metric named ``step`` in a column
of its own; header cells a spreadsheet would take for a formula neutralised."""

from __future__ import annotations

import csv
import io

import httpx
import numpy as np
import pandas as pd

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant

FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+SUM(1+1)", "@SUM(1,1)", "-loss", "'q"]
TRICKY = [2.99993896484375, 16.017241, 1 / 3, 5e-324, float(2**53 + 1), -0.0]


def test_the_download_keeps_values_exact_step_apart_and_formulas_inert(
    server: ServerProcess, tenant: Tenant
) -> None:
    names = ["step", "tricky", *FORMULAS]
    steps = list(range(len(TRICKY)))
    metrics = {"step": [0.5 * s for s in steps], "tricky": TRICKY}
    metrics |= {name: [float(i)] * len(steps) for i, name in enumerate(FORMULAS)}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        made = http.post("/api/v1/runs", json={"name": "download"}, headers=tenant.headers())
        run_id = made.json()["id"]
        body = {"steps": steps, "metrics": metrics}
        posted = http.post(f"/api/v1/runs/{run_id}/metrics", json=body, headers=tenant.headers())
        assert posted.status_code == 202, posted.text
        login = http.get("/login", params={"token": tenant.read})
        assert login.status_code == 303, login.text
        r = http.get(f"/runs/{run_id}/export.csv", params={"metric": names})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")

    header, *rows = list(csv.reader(io.StringIO(r.text, newline="")))
    assert header == ["step", "step (metric)", "tricky", *("'" + name for name in FORMULAS)]
    assert [int(row[0]) for row in rows] == steps
    assert [float(row[1]) for row in rows] == metrics["step"]
    got = np.array([float(row[2]) for row in rows])
    assert got.view(np.int64).tolist() == np.array(TRICKY).view(np.int64).tolist()
    frame = pd.read_csv(io.StringIO(r.text))
    assert list(frame.columns) == header
    assert frame["tricky"].to_numpy().view(np.int64).tolist() == got.view(np.int64).tolist()
