"""The run chart's daily controls in real headless Chromium against a real server on
Postgres: smoothing (the raw line faint behind), log scale, the x axis by tokens and by
wall time, normalize mode and the outlier-proof y range, each set by hand and each carried
by the URL, with no console errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

GRAPH = "#overlay .js-plotly-plot"
CHART_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data || !gd._fullLayout) return null;
  return {{
    data: gd.data.map(t => ({{name: t.name, yaxis: t.yaxis || 'y', opacity: t.opacity ?? 1,
      x: Array.from(t.x || []), y: Array.from(t.y || [])}})),
    xtitle: (gd._fullLayout.xaxis.title || {{}}).text || '', xrange: gd._fullLayout.xaxis.range,
    ytype: gd._fullLayout.yaxis.type, ytitle: (gd._fullLayout.yaxis.title || {{}}).text || '',
    yrange: gd._fullLayout.yaxis.range,
  }};
}}"""
TOKENS_PER_STEP = 1000
HOUR = 3600.0
START = 1_790_000_000.0


def seed(server: ServerProcess, tenant: Tenant) -> str:
    """A run of 400 steps in four batches an hour apart, grad norm 1 with a spike of 400 at
    step 250, a parameter norm growing 5 % over the run, and a tokens counter."""
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        run = api.post("/api/v1/runs", json={"name": "shaping-run", "start_step": 0}).json()
        for batch in range(4):
            xs = list(range(batch * 100, batch * 100 + 100))
            body = {
                "steps": xs,
                "time": START + batch * HOUR,
                "metrics": {
                    "grad/norm/total": [400.0 if s == 250 else 1.0 + 0.2 * (s % 2) for s in xs],
                    "params/norm/final_norm.weight": [300.0 * (1 + 0.05 * s / 399) for s in xs],
                    "throughput/total_tokens": [(s + 1.0) * TOKENS_PER_STEP for s in xs],
                },
            }
            assert api.post(f"/api/v1/runs/{run['id']}/metrics", json=body).status_code == 202
    return str(run["id"])


def chart(page: Page, until: str = "true") -> dict[str, Any]:
    page.wait_for_function(f"() => {{ const c = ({CHART_JS})(); return c && ({until}); }}")
    result: dict[str, Any] = page.evaluate(f"({CHART_JS})()")
    return result


def query(page: Page) -> dict[str, str]:
    found: dict[str, str] = page.evaluate(
        "() => Object.fromEntries(new URLSearchParams(location.search))"
    )
    return found


