"""The run page's metric panels in real headless Chromium against a real server on
Postgres: a panel is drawn only once it scrolls into view; pinning, hiding and moving are
saved for the project (a reload and another browser see them); zooming one panel moves
the overlay and the other panels."""

from __future__ import annotations

import json

import httpx
from playwright.sync_api import Browser, Page

from normwatch.testing import ServerProcess
from tests.dashboard.browser_page import BrowserProblems
from tests.helpers.tenants import Tenant, make_tenant

LAYERS = 30
DRAWN = "#panel-groups .panel-body .js-plotly-plot"


def seed(server: ServerProcess, tenant: Tenant) -> str:
    """A run of 100 steps logging the loss, the total grad norm, a parameter norm and the
    grad norm of `LAYERS` layers (one panel each, in the grad/norm group)."""
    steps = list(range(100))
    metrics = {
        "train/loss": [4.0 - s / 50 for s in steps],
        "grad/norm/total": [1.0 + (s % 3) / 10 for s in steps],
        "params/norm/final_norm.weight": [300.0 + s for s in steps],
        **{f"grad/norm/layers.{i}": [0.1 * (i + 1)] * len(steps) for i in range(LAYERS)},
    }
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        run = api.post("/api/v1/runs", json={"name": "panels-run", "start_step": 0}).json()
        body = {"steps": steps, "metrics": metrics}
        assert api.post(f"/api/v1/runs/{run['id']}/metrics", json=body).status_code == 202
    return str(run["id"])


def panel(key: str) -> str:
    return f'#panel-groups .panel[data-key="{key}"]'


def drawn_keys(page: Page) -> list[str]:
    found: list[str] = page.evaluate(
        f"""() => Array.from(document.querySelectorAll('{DRAWN}'))
            .map(g => g.closest('.panel').dataset.key)"""
    )
    return found


def open_run(page: Page, server: ServerProcess, token: str, run_id: str) -> None:
    page.goto(f"{server.url}/login?token={token}")
    page.wait_for_selector("table.runs")
    page.goto(f"{server.url}/runs/{run_id}")
    page.wait_for_selector("#overlay .js-plotly-plot")


def test_a_panel_is_drawn_only_once_it_scrolls_into_view(
    page: Page, pg_server: ServerProcess
) -> None:
    problems = BrowserProblems(page)
    page.set_viewport_size({"width": 1400, "height": 600})
    tenant = make_tenant(pg_server.database_url)
    run_id = seed(pg_server, tenant)
    open_run(page, pg_server, tenant.read, run_id)
    page.evaluate(f"() => document.querySelector('{panel('train/loss')}').scrollIntoView()")
    page.wait_for_selector(f"{panel('train/loss')} .js-plotly-plot")
    # A group shows 12 panels, and more on asking.
    assert page.locator("#panel-groups .panel").count() == 1 + 12 + 1
    more = '[data-group="grad/norm"] button.panel-more'
    assert page.text_content(more) == "show 12 more (12 of 31 shown)"
    page.wait_for_timeout(500)  # what the observer sent has been drawn
    params = panel("params/norm/final_norm.weight")  # below four rows of grad norms
    assert page.locator(f"{params} .js-plotly-plot").count() == 0
    drawn = drawn_keys(page)
    assert "train/loss" in drawn and len(drawn) < 14
    page.evaluate(f"() => document.querySelector('{params}').scrollIntoView()")
    page.wait_for_selector(f"{params} .js-plotly-plot")
    ys = page.evaluate(
        f"() => Array.from(document.querySelector('{params} .js-plotly-plot').data[0].y)"
    )
    assert len(ys) == 100 and (ys[0], ys[-1]) == (300.0, 399.0)
    page.click(more)
    page.wait_for_function("() => document.querySelectorAll('#panel-groups .panel').length === 26")
    assert page.text_content(more) == "show 7 more (24 of 31 shown)"
    problems.assert_none()


