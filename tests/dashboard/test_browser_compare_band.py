"""The compare chart's mean and panels in real headless Chromium against a real server on
Postgres: a downsampled run's spike stays inside the band plotly.js draws, the legend says
how many runs count after one ends, and two metrics draw two panels that zoom together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .browser_page import BrowserProblems

GRAPH = "#compare-chart .js-plotly-plot"
CHART_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data || !gd.data.length || !gd._fullLayout) return null;
  return {{
    data: gd.data.map(t => ({{name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || []),
      xaxis: t.xaxis || 'x', yaxis: t.yaxis || 'y', shape: (t.line || {{}}).shape || ''}})),
    legend: Array.from(document.querySelectorAll('{GRAPH} .legendtext')).map(e => e.textContent),
    panels: Array.from(document.querySelectorAll('{GRAPH} .cartesianlayer > g.subplot'))
      .map(g => g.getAttribute('class')),
  }};
}}"""
TOTAL, LOSS = "grad/norm/total", "train/loss"
LAST, SHORT_END = 5_999, 2_500
SPIKE_STEP, SPIKE = 4_501, 37.5
MEAN = "mean of 2 runs (1 after step 2,500)"


def climb(step: int) -> float:
    """The spiky run's grad norm away from its spike: 1, up by 1/65,536 a step (exact in
    float32)."""
    return 1 + step / 65_536


def seed(server: ServerProcess, tenant: Any) -> tuple[str, str]:
    """A run of 6,000 steps (more than a chart draws unthinned: downsampled) with one
    spike, and one that ends at step 2,500; only the first logs the loss."""
    ids = []
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        for name, last in (("spiky", LAST), ("short", SHORT_END)):
            made = api.post("/api/v1/runs", json={"name": name, "start_step": 0})
            assert made.status_code == 200, made.text
            run_id = str(made.json()["id"])
            steps = list(range(last + 1))
            if name == "spiky":
                metrics = {
                    TOTAL: [SPIKE if s == SPIKE_STEP else climb(s) for s in steps],
                    LOSS: [4.0 - s / 4096 for s in steps],
                }
            else:
                metrics = {TOTAL: [2.0] * len(steps)}
            body = {"steps": steps, "metrics": metrics}
            assert api.post(f"/api/v1/runs/{run_id}/metrics", json=body).status_code == 202
            ids.append(run_id)
    return ids[0], ids[1]


def chart(page: Page, until: str) -> dict[str, Any]:
    page.wait_for_function(
        f"() => {{ const c = ({CHART_JS})(); return c && ({until}); }}", timeout=30_000
    )
    result: dict[str, Any] = page.evaluate(f"({CHART_JS})()")
    return result


def held_at(trace: dict[str, Any], step: int) -> float:
    """What an ``hv`` line shows at ``step``: the value of its last point at or before it."""
    index = max(i for i, x in enumerate(trace["x"]) if x <= step)
    value: float = trace["y"][index]
    return value


def test_the_band_keeps_a_spike_counts_the_runs_and_two_metrics_draw_two_panels(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    problems = BrowserProblems(page)
    tenant = make_tenant(pg_server.database_url)
    spiky, short = seed(pg_server, tenant)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("table.runs")
    page.goto(f"{pg_server.url}/compare?run={spiky}&run={short}&metric={TOTAL}&group=mean")

    drawn = chart(page, f"c.legend.includes({MEAN!r})")
    traces = {t["name"]: t for t in drawn["data"]}
    raw, high, mean = traces["spiky (raw)"], traces["max"], traces[MEAN]
    # The run was downsampled (M4) and kept its spike; the band's upper edge reaches it.
    assert len(raw["x"]) < LAST and raw["y"][raw["x"].index(SPIKE_STEP)] == SPIKE
    assert (high["shape"], held_at(high, SPIKE_STEP)) == ("hv", SPIKE)
    assert held_at(traces["min"], SPIKE_STEP) == climb(4_500)  # the bucket 4,500-4,505
    # Before step 2,500 both runs count (about 1 to 2), after it the spiky one alone: in
    # the bucket of steps 3,000-3,005 it reaches its value at 3,005.
    assert (held_at(traces["min"], 100), held_at(high, 100)) == (climb(96), 2.0)
    assert held_at(high, 3_004) == climb(3_005)
    assert drawn["legend"] == [MEAN]
    assert drawn["panels"] == ["subplot xy"]
    assert mean["x"][-1] == LAST
    page.screenshot(path=str(artifacts / "compare-band.png"), full_page=True)

    # Two metrics: two panels on one step axis, the loss's beneath.
    page.goto(f"{pg_server.url}/compare?run={spiky}&run={short}&metric={TOTAL}&metric={LOSS}")
    panels = chart(page, "c.panels.length === 2")
    assert panels["panels"] == ["subplot xy", "subplot x2y3"]
    assert [(t["name"], t["xaxis"], t["yaxis"]) for t in panels["data"]] == [
        ("spiky", "x", "y"),
        ("short", "x", "y"),
        ("spiky", "x2", "y3"),
        ("short", "x2", "y3"),
    ]
    assert panels["legend"] == ["spiky", "short"]
    assert page.inner_text("#compare-range").splitlines()[1].startswith(f"{LOSS}: spiky")
    # A zoom in the lower panel zooms both and lands in the URL; both metrics stay there.
    page.evaluate(
        f"Plotly.relayout(document.querySelector('{GRAPH}'), "
        "{'xaxis2.range[0]': 4000, 'xaxis2.range[1]': 5000})"
    )
    page.wait_for_function("() => location.search.includes('start=4000')")
    zoomed = chart(page, "c.data[0].x[0] >= 4000")
    assert [(t["x"][0], t["x"][-1]) for t in zoomed["data"][::2]] == [(4000, 5000)] * 2
    query = page.evaluate("() => new URLSearchParams(location.search).getAll('metric')")
    assert query == [TOTAL, LOSS]
    page.screenshot(path=str(artifacts / "compare-panels.png"), full_page=True)

    # The loss picked as the first metric leaves the further metrics' picker: one panel.
    assert LOSS in page.inner_text("#compare-more")
    page.locator("#compare-metric").click()
    page.get_by_role("option", name=LOSS, exact=True).click()
    page.wait_for_function(
        "() => JSON.stringify(new URLSearchParams(location.search).getAll('metric'))"
        f" === JSON.stringify([{LOSS!r}])"
    )
    alone = chart(page, "c.panels.length === 1")
    assert [t["name"] for t in alone["data"]] == ["spiky", "short"]
    assert "pick metrics to draw below" in page.inner_text("#compare-more")
    problems.assert_none()
