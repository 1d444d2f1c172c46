"""The run page's chart aids and its transitions, attribution and config sections in real
headless Chromium against a real server: a parameter norm whose slope grows 2.5x at an
event, a rule with a threshold on the total grad norm, and per-layer grad norms with their
total (which, over a hundred steps, is a total over other parameters)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
from playwright.sync_api import ConsoleMessage, Error, Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .browser_page import FIGURE_JS, login
from .seed import create_rule, create_run, post_event, post_points, threshold_rule

STEPS = 4000
EVENT = 2000
THRESHOLD = 3.0
PARAM = "params/norm/final_norm.weight"
GRAD = "grad/norm/total"
PARTS = {"embed": 0.3, "layers.0": 0.2, "layers.1": 0.2, "layers.2": 0.2, "layers.3": 0.2}
PARTS["lm_head"] = float(np.sqrt(1.0 - sum(v * v for v in PARTS.values())))
"""Each part's grad norm at step 0: their root-sum-square (the total) is 1."""
OTHER_TOTAL = range(3000, 3100)
"""Steps where the logged total is 10 % above the parts' root-sum-square."""
RULE = "grad norm 3+"
CONFIG = {"model": {"layers": 4, "qk_norm": False}, "lr": 3e-4}
EXPRESSION = "rss(grad/norm/layers.*)"


def aids_run() -> dict[str, list[float]]:
    """The parameter norm grows 0.02 per step, 0.05 after `EVENT` (2.5x); every grad norm
    doubles linearly over the run (the total from 1 to 2, heading for the rule's 3)."""
    rng = np.random.default_rng(7)
    steps = np.arange(STEPS)
    param = 78.4 + 0.02 * steps + 0.03 * np.clip(steps - EVENT, 0, None)
    param += 0.05 * rng.standard_normal(STEPS)
    growth = 1.0 + steps / STEPS
    metrics = {f"grad/norm/{part}": (v * growth).tolist() for part, v in PARTS.items()}
    total = growth.copy()
    total[OTHER_TOTAL.start : OTHER_TOTAL.stop] *= 1.1
    metrics[GRAD] = total.tolist()
    metrics[PARAM] = param.tolist()
    metrics["train/loss"] = (3.0 - steps / STEPS).tolist()
    return metrics


def seed(server: ServerProcess, tenant: Tenant) -> str:
    create_rule(server, tenant, threshold_rule(RULE, THRESHOLD))
    run_id = create_run(server, tenant, "aids-run", config=CONFIG)
    metrics = aids_run()
    for lo in range(0, STEPS, 1000):
        chunk = {name: values[lo : lo + 1000] for name, values in metrics.items()}
        post_points(server, tenant, run_id, range(lo, lo + 1000), chunk)
    post_event(server, tenant, run_id, EVENT, "raise routing capacity", "config")
    return run_id


CHART_JS = """() => {
  const gd = document.querySelector('#overlay .js-plotly-plot');
  if (!gd || !gd.data || gd.data.length < 2) return null;
  return {traces: gd.data.map(t => ({name: t.name, yaxis: t.yaxis || 'y',
                                     x: Array.from(t.x || []), y: Array.from(t.y || []),
                                     dash: t.line && t.line.dash, color: t.line && t.line.color})),
          notes: (gd.layout.annotations || []).map(a => a.text),
          xrange: gd.layout.xaxis.range};
}"""


