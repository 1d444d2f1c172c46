"""The run page's layers and spikes sections in real headless Chromium against a real server:
a 48-layer run whose U steepens, and update-norm spikes 8 steps before loss spikes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
from playwright.sync_api import ConsoleMessage, Error, Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .browser_page import FIGURE_JS, figure, login
from .seed import create_run, post_points

STEPS = 2000
LEADS = (400, 1000, 1600)
"""Update-norm spikes, each followed 8 steps later by a loss spike (and a grad-norm one)."""
LONE = 1800
"""An update-norm spike that nothing follows."""
LAYERS = ["embed", *(f"layers.{i}" for i in range(48)), "lm_head"]


def layer_run() -> dict[str, list[float]]:
    """Per-layer grad norms in a U that steepens (the ends grow from 3x to about 10x the
    middle), bumped in the lower layers during each loss spike; the total is their
    root-sum-square; a falling loss and a flat update norm with seeded spikes."""
    rng = np.random.default_rng(3)
    steps = np.arange(STEPS)
    steepness = 2.0 + 8.0 * steps / STEPS
    depth = np.abs(np.arange(len(LAYERS)) - 24.5) / 24.5
    grid = 0.05 * (1 + np.outer(depth**6, steepness))
    grid *= 1 + 0.01 * rng.standard_normal(grid.shape)
    update = 1.0 + 0.01 * rng.standard_normal(STEPS)
    mu = 0.5 * (1.0 + 0.01 * rng.standard_normal(STEPS))
    nu = 0.02 * (1.0 + 0.01 * rng.standard_normal(STEPS))
    loss = 3.0 - steps / STEPS + 0.005 * rng.standard_normal(STEPS)
    lower_more = 2.0 - np.arange(len(LAYERS)) / (len(LAYERS) - 1)
    for at in LEADS:
        update[at] *= 2.0
        mu[at : at + 12] *= 2.0  # momentum: the first moment doubles, the second stays flat
        loss[at + 8 : at + 12] += 0.5
        grid[:, at + 8 : at + 12] *= lower_more[:, None]
    update[LONE] *= 2.0
    metrics = {f"grad/norm/{name}": row.tolist() for name, row in zip(LAYERS, grid, strict=True)}
    metrics["grad/norm/total"] = np.sqrt((grid**2).sum(axis=0)).tolist()
    metrics["params/norm/final_norm.weight"] = (78.4 + 0.13 * steps).tolist()
    metrics["updates/norm/total"] = update.tolist()
    metrics["train/loss"] = loss.tolist()
    metrics["optim/mu/norm/total"] = mu.tolist()
    metrics["optim/nu/norm/total"] = nu.tolist()
    return metrics


def seed(server: ServerProcess, tenant: Tenant) -> str:
    run_id = create_run(server, tenant, "layers-run")
    metrics = layer_run()
    for lo in range(0, STEPS, 500):
        chunk = {name: values[lo : lo + 500] for name, values in metrics.items()}
        post_points(server, tenant, run_id, range(lo, lo + 500), chunk)
    return run_id


def graph_js(graph: str, body: str) -> str:
    """A function of the Plotly figure in ``#graph`` (null until it has data)."""
    return (
        f"() => {{ const gd = document.querySelector('#{graph} .js-plotly-plot');"
        f" if (!gd || !gd.data || !gd.data.length) return null; {body} }}"
    )


HEATMAP_JS = graph_js(
    "layer-heatmap",
    "const t = gd.data[0]; return {type: t.type, x: Array.from(t.x), y: Array.from(t.y),"
    " rows: gd._fullData[0].z.length, title: gd.layout.title.text,"
    " pinned: (gd.layout.shapes || []).map(s => s.x0)};",
)
U_INDEX_JS = graph_js(
    "u-index", "return {x: Array.from(gd.data[0].x), y: Array.from(gd.data[0].y)};"
)
DEPTH_TITLE_JS = graph_js("depth", "return gd.layout.title && gd.layout.title.text;")


