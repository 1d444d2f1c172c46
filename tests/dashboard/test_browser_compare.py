"""Comparing runs in real headless Chromium against a real server on Postgres: ticked on the
runs list, drawn one line a run with a summary and the config keys that differ, zoomed,
and reproduced from the deep link in a fresh browser context."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .browser_page import BrowserProblems

GRAPH = "#compare-chart .js-plotly-plot"
FIGURE_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data || !gd.data.length) return null;
  return {{data: gd.data.map(t => ({{name: t.name, color: t.line && t.line.color,
                                    x: Array.from(t.x || [])}})),
          xrange: gd.layout.xaxis.range, ytitle: gd.layout.yaxis.title.text}};
}}"""
STEPS = list(range(2000))
SPIKES = {400: 8.0, 900: 6.0, 1500: 9.5}
TOTAL = "grad/norm/total"
RATIO = "ratio(train/loss, grad/norm/total)"
SUMMARY_HEADER = ["run", "max", "final", "slope / 1k steps", "spikes", "steps in spikes"]
FULL_SUMMARY = {
    "qk-off": ["qk-off", "9.5", "1", "-0.0006596", "3", "0.30 %"],
    "qk-on": ["qk-on", "0.988", "0.988", "+0.2441", "0", "0.00 %"],
}
# Zoomed on steps 1400-1700: qk-off's spike at 1500 is inside, qk-on has climbed to 1700.
# qk-off's slope: 1000 · (1500 - 1550) · 8.5 / Σ (s - 1550)² over 1400…1700 (= 2,272,550).
ZOOMED_SUMMARY = {
    "qk-off": ["qk-off", "9.5", "1", "-0.187", "3", "0.30 %"],
    "qk-on": ["qk-on", "0.915", "0.915", "+0.2441", "0", "0.00 %"],
}
QK_NORM = {"qk-off": "false", "qk-on": "true"}


def seed(server: ServerProcess, tenant: Tenant) -> tuple[str, str]:
    """Two runs that differ in one config key; the first one's grad norm spikes three times,
    the second's climbs by 1/4096 a step (exact in float32, so the numbers shown are)."""
    ids = []
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        for name, qk_norm, total in (
            ("qk-off", False, [SPIKES.get(s, 1.0) for s in STEPS]),
            ("qk-on", True, [0.5 + s / 4096 for s in STEPS]),
        ):
            config = {"lr": 3e-4, "model": {"qk_norm": qk_norm}}
            made = api.post("/api/v1/runs", json={"name": name, "start_step": 0, "config": config})
            assert made.status_code == 200, made.text
            run_id = str(made.json()["id"])
            body = {"steps": STEPS, "metrics": {TOTAL: total, "train/loss": [4.0] * len(STEPS)}}
            assert api.post(f"/api/v1/runs/{run_id}/metrics", json=body).status_code == 202
            ids.append(run_id)
    return ids[0], ids[1]


def figure(page: Page, ready: str = "true") -> dict[str, Any]:
    """The drawn chart, once it has two lines and ``ready`` (JS of ``f``) holds."""
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); return f && f.data.length === 2 && ({ready}); }}"
    )
    result: dict[str, Any] = page.evaluate(f"({FIGURE_JS})()")
    return result


def table_rows(page: Page, table: str) -> list[list[str]]:
    found: list[list[str]] = page.evaluate(
        "s => Array.from(document.querySelectorAll(s + ' tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.innerText.trim()))",
        table,
    )
    return found


def summary_is(page: Page, expected: list[list[str]]) -> None:
    """Wait for the summary table to read ``expected`` (it is drawn after the chart)."""
    try:
        page.wait_for_function(
            "([s, want]) => JSON.stringify(Array.from(document.querySelectorAll(s + ' tbody tr'))"
            ".map(r => Array.from(r.cells).map(c => c.innerText.trim()))) === JSON.stringify(want)",
            arg=["#compare-summary", expected],
        )
    except PlaywrightTimeout:
        assert table_rows(page, "#compare-summary") == expected


def check_comparison(
    page: Page, runs: dict[str, str], summary: dict[str, list[str]]
) -> dict[str, Any]:
    """The chart, the summary and the config diff of ``runs`` (name: id, in the list's
    order, which the page keeps) on the total grad norm."""
    fig = figure(page)
    assert [t["name"] for t in fig["data"]] == list(runs)
    assert len({t["color"] for t in fig["data"]}) == 2
    assert fig["ytitle"] == TOTAL
    summary_is(page, [summary[name] for name in runs])
    header = page.evaluate(
        "Array.from(document.querySelectorAll('#compare-summary th')).map(h => h.innerText)"
    )
    assert [h.strip().lower() for h in header] == SUMMARY_HEADER
    diff = table_rows(page, "#compare-diff")
    assert diff == [["model.qk_norm", *(QK_NORM[name] for name in runs)]]
    query = parse_qs(urlsplit(page.url).query)
    assert (query["run"], query["metric"]) == (list(runs.values()), [TOTAL])
    return fig


