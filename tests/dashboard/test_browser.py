"""The dashboard in real headless Chromium against a real server on Postgres."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.dashboard.browser_page import FIGURE_JS, GRAPH, figure, login
from tests.helpers.tenants import Tenant, make_tenant


def seed_run(server: ServerProcess, tenant: Tenant, steps: int = 2000) -> str:
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        run = api.post("/api/v1/runs", json={"name": "overlay-run", "start_step": 0}).json()
        xs = list(range(steps))
        body = {
            "steps": xs,
            "metrics": {
                "grad/norm/total": [0.3 + 0.0005 * s for s in xs],
                "params/norm/final_norm.weight": [78.4 + 0.13 * s for s in xs],
                "params/norm/layers.0.attn.wq": [20.0 + 0.01 * s for s in xs],
                "train/loss": [10.0 / math.sqrt(s + 1) for s in xs],
                "grad/norm/embed": [6.0] * steps,
                **{f"grad/norm/layers.{i}": [1.0 + 0.1 * i] * steps for i in range(4)},
                "grad/norm/lm_head": [9.0] * steps,
            },
        }
        assert api.post(f"/api/v1/runs/{run['id']}/metrics", json=body).status_code == 202
        event = {"step": 1000, "kind": "config", "text": "near-dropless EP routing"}
        assert api.post(f"/api/v1/runs/{run['id']}/events", json=event).status_code == 201
    return str(run["id"])


def test_overlay_red_blue_twin_axes_with_event(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run_id = seed_run(pg_server, tenant)
    login(page, pg_server, tenant.read)
    assert "overlay-run" in page.inner_text("table.runs")
    page.click("a.run-link")
    # The page puts its view into the address at once: with or without a query.
    page.wait_for_url(re.compile(rf"/runs/{run_id}(\?.*)?$"))
    fig = figure(page)

    by_axis = {t["yaxis"]: t for t in fig["data"]}
    assert by_axis["y"]["name"] == "grad/norm/total"
    assert by_axis["y"]["color"] == "#d62728"  # red
    assert by_axis["y2"]["name"] == "params/norm/final_norm.weight"
    assert by_axis["y2"]["color"] == "#1f77b4"  # blue
    assert fig["layout"]["y2"]["overlaying"] == "y" and fig["layout"]["y2"]["side"] == "right"
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [1000]
    assert "near-dropless EP routing" in fig["layout"]["annotations"][0]["text"]
    assert page.locator("#overlay .shapelayer path").count() >= 1  # the event line is drawn
    # The per-layer view: latest grad norms by depth, embedding to lm_head.
    page.wait_for_function(
        "() => { const g = document.querySelector('#depth .js-plotly-plot');"
        " return g && g.data && g.data.length === 1 && g.data[0].type === 'bar'; }"
    )
    bars = page.evaluate(
        "(() => { const t = document.querySelector('#depth .js-plotly-plot').data[0];"
        " return {x: Array.from(t.x), y: Array.from(t.y)}; })()"
    )
    assert bars["x"] == ["embed", "layers.0", "layers.1", "layers.2", "layers.3", "lm_head"]
    assert bars["y"] == [6.0, 1.0, 1.1, 1.2, 1.3, 9.0]
    assert "ends / middle" in page.inner_text("#depth-info")
    page.screenshot(path=str(artifacts / "overlay.png"), full_page=True)


def test_live_refresh_zoom_and_deep_link(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run_id = seed_run(pg_server, tenant)
    login(page, pg_server, tenant.read)
    page.goto(f"{pg_server.url}/runs/{run_id}")
    figure(page)

    # Live: new points show up without a reload.
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("ingest")) as api:
        body = {
            "steps": [2000, 2001],
            "metrics": {"grad/norm/total": [4.0, 5.5], "params/norm/final_norm.weight": [400, 401]},
        }
        assert api.post(f"/api/v1/runs/{run_id}/metrics", json=body).status_code == 202
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); return f && f.data[0].x.includes(2001); }}",
        timeout=5000,
    )
    # An event posted while the page is open shows on the chart and in the list.
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("ingest")) as api:
        event = {"step": 1500, "kind": "restart", "text": "resumed from checkpoint"}
        assert api.post(f"/api/v1/runs/{run_id}/events", json=event).status_code == 201
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); return f && f.layout.shapes.length === 2; }}",
        timeout=5000,
    )
    page.wait_for_selector("#event-list :text('resumed from checkpoint')", timeout=5000)

    # The event's zoom button: the chart zooms around it and focuses it (the list drawn anew
    # with the chart's redraws, its buttons at 0 clicks, moves nothing).
    page.locator("#event-list li:has-text('resumed from checkpoint') button").click()
    page.wait_for_function("() => location.search.includes('focus=1500')")
    query = parse_qs(urlsplit(page.url).query)
    assert (query["start"], query["end"]) == (["1300"], ["1700"])
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); return f && f.data[0].x[0] === 1300; }}"
    )
    page.wait_for_timeout(1500)  # a redraw of the list (a tick) leaves the view as it is
    assert parse_qs(urlsplit(page.url).query)["focus"] == ["1500"]

    # Zoom: the range lands in the URL and the series is re-queried at full detail.
    page.evaluate(
        f"Plotly.relayout(document.querySelector('{GRAPH}'), "
        "{'xaxis.range[0]': 900, 'xaxis.range[1]': 1100})"
    )
    page.wait_for_function("() => location.search.includes('start=900')")
    query = parse_qs(urlsplit(page.url).query)
    assert query["start"] == ["900"] and query["end"] == ["1100"]
    assert query["left"] == ["grad/norm/total"]
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); return f && f.data[0].x.length === 201; }}"
    )
    assert figure(page)["data"][0]["x"] == list(range(900, 1101))

    # A deep link reproduces the view: metrics, range and log scale.
    deep = (
        f"{pg_server.url}/runs/{run_id}?left=train/loss&right=params/norm/layers.0.attn.wq"
        "&start=100&end=300&log=1"
    )
    page.goto(deep)
    fig = figure(page)
    names = {t["yaxis"]: t["name"] for t in fig["data"]}
    assert names == {"y": "train/loss", "y2": "params/norm/layers.0.attn.wq"}
    assert [round(v) for v in fig["layout"]["xrange"]] == [100, 300]
    assert page.evaluate(f"document.querySelector('{GRAPH}').layout.yaxis.type") == "log"
    page.screenshot(path=str(artifacts / "deep-link.png"), full_page=True)

    # The right axis cleared: the URL says so (`right=`), and the link draws it empty again.
    page.locator("#right-metric .dash-dropdown-clear").click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('right') === ''")
    page.wait_for_function(f"() => ({FIGURE_JS})().data.length === 1")
    page.goto(page.url)
    page.wait_for_function(f"() => {{ const f = ({FIGURE_JS})(); return f && f.data.length; }}")
    page.wait_for_timeout(500)
    assert [t["name"] for t in page.evaluate(f"({FIGURE_JS})()")["data"]] == ["train/loss"]


def test_login_required_and_projects_isolated(page: Page, pg_server: ServerProcess) -> None:
    mine = make_tenant(pg_server.database_url)
    theirs = make_tenant(pg_server.database_url)
    their_run = seed_run(pg_server, theirs)
    page.goto(f"{pg_server.url}/runs/{their_run}")
    assert "/login" in page.url
    page.fill("#token", mine.ingest)
    page.click("#login")
    assert "needs a read or admin token" in page.inner_text("body")
    page.fill("#token", mine.read)
    page.click("#login")
    page.wait_for_selector("main h2")
    assert "Not found" in page.inner_text("main")
    page.goto(f"{pg_server.url}/")
    page.wait_for_selector("main .card")
    assert "overlay-run" not in page.inner_text("main")
    # The dashboard's callback endpoint refuses anonymous callers.
    r = httpx.post(f"{pg_server.url}/_dash-update-component", content=json.dumps({}))
    assert r.status_code == 401


def test_a_ratio_on_the_right_axis_and_a_mistyped_metric_said(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tenant = make_tenant(pg_server.database_url)
    run_id = seed_run(pg_server, tenant)
    login(page, pg_server, tenant.read)
    page.goto(f"{pg_server.url}/runs/{run_id}")
    figure(page)
    ratio = "ratio(train/loss, grad/norm/total)"
    page.click("#expression-axis input[value='right']")
    page.fill("#expression", ratio)
    page.press("#expression", "Enter")
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); return f && f.data.some("
        f"t => t.name === {ratio!r} && t.yaxis === 'y2'); }}"
    )
    fig = figure(page)
    names = {t["name"]: t["yaxis"] for t in fig["data"]}
    # The ratio (30 at step 0, 0.3 by the end) has the right axis to itself, in blue.
    assert names == {"grad/norm/total": "y", ratio: "y2"}
    assert [t["color"] for t in fig["data"] if t["name"] == ratio] == ["#1f77b4"]
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('right') === {ratio!r}")
    assert ratio in page.inner_text("#right-metric")
    # Both axes tick at round values (1, 2 or 5 times a power of ten apart), the right one
    # at its own, not at the left grid's positions (30.03, 23.4, ...).
    for axis in ("yaxis", "yaxis2"):
        ticks = page.evaluate(
            f"() => {{ const a = document.querySelector('{GRAPH}')._fullLayout.{axis};"
            " return {dtick: a.dtick, values: a._vals.map(v => v.x)}; }"
        )
        dtick = float(ticks["dtick"])
        assert f"{dtick:.0e}"[0] in "125", (axis, ticks)
        assert all(abs(v / dtick - round(v / dtick)) < 1e-6 for v in ticks["values"]), ticks
    # A mistyped name draws nothing and says why.
    page.fill("#expression", "ratio(train/loss, grad/norm/totl)")
    page.press("#expression", "Enter")
    page.wait_for_selector("#expression-info .error")
    said = "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total')"
    assert said in page.inner_text("#expression-info")
    assert {t["name"] for t in figure(page)["data"]} == {"grad/norm/total", ratio}
    page.screenshot(path=str(artifacts / "ratio-right-axis.png"))
    # A link naming what the run never logged draws the rest and says what it left out.
    page.goto(f"{pg_server.url}/runs/{run_id}?left=grad/norm/total&right=&series=train/los")
    page.wait_for_selector("#range-info .error")
    assert page.inner_text("#range-info .error") == (
        "Not drawn: no metric 'train/los' in this run (closest: 'train/loss')."
    )
    # The note and the figure come in one answer; plotly.js draws the figure a moment later.
    page.wait_for_function(f"() => {{ const f = ({FIGURE_JS})(); return f && f.data.length; }}")
    drawn = page.evaluate(f"({FIGURE_JS})()")
    assert [t["name"] for t in drawn["data"]] == ["grad/norm/total"]
    assert errors == []