def evaluate(page: Page, js: str) -> Any:
    page.wait_for_function(f"() => ({js})() !== null")
    return page.evaluate(f"({js})()")


def wait_depth_title(page: Page, text: str) -> None:
    page.wait_for_function(
        f"() => {{ const t = ({DEPTH_TITLE_JS})(); return t !== null && t.includes({text!r}); }}"
    )


def click_heatmap_at(page: Page, step: int) -> str:
    """A real mouse click on the heatmap's column nearest ``step``, halfway up; the hover
    label shown there."""
    page.locator("#layer-heatmap").scroll_into_view_if_needed()
    point = page.evaluate(
        "step => { const gd = document.querySelector('#layer-heatmap .js-plotly-plot');"
        " const box = gd.getBoundingClientRect(); const size = gd._fullLayout._size;"
        " return {x: box.left + size.l + gd._fullLayout.xaxis.l2p(step),"
        " y: box.top + size.t + size.h / 2}; }",
        step,
    )
    # Plotly clicks what it last hovered, and hover is throttled: hover there first.
    page.mouse.move(point["x"], point["y"])
    page.wait_for_selector("#layer-heatmap .hoverlayer .hovertext")
    label = page.locator("#layer-heatmap .hoverlayer .hovertext text.nums").text_content() or ""
    page.wait_for_timeout(100)
    page.mouse.click(point["x"], point["y"])
    return label