def test_pin_hide_and_move_are_saved_for_the_project(
    browser: Browser, page: Page, pg_server: ServerProcess
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run_id = seed(pg_server, tenant)
    open_run(page, pg_server, tenant.admin, run_id)
    page.click(f'{panel("grad/norm/layers.3")} button:text-is("pin")')
    page.wait_for_selector('[data-group="pinned"] .panel[data-key="grad/norm/layers.3"]')
    page.click(f'{panel("train/loss")} button:text-is("hide")')
    page.wait_for_selector("#panel-hidden summary:text-is('hidden (1)')")
    page.click(f'{panel("grad/norm/layers.1")} button:text-is("↓")')
    page.wait_for_function(
        """() => { const keys = Array.from(document.querySelectorAll(
            '[data-group="grad/norm"] .panel')).map(p => p.dataset.key);
            const at = k => keys.indexOf('grad/norm/layers.' + k);
            return at(1) === at(2) + 1; }"""
    )
    layout_js = """() => Array.from(document.querySelectorAll('#panel-groups details'))
        .map(d => [d.querySelector('summary').textContent,
                   Array.from(d.querySelectorAll('.panel')).slice(0, 4).map(p => p.dataset.key)])"""
    shown = page.evaluate(layout_js)
    assert shown[0] == ["pinned (1)", ["grad/norm/layers.3"]]
    # Layers in numeric order, layers.3 pinned out of the group, layers.1 moved down.
    assert shown[1] == [
        "grad/norm (30)",
        ["grad/norm/layers.0", "grad/norm/layers.2", "grad/norm/layers.1", "grad/norm/layers.4"],
    ]
    assert page.text_content("#panel-note") == ""
    # The parameter norms folded: saved as the browser folds them.
    folded = '[data-group="params/norm"]'
    page.click(f"{folded} > summary")
    assert page.evaluate(f"() => document.querySelector('{folded}').open") is False
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("read"), timeout=30) as api:
        for _ in range(100):
            layout = api.get(f"/api/v1/projects/{tenant.project}/workspace").json()["layout"]
            if layout["collapsed"]:
                break
            page.wait_for_timeout(100)
    assert layout["collapsed"] == ["params/norm"]
    page.reload()
    page.wait_for_selector("#panel-hidden")
    assert page.evaluate(layout_js) == shown
    assert page.evaluate(f"() => document.querySelector('{folded}').open") is False

    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        second = other.new_page()
        second.set_default_timeout(15_000)
        open_run(second, pg_server, tenant.read, run_id)
        assert second.evaluate(layout_js) == shown
        # A read token may not save: the change stays on this page, and the page says so.
        second.click(f'{panel("grad/norm/layers.0")} button:text-is("hide")')
        second.wait_for_selector("#panel-hidden summary:text-is('hidden (2)')")
        assert second.text_content("#panel-note") == (
            "Shown on this page until it is reloaded: "
            "saving the project's panel layout needs an admin token."
        )
    finally:
        other.close()
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("read"), timeout=30) as api:
        saved = api.get(f"/api/v1/projects/{tenant.project}/workspace").json()
    assert saved["layout"]["pinned"] == ["grad/norm/layers.3"]
    assert saved["layout"]["hidden"] == ["train/loss"]
    assert saved["revision"] == 4


def test_zooming_one_panel_moves_the_overlay_and_the_others(
    page: Page, pg_server: ServerProcess
) -> None:
    problems = BrowserProblems(page)
    tenant = make_tenant(pg_server.database_url)
    run_id = seed(pg_server, tenant)
    open_run(page, pg_server, tenant.read, run_id)
    loss, total = panel("train/loss"), panel("grad/norm/layers.0")
    page.evaluate(f"() => document.querySelector('{loss}').scrollIntoView()")
    page.wait_for_selector(f"{loss} .js-plotly-plot")
    page.wait_for_selector(f"{total} .js-plotly-plot")
    # A drag across the loss panel's plot area: a box zoom on its x axis.
    box = page.locator(f"{loss} .nsewdrag").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.75, y, steps=5)
    page.mouse.up()
    page.wait_for_function("() => new URLSearchParams(location.search).has('start')")
    start = int(page.evaluate("() => new URLSearchParams(location.search).get('start')"))
    end = int(page.evaluate("() => new URLSearchParams(location.search).get('end')"))
    assert 15 <= start <= 35 and 65 <= end <= 85, (start, end)
    wanted = json.dumps([start, end], separators=(",", ":"))
    for graph in ("#overlay", total):
        page.wait_for_function(
            f"""() => {{ const gd = document.querySelector('{graph} .js-plotly-plot');
                return gd && JSON.stringify(gd.layout.xaxis.range) === '{wanted}'; }}"""
        )
    problems.assert_none()
