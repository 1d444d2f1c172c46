"""Text from trainers drawn in real Chromium: markup in a metric name or an event's text
shows as written and never becomes a link, a style or a template variable in a chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

LEFT = '<a href="javascript:alert(1)">x</a>'
RIGHT = 'params/norm/<span style="font-size:80px">big</span> %{y} &amp;'
TOP_LAYER = "grad/norm/lm_head.<b>bold</b>"
EVENT = '<a href="javascript:alert(1)">zoom</a> <span style="font-size:80px">%{x}</span> &amp;'
KIND = "<b>kind</b>"

GRAPH = "#overlay .js-plotly-plot"
# Every element of the two charts' SVG that markup in a text could have made.
INJECTED_JS = """() => {
  const all = Array.from(document.querySelectorAll('#overlay svg *, #depth svg *'));
  const xlink = 'http://www.w3.org/1999/xlink';
  const href = e => e.getAttribute('href') || e.getAttributeNS(xlink, 'href') || '';
  const style = e => (e.getAttribute('style') || '').replace(/\\s/g, '');
  const everything = Array.from(document.querySelectorAll('*'));
  return {
    links: all.filter(e => e.tagName.toLowerCase() === 'a').length,
    javascript: everything.filter(e => href(e).includes('javascript:')).length,
    big: all.filter(e => style(e).includes('font-size:80px')).length,
    bold: all.filter(e => style(e).includes('font-weight:bold')).length,
  };
}"""


def texts(page: Page, selector: str) -> list[str]:
    found: list[str] = page.evaluate(
        "s => Array.from(document.querySelectorAll(s)).map(e => e.textContent)", selector
    )
    return found


def seed(server: ServerProcess) -> tuple[str, str]:
    tenant = make_tenant(server.database_url)
    steps = list(range(300))
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        run = api.post("/api/v1/runs", json={"name": "markup-run", "start_step": 0}).json()
        body = {
            "steps": steps,
            "metrics": {
                LEFT: [2.0] * len(steps),
                RIGHT: [3.0] * len(steps),
                "grad/norm/layers.0": [1.0] * len(steps),
                "grad/norm/layers.1": [1.5] * len(steps),
                TOP_LAYER: [4.0] * len(steps),
            },
        }
        assert api.post(f"/api/v1/runs/{run['id']}/metrics", json=body).status_code == 202
        event = {"step": 100, "kind": KIND, "text": EVENT}
        assert api.post(f"/api/v1/runs/{run['id']}/events", json=event).status_code == 201
    return str(run["id"]), tenant.read


def test_markup_in_metric_names_and_events_is_drawn_as_text(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    run_id, token = seed(pg_server)
    view = urlencode({"left": LEFT, "right": RIGHT})
    page.goto(
        f"{pg_server.url}/login?{urlencode({'token': token, 'next': f'/runs/{run_id}?{view}'})}"
    )
    page.wait_for_function(
        f"() => {{ const g = document.querySelector('{GRAPH}');"
        " return g && g.data && g.data.length === 2; }"
    )
    page.wait_for_selector("#overlay .annotation-text")
    page.wait_for_selector("#depth .xtick text")

    assert page.evaluate(INJECTED_JS) == {"links": 0, "javascript": 0, "big": 0, "bold": 0}
    assert texts(page, "#overlay .legendtext") == [LEFT, RIGHT]
    assert texts(page, "#overlay .annotation-text") == [f"{EVENT} (100)"]
    assert texts(page, "#overlay .g-ytitle text") == [LEFT]
    assert texts(page, "#overlay .g-y2title text") == [RIGHT]
    assert texts(page, "#depth .xtick text") == ["layers.0", "layers.1", "lm_head.<b>bold</b>"]
    info = page.inner_text("#range-info")
    assert info == f"{LEFT}: 300 points, steps 0–299 · {RIGHT}: 300 points, steps 0–299"
    assert f"step 100 · {KIND} · {EVENT}" in page.inner_text("#event-list")

    # Hover: the metric names label the values as written; '%{y}' in a name stays literal.
    box = page.locator("#overlay .nsewdrag").first.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#overlay .hoverlayer .legendtext")
    hover: list[Any] = page.evaluate(
        "Array.from(document.querySelectorAll('#overlay .hoverlayer .legendtext'))"
        ".map(t => Array.from(t.querySelectorAll('tspan.line')).map(l => l.textContent))"
    )
    step = hover[0][0].rsplit(" ", 1)[-1]
    assert 100 < int(step) < 200
    assert hover == [[f"{LEFT} : step {step}", "2.00000"], [f"{RIGHT} : step {step}", "3.00000"]]
    assert page.evaluate(INJECTED_JS) == {"links": 0, "javascript": 0, "big": 0, "bold": 0}
    page.screenshot(path=str(artifacts / "chart-text.png"), full_page=True)
