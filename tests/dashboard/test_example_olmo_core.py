"""The OLMo-core naming example: its run, under the olmo-core preset, read and drawn under
normwatch's canonical names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

ROOT = Path(__file__).resolve().parents[2]


def test_example_logs_olmo_core_names_read_as_canonical(
    page: Page, pg_server: ServerProcess, artifacts: Path, tmp_path: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "olmo_core_preset.py"),
            *("--url", pg_server.url, "--token", tenant.ingest),
            *("--admin-token", tenant.admin, "--project", tenant.project),
            *("--name", "olmo-style", "--steps", "40"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NORMWATCH_SPOOL_DIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("read")) as api:
        [run] = api.get("/api/v1/runs").json()
        names = sorted(m["name"] for m in api.get(f"/api/v1/runs/{run['id']}/metrics").json())
        assert names == [
            "optim/LR (group 0)",
            "optim/total grad norm",
            "params/norm/final_norm.weight",
            "train/CE loss",
            "train/Z loss",
        ]
        got = api.get(
            f"/api/v1/runs/{run['id']}/series",
            params={"metric": ["grad/norm/total", "train/loss", "optim/lr"]},
        ).json()["series"]
    assert [(s["metric"], s.get("source"), len(s["steps"])) for s in got] == [
        ("grad/norm/total", "optim/total grad norm", 40),
        ("train/loss", "train/CE loss", 40),
        ("optim/lr", "optim/LR (group 0)", 40),
    ]

    page.goto(f"{pg_server.url}/login?token={tenant.read}&next=/runs/{run['id']}")
    page.wait_for_function(
        "() => { const g = document.querySelector('#overlay .js-plotly-plot');"
        " return g && g.data && g.data.length >= 2; }"
    )
    traces = page.evaluate(
        "Array.from(document.querySelector('#overlay .js-plotly-plot').data, t => t.name)"
    )
    assert traces == [
        "grad/norm/total (optim/total grad norm)",
        "params/norm/final_norm.weight",
    ]
    page.screenshot(path=str(artifacts / "example-olmo-core.png"), full_page=True)