def chart(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = page.evaluate(f"({CHART_JS})()")
    return found


def wait_chart(page: Page, condition: str) -> dict[str, Any]:
    """The chart once ``condition`` (JS over ``c``, what `CHART_JS` returns) holds."""
    page.wait_for_function(f"() => {{ const c = ({CHART_JS})(); return c && ({condition}); }}")
    return chart(page)


def traced(name: str) -> str:
    return f"c.traces.some(t => t.name === {name!r})"


def transition_rows(page: Page) -> list[list[str]]:
    found: list[list[str]] = page.evaluate(
        "Array.from(document.querySelectorAll('#transition-table tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.innerText))"
    )
    return found


LABEL_PLACE_JS = """(text) => {
  const gd = document.querySelector('#overlay .js-plotly-plot');
  const box = gd.getBoundingClientRect(), size = gd._fullLayout._size;
  const note = Array.from(gd.querySelectorAll('g.annotation'))
    .find(g => g.textContent === text);
  if (!note) return null;
  const r = note.getBoundingClientRect();
  return {left: r.left - box.left, right: r.right - box.left,
          plotRight: size.l + size.w, width: box.width};
}"""
"""Where the chart drew the annotation reading ``text``, in pixels from the chart's left."""


def test_transitions_thresholds_forecast_axes_series_attribution_and_config(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    def on_page_error(error: Error) -> None:
        errors.append(str(error))

    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    tenant = make_tenant(pg_server.database_url)
    run_id = seed(pg_server, tenant)
    login(page, pg_server, tenant.read)
    page.goto(f"{pg_server.url}/runs/{run_id}")

    # The rule's threshold: a dotted line at its value on the grad norm's (left) axis.
    threshold = f"threshold {RULE} (3.0)"
    fig = wait_chart(page, traced(threshold))
    (line,) = [t for t in fig["traces"] if t["name"] == threshold]
    assert (line["y"], line["yaxis"], line["dash"]) == ([THRESHOLD, THRESHOLD], "y", "dot")
    assert line["x"] == [0, STEPS - 1]
    # Its label is drawn right of the plot, past the right axis: on no data.
    placed = page.evaluate(LABEL_PLACE_JS, RULE)
    assert placed is not None and placed["left"] >= placed["plotRight"], placed
    assert placed["right"] <= placed["width"], placed  # and whole, not cut by the chart's edge

    # The transitions: the event, its parameter-norm slope 2.5x steeper after it.
    page.wait_for_selector("#transition-table tbody tr")
    rows = transition_rows(page)
    (event,) = [r for r in rows if r[0] == f"{EVENT:,}"]
    assert event[1:3] == ["event", "raise routing capacity"]
    metrics = event[3].split("\n")
    assert metrics == [GRAD, PARAM]
    ratio = float(event[5].split("\n")[1].lstrip("×"))
    assert abs(ratio - 2.5) < 0.1
    slopes = [float(v) for v in event[4].split("\n")[1].split(" → ")]
    assert abs(slopes[0] - 20.0) < 0.5 and abs(slopes[1] - 50.0) < 0.5

    # The forecast of the total grad norm: rising 0.25 per 1k steps from 2, so it reaches
    # the rule's 3 about 4,000 steps after the last one.
    page.click("#chart-options input[value='forecast']")
    fig = wait_chart(page, traced(f"forecast: {GRAD}"))
    (ahead,) = [t for t in fig["traces"] if t["name"] == f"forecast: {GRAD}"]
    assert ahead["x"][0] > 0.85 * STEPS and ahead["x"][1] > STEPS
    (note,) = [n for n in fig["notes"] if n.startswith("forecast of")]
    found = re.search(r"reaches 3\.0 in ~([\d,]+) steps", note)
    assert found is not None, note
    assert 3_500 <= int(found.group(1).replace(",", "")) <= 4_500
    page.wait_for_function("() => new URLSearchParams(location.search).get('forecast') === '1'")
    page.mouse.move(0, 0)
    page.locator("#overlay").screenshot(path=str(artifacts / "thresholds.png"))
    page.click("#chart-options input[value='forecast']")
    wait_chart(page, f"!{traced(f'forecast: {GRAD}')}")

    # Attribution: the groups' shares stacked, and the hundred steps where the total is
    # over other parameters flagged.
    page.wait_for_function(
        "() => { const g = document.querySelector('#attribution-chart .js-plotly-plot');"
        " return g && g.data && g.data.length >= 3; }"
    )
    shares = page.evaluate(
        "Array.from(document.querySelector('#attribution-chart .js-plotly-plot').data)"
        ".map(t => ({name: t.name, stack: t.stackgroup || null, x: Array.from(t.x)}))"
    )
    assert [t["name"] for t in shares if t["stack"]] == ["embedding", "blocks", "head"]
    (flags,) = [t for t in shares if t["name"] == "parts ≠ total"]
    assert flags["x"] and all(s in OTHER_TOTAL for s in flags["x"])
    check = page.inner_text("#attribution-info")
    assert check.startswith("parts do not add up to the total (±1 %) at ")
    assert f"first at {flags['x'][0]:,}" in check
    page.locator(".attribution-section").screenshot(path=str(artifacts / "attribution.png"))

    # The config, folded under the title.
    page.click("#run-config summary")
    config = page.inner_text("#run-config table")
    assert "model.qk_norm\tfalse" in config and "model.layers\t4" in config

    # A click on the event's row: the chart zooms around it and draws the fitted lines.
    page.locator("#transition-table tbody tr", has_text="raise routing capacity").click()
    lo, hi = EVENT - 200, EVENT + 200
    fig = wait_chart(
        page,
        f"c.xrange && Math.round(c.xrange[0]) === {lo} && Math.round(c.xrange[1]) === {hi}"
        f" && {traced(f'fit after: {PARAM}')}",
    )
    query = parse_qs(urlsplit(page.url).query)
    assert (query["start"], query["end"], query["focus"]) == ([str(lo)], [str(hi)], [str(EVENT)])
    before, after = (
        next(t for t in fig["traces"] if t["name"] == f"fit {side}: {PARAM}")
        for side in ("before", "after")
    )
    assert (before["yaxis"], before["dash"], before["color"]) == ("y2", "dash", "#1f77b4")
    # Each line is drawn over the points it was fitted on: to the last step before the
    # event, and from the event's own step on.
    assert (before["x"][1], after["x"][0]) == (EVENT - 1, EVENT)
    assert before["x"][0] >= lo and after["x"][1] <= hi
    (fit_note,) = [n for n in fig["notes"] if n.startswith(PARAM)]
    note = re.fullmatch(
        rf"{PARAM}: (19\.\d{{1,2}}|20(\.\d{{1,2}})?) → (49\.\d{{1,2}}|50(\.\d{{1,2}})?) per 1k "
        r"steps, ×2\.[456]\d{0,2}, level change (?P<level>0|[+-][0-9.e+-]+)",
        fit_note,
    )
    # The norm only bends at the event: its levels either side agree within their noise.
    assert note is not None and abs(float(note.group("level"))) < 0.2, fit_note
    page.wait_for_selector("#transition-table tr.focused")
    page.mouse.move(0, 0)
    page.evaluate("window.scrollTo(0, 0)")
    top = page.locator("#overlay").bounding_box()
    bottom = page.locator(".transitions-section").bounding_box()
    assert top is not None and bottom is not None
    clip = {
        "x": top["x"],
        "y": top["y"],
        "width": top["width"],
        "height": bottom["y"] + bottom["height"] - top["y"],
    }
    page.screenshot(path=str(artifacts / "transitions.png"), full_page=True, clip=clip)

    # One axis: the parameter norm moves onto the grad norm's axis.
    page.click("#chart-options input[value='one-axis']")
    fig = wait_chart(page, f"c.traces.every(t => t.name !== {PARAM!r} || t.yaxis === 'y')")
    axes = {t["name"]: t["yaxis"] for t in fig["traces"]}
    assert axes[GRAD] == axes[PARAM] == axes[f"fit after: {PARAM}"] == "y"
    page.wait_for_function("() => new URLSearchParams(location.search).get('axes') === 'one'")

    # A third series, typed as an expression.
    page.fill("#expression", EXPRESSION)
    page.press("#expression", "Enter")
    fig = wait_chart(page, traced(EXPRESSION))
    (third,) = [t for t in fig["traces"] if t["name"] == EXPRESSION]
    assert third["yaxis"] == "y" and third["color"] not in ("#d62728", "#1f77b4")
    assert third["x"][0] == lo and third["x"][-1] == hi
    page.wait_for_function(
        f"() => new URLSearchParams(location.search).getAll('series').includes({EXPRESSION!r})"
    )
    # A malformed one is refused with its reason, and nothing is drawn.
    page.fill("#expression", "share(grad/norm/total)")
    page.press("#expression", "Enter")
    page.wait_for_selector("#expression-info .error")
    assert "share takes 2 arguments" in page.inner_text("#expression-info")

    assert page.evaluate(f"({FIGURE_JS})()") is not None
    assert errors == []