def spike_rows(page: Page) -> list[list[str]]:
    found: list[list[str]] = page.evaluate(
        "Array.from(document.querySelectorAll('#spike-table tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    return found


def test_layer_heatmap_u_index_profile_and_spikes(
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
    figure(page)

    # The heatmap: 50 rows in depth order, embedding first (drawn at the bottom).
    heatmap = evaluate(page, HEATMAP_JS)
    assert heatmap["type"] == "heatmap" and heatmap["rows"] == 50
    assert heatmap["y"] == LAYERS
    assert heatmap["x"][0] == 0 and heatmap["x"][-1] <= STEPS - 1
    assert "grad/norm by layer and step" in heatmap["title"]
    # The U steepens: the U-index climbs from about 3 to about 10 over the run.
    u_index = evaluate(page, U_INDEX_JS)
    values = [v for v in u_index["y"] if v is not None]
    assert len(values) > 100
    quarter = len(values) // 4
    assert 2.5 < np.mean(values[:quarter]) < 4.5 < 7.0 < np.mean(values[-quarter:])
    # The profile follows the latest step until a cell is clicked.
    wait_depth_title(page, f"by depth at step {STEPS - 1:,}")
    page.wait_for_selector("#spike-table tbody tr")  # the section above is drawn: no reflow
    label = click_heatmap_at(page, 1500)
    # The cell's real value (the colour is its log), from the float32 cells sent.
    # (its lines run together in the label's text: "layers.24 · step 15000.04995 (...)")
    assert re.fullmatch(r"layers\.\d+ · step 1\d{3}0\.\d{1,6} \(largest in its steps\)", label)
    page.wait_for_function("() => new URLSearchParams(location.search).has('at')")
    pinned = int(parse_qs(urlsplit(page.url).query)["at"][0])
    assert pinned in heatmap["x"] and abs(pinned - 1500) <= 4
    wait_depth_title(page, f"by depth at step {pinned:,}")
    page.wait_for_function(f"() => ({HEATMAP_JS})().pinned.includes({pinned})")
    assert page.inner_text("#pin-info") == f"profile pinned to step {pinned:,}"
    # The whole run: the U steepening, the spikes as columns, the profile at the pinned step.
    page.mouse.move(0, 0)
    page.locator(".layers-section").screenshot(path=str(artifacts / "layers.png"))

    # The spikes of the charted metrics, the loss and the update norm, in step order.
    rows = spike_rows(page)
    listed = sorted((row[0], int(row[1].replace(",", ""))) for row in rows)
    expected = [("grad/norm/total", at + 8) for at in LEADS]
    expected += [("train/loss", at + 8) for at in LEADS]
    expected += [("updates/norm/total", at) for at in (*LEADS, LONE)]
    assert listed == sorted(expected)
    assert all(row[4].endswith("×") for row in rows)
    # Adam's moments over each spike: the first doubled at the leaders, the second flat.
    header = page.locator("#spike-table thead th").all_inner_texts()
    assert header[-2:] == ["1st moment ×", "2nd moment ×"]
    for row in rows:
        first, second = float(row[-2].lstrip("×")), float(row[-1].lstrip("×"))
        assert abs(second - 1.0) < 0.05, row
        if row[0] == "updates/norm/total" and row[1] != f"{LONE:,}":
            assert abs(first - 2.0) < 0.1, row
        if row[1] == f"{LONE:,}":
            assert abs(first - 1.0) < 0.05, row
    lead = page.locator("#lead-lag tr", has_text="updates/norm/total → train/loss")
    assert [c.strip() for c in lead.locator("td").all_inner_texts()] == [
        "updates/norm/total → train/loss",
        "8",
        "3",
        "1",
    ]
    fractions = page.inner_text("#spike-fractions")
    assert "train/loss" in fractions and "params/norm/final_norm.weight" in fractions

    # One click on a loss spike: the chart zooms around it and the profile pins to its peak.
    [row] = [r for r in rows if r[0] == "train/loss" and r[1] == "1,008"]
    peak = int(row[2].replace(",", ""))
    end = int(row[5].replace(",", ""))
    page.locator("#spike-table tbody tr", has_text="train/loss").nth(1).click()
    lo, hi = max(0, 1008 - max(50, 2 * (end - 1008))), end + max(50, 2 * (end - 1008))
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); const r = f && f.layout.xrange;"
        f" return r && Math.round(r[0]) === {lo} && Math.round(r[1]) === {hi}; }}"
    )
    query = parse_qs(urlsplit(page.url).query)
    assert (query["start"], query["end"], query["at"]) == ([str(lo)], [str(hi)], [str(peak)])
    wait_depth_title(page, f"by depth at step {peak:,}")
    # The heatmap follows the zoom: every logged step of the window, one column each.
    page.wait_for_function(
        f"() => {{ const h = ({HEATMAP_JS})(); return h && h.x[0] === {lo}"
        f" && h.x[h.x.length - 1] === {hi}; }}"
    )
    # The lower layers' bump during the spike shows in the pinned profile.
    bars = page.evaluate(graph_js("depth", "return Array.from(gd.data[0].y);"))
    assert bars[1] > 1.5 * bars[24]  # layers.0 against a middle layer
    # "× baseline": each layer over its own median before the spike started, so that the
    # lower layers' larger rise reads directly (2x at the embedding down to 1x at the head).
    page.locator("#depth-log label", has_text="× baseline").click()
    wait_depth_title(page, "× each layer's median before step 1,008")
    ratios = page.evaluate(graph_js("depth", "return Array.from(gd.data[0].y);"))
    rise = 2.0 - np.arange(len(LAYERS)) / (len(LAYERS) - 1)
    assert np.allclose(ratios, rise, rtol=0.05), ratios
    page.locator("#depth-log label", has_text="× baseline").click()
    page.wait_for_function(f"() => !(({DEPTH_TITLE_JS})() || 'median').includes('median')")

    page.evaluate("window.scrollTo(0, 0)")
    top = page.locator("#overlay").bounding_box()
    bottom = page.locator(".spikes-section").bounding_box()
    assert top is not None and bottom is not None
    clip = {
        "x": top["x"],
        "y": top["y"],
        "width": top["width"],
        "height": bottom["y"] + bottom["height"] - top["y"],
    }
    page.screenshot(path=str(artifacts / "spikes.png"), full_page=True, clip=clip)
    assert errors == []