def test_compare_two_runs_from_the_runs_list_and_by_deep_link(
    page: Page, browser: Browser, pg_server: ServerProcess, artifacts: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    off, on = seed(pg_server, tenant)
    ids = {"qk-off": off, "qk-on": on}
    problems = BrowserProblems(page)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("table.runs")
    listed = page.locator("tr.run-row a.run-link").all_inner_texts()
    runs = {name: ids[name] for name in listed}  # the list's order: newest first
    assert list(runs) == ["qk-on", "qk-off"]
    assert page.inner_text("#compare-action") == "Tick two or more runs to compare them."

    # Tick both runs; the ticks survive the list's refresh every 2 s.
    for name in ("qk-off", "qk-on"):
        page.locator("tr.run-row", has_text=name).locator("input[type=checkbox]").check()
    page.wait_for_selector("#compare-link")
    page.wait_for_timeout(2500)
    boxes = page.locator("tr.run-row input[type=checkbox]")
    assert [boxes.nth(i).is_checked() for i in range(boxes.count())] == [True, True]
    assert page.inner_text("#compare-link") == "compare 2 runs"
    page.screenshot(path=str(artifacts / "compare-pick.png"))
    page.click("#compare-link")
    page.wait_for_url("**/compare?**")
    check_comparison(page, runs, FULL_SUMMARY)
    page.wait_for_selector("#compare-summary tbody tr")
    page.screenshot(path=str(artifacts / "compare.png"), full_page=True)

    # A derived expression, typed: drawn for both runs, and into the URL.
    page.fill("#compare-expression", RATIO)
    page.press("#compare-expression", "Enter")
    fig = figure(page, f"f.ytitle === {RATIO!r}")
    assert [len(t["x"]) for t in fig["data"]] == [2000, 2000]
    assert parse_qs(urlsplit(page.url).query)["metric"] == [RATIO]

    # Back to the total grad norm, then zoom: the range lands in the URL, the lines are
    # read again at full detail, and the summary follows the range.
    page.locator("#compare-metric").click()
    page.get_by_role("option", name=TOTAL, exact=True).click()
    figure(page, f"f.ytitle === {TOTAL!r}")
    page.evaluate(
        f"Plotly.relayout(document.querySelector('{GRAPH}'), "
        "{'xaxis.range[0]': 1400, 'xaxis.range[1]': 1700})"
    )
    page.wait_for_function("() => location.search.includes('start=1400')")
    fig = figure(page, "f.data[0].x.length === 301")
    assert [(t["x"][0], t["x"][-1]) for t in fig["data"]] == [(1400, 1700), (1400, 1700)]
    check_comparison(page, runs, ZOOMED_SUMMARY)
    deep = page.url
    query = parse_qs(urlsplit(deep).query)
    assert (query["start"], query["end"]) == (["1400"], ["1700"])
    problems.assert_none()

    # The deep link, in a browser context of its own, shows the same comparison.
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    fresh = context.new_page()
    fresh.set_default_timeout(15_000)
    fresh_problems = BrowserProblems(fresh)
    fresh.goto(f"{pg_server.url}/login?token={tenant.read}")
    fresh.wait_for_selector("table.runs")
    fresh.goto(deep)
    fig = check_comparison(fresh, runs, ZOOMED_SUMMARY)
    assert [round(v) for v in fig["xrange"]] == [1400, 1700]
    assert [(t["x"][0], t["x"][-1]) for t in fig["data"]] == [(1400, 1700), (1400, 1700)]
    assert fresh.url == deep
    fresh_problems.assert_none()

    # Another project's run in the link: a message, not a chart.
    other = make_tenant(pg_server.database_url)
    their_off, _ = seed(pg_server, other)
    fresh.goto(f"{pg_server.url}/compare?run={off}&run={their_off}")
    fresh.wait_for_selector("main h2")
    assert "Cannot compare" in fresh.inner_text("main")
    assert f"No run {their_off} in your project." in fresh.inner_text("main")
    fresh_problems.assert_none()
    context.close()
