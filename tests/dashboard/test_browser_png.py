"""The chart's "Download plot as a png" button saves a PNG under the dashboard's security
policy (Plotly draws the image through a ``blob:`` URL, which ``img-src`` must allow)."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.dashboard.browser_page import GRAPH, BrowserProblems, login
from tests.helpers.tenants import make_tenant

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_png_download_saves_the_chart(
    page: Page, pg_server: ServerProcess, tmp_path: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    body = {"steps": list(range(200)), "metrics": {"grad/norm/total": [0.3] * 200}}
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("ingest")) as api:
        run = api.post("/api/v1/runs", json={"name": "png-run"}).json()["id"]
        assert api.post(f"/api/v1/runs/{run}/metrics", json=body).status_code == 202
    problems = BrowserProblems(page)
    login(page, pg_server, tenant.read)
    problems.collect()
    page.goto(f"{pg_server.url}/runs/{run}")
    page.wait_for_function(
        f"() => {{ const gd = document.querySelector('{GRAPH}');"
        " return gd && gd.data && gd.data.length >= 1; }"
    )
    page.hover(GRAPH)
    with page.expect_download() as waiting:
        page.click(f'{GRAPH} .modebar-btn[data-title="Download plot as a PNG"]')
    saved = tmp_path / "chart.png"
    waiting.value.save_as(saved)
    data = saved.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000, len(data)
    assert waiting.value.suggested_filename == "normwatch-chart.png"
    problems.assert_none()
