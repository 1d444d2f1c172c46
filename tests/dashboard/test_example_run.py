"""The example trainer's run, seen in the dashboard with its layers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_example_run_shows_overlay_and_layers(
    page: Page, pg_server: ServerProcess, artifacts: Path, tmp_path: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "train_lm.py"),
            *("--url", pg_server.url, "--token", tenant.ingest, "--name", "char-lm"),
            *("--steps", "20", "--layers", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "NORMWATCH_SPOOL_DIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("read")) as api:
        [run] = api.get("/api/v1/runs").json()

    page.goto(f"{pg_server.url}/login?token={tenant.read}&next=/runs/{run['id']}")
    page.wait_for_function(
        "() => { const g = document.querySelector('#overlay .js-plotly-plot');"
        " return g && g.data && g.data.length >= 2; }"
    )
    names = page.evaluate(
        "Array.from(document.querySelector('#overlay .js-plotly-plot').data, t => t.name)"
    )
    assert names == ["grad/norm/total", "params/norm/final_norm.scale"]
    page.wait_for_function(
        "() => { const g = document.querySelector('#depth .js-plotly-plot');"
        " return g && g.data && g.data[0] && g.data[0].type === 'bar'; }"
    )
    labels = page.evaluate("Array.from(document.querySelector('#depth .js-plotly-plot').data[0].x)")
    assert labels[labels.index("layers.0") : labels.index("layers.1") + 1] == [
        "layers.0",
        "layers.1",
    ]
    assert labels[-1].startswith("lm_head")
    # A deep link as the server's very first page still gets the stylesheet.
    assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).display") == "flex"
    page.screenshot(path=str(artifacts / "example-run.png"), full_page=True)