def test_smoothing_log_scale_and_the_x_axis_by_tokens_and_by_time(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tenant = make_tenant(pg_server.database_url)
    run_id = seed(pg_server, tenant)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("table.runs")
    page.goto(f"{pg_server.url}/runs/{run_id}")
    plain = chart(page, "c.data.length >= 2")
    assert plain["xrange"] == [0, 399]  # no padding past the data

    # Smoothing: typed into the slider's own field.
    page.fill("#smoothing input", "0.9")
    page.press("#smoothing input", "Tab")
    smoothed = chart(page, "c.data.some(t => t.name.endsWith('(raw)'))")
    raw = next(t for t in smoothed["data"] if t["name"] == "grad/norm/total (raw)")
    line = next(t for t in smoothed["data"] if t["name"] == "grad/norm/total")
    assert raw["opacity"] == 0.25 and raw["y"][250] == 400.0
    assert 1.0 < line["y"][200] < 1.2 and line["y"][250] < 100  # the spike smoothed down
    page.wait_for_function("() => new URLSearchParams(location.search).get('smooth') === '0.9'")

    # Log scale.
    page.click("#log-scale input")
    assert chart(page, "c.ytype === 'log'")["ytype"] == "log"
    assert query(page)["log"] == "1"

    # By tokens: the run's tokens metric, named on the axis; a step lands at its count.
    page.click("#x-axis input[value='tokens']")
    by_tokens = chart(page, "c.xtitle.startsWith('tokens')")
    assert by_tokens["xtitle"] == "tokens (throughput/total_tokens)"
    line = next(t for t in by_tokens["data"] if t["name"] == "grad/norm/total")
    assert line["x"][0] == TOKENS_PER_STEP and line["x"][-1] == 400 * TOKENS_PER_STEP
    assert query(page)["x"] == "tokens"
    page.screenshot(path=str(artifacts / "shaping-tokens.png"))

    # By wall time: the batches' own times, an hour apart: step 399 three hours after 99.
    page.click("#x-axis input[value='time']")
    by_time = chart(page, "c.xtitle.startsWith('wall time')")
    line = next(t for t in by_time["data"] if t["name"] == "grad/norm/total")
    at = dict(zip([round(x, 6) for x in line["x"]], range(len(line["x"])), strict=False))
    assert math.isclose(line["x"][399] - line["x"][99], 3.0, abs_tol=1e-6), at
    assert by_time["xtitle"] == "wall time since the run's start (h)"
    assert min(x for x in line["x"] if x is not None) == 0.0
    assert query(page)["x"] == "time"

    # The link reproduces the view.
    page.goto(page.url)
    again = chart(page, "c.xtitle.startsWith('wall time') && c.ytype === 'log'")
    assert any(t["name"] == "grad/norm/total (raw)" for t in again["data"])
    assert errors == []


def test_normalize_mode_and_a_y_range_that_ignores_the_spike(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tenant = make_tenant(pg_server.database_url)
    run_id = seed(pg_server, tenant)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("table.runs")
    page.goto(f"{pg_server.url}/runs/{run_id}")
    chart(page, "c.data.length >= 2")

    page.click("#normalize")
    page.click("text=÷ first value in the view")
    normal = chart(page, "c.ytitle === 'each series ÷ its first value in the view'")
    by_name = {t["name"]: t for t in normal["data"]}
    assert {t["yaxis"] for t in normal["data"]} == {"y"}  # one axis for both
    param = by_name["params/norm/final_norm.weight"]["y"]
    assert param[0] == 1.0 and math.isclose(param[-1], 1.05, rel_tol=1e-6)
    assert by_name["grad/norm/total"]["y"][250] == 400.0
    assert query(page)["norm"] == "start"

    page.click("#chart-options input[value='robust']")
    robust = chart(page, "c.yrange[1] < 10")
    assert robust["yrange"][0] < 1.0 < 1.2 < robust["yrange"][1] < 2.0
    assert query(page)["robust"] == "1"
    page.screenshot(path=str(artifacts / "shaping-normalize.png"))
    assert errors == []


def test_download_csv_saves_every_stored_point_of_the_charted_range(
    page: Page, pg_server: ServerProcess, tmp_path: Path
) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tenant = make_tenant(pg_server.database_url)
    run_id = seed(pg_server, tenant)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("table.runs")
    page.goto(f"{pg_server.url}/runs/{run_id}?start=240&end=259")
    chart(page, "c.data.length >= 2")
    page.wait_for_function(
        "() => (document.querySelector('#download-csv') || {}).href?.includes('start=240')"
    )
    with page.expect_download() as caught:
        page.click("#download-csv")
    download = caught.value
    assert download.suggested_filename == "shaping-run_240-259.csv"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    rows = saved.read_text().splitlines()
    assert rows[0] == "step,grad/norm/total,params/norm/final_norm.weight"
    assert [int(r.split(",")[0]) for r in rows[1:]] == list(range(240, 260))
    by_step = {int(r.split(",")[0]): r.split(",") for r in rows[1:]}
    assert by_step[250][1] == "400.0" and by_step[251][1] == "1.2"
    # As logged (within float32, should the server have compacted the run meanwhile).
    assert math.isclose(float(by_step[240][2]), 300.0 * (1 + 0.05 * 240 / 399), rel_tol=1e-7)
    assert errors == []
