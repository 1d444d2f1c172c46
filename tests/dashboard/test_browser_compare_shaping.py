"""The compare chart's daily controls in real headless Chromium against a real server on
Postgres: log scale, ignore outliers, the mean of three seeds with its min–max band, and
smoothing with the raw lines faint behind, each set by hand and carried by the URL, which
reproduces the chart on a reload, with no console errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .browser_page import BrowserProblems

GRAPH = "#compare-chart .js-plotly-plot"
CHART_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data || !gd.data.length || !gd._fullLayout) return null;
  const full = gd._fullLayout;
  return {{
    data: gd.data.map(t => ({{name: t.name, color: t.line && t.line.color,
      opacity: t.opacity ?? 1, showlegend: t.showlegend ?? true, hoverinfo: t.hoverinfo || '',
      fill: t.fill || '', x: Array.from(t.x || []), y: Array.from(t.y || []),
      counts: Array.from(t.customdata || []).map(c => c[0])}})),
    xrange: full.xaxis.range, ytype: full.yaxis.type, yrange: full.yaxis.range,
    legend: (full.legend.title || {{}}).text || '',
  }};
}}"""
STEPS = list(range(200))
SPIKE_STEP, SPIKE = 150, 300.0
MEAN = "mean of 3 runs (2 before step 50; 2 after step 198)"
# The runs' colours: none is the run page's axis red or blue.
GREEN, ORANGE, PURPLE = "#2ca02c", "#ff7f0e", "#9467bd"


def seed_values(seed: int, step: int) -> float:
    """Seed ``seed``'s value at ``step``: a line ``seed + step/128`` (exact in float32,
    as the values are stored), seed 3 with a spike of 300 at step 150."""
    return SPIKE if (seed, step) == (3, SPIKE_STEP) else seed + step / 128


SEEDS = {
    # Seed 1 logs every step, seed 2 every other one up to 198, seed 3 from step 50 on.
    "seed-1": (1, STEPS),
    "seed-2": (2, STEPS[:-1:2]),
    "seed-3": (3, STEPS[50:]),
}


def hand_mean(step: int) -> tuple[float, int]:
    """The mean of the seeds that span ``step`` (each is a straight line between its points,
    so seed 2 at an odd step is on its line), and how many they are."""
    at = [
        seed_values(seed, step) for seed, steps in SEEDS.values() if steps[0] <= step <= steps[-1]
    ]
    return sum(at) / len(at), len(at)


def seed(server: ServerProcess, tenant: Tenant) -> list[str]:
    ids = []
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        for name, (number, steps) in SEEDS.items():
            made = api.post("/api/v1/runs", json={"name": name, "start_step": 0})
            assert made.status_code == 200, made.text
            run_id = str(made.json()["id"])
            body = {
                "steps": steps,
                "metrics": {"grad/norm/total": [seed_values(number, s) for s in steps]},
            }
            assert api.post(f"/api/v1/runs/{run_id}/metrics", json=body).status_code == 202
            ids.append(run_id)
    return ids


def chart(page: Page, until: str = "true") -> dict[str, Any]:
    page.wait_for_function(f"() => {{ const c = ({CHART_JS})(); return c && ({until}); }}")
    result: dict[str, Any] = page.evaluate(f"({CHART_JS})()")
    return result


def query(page: Page) -> dict[str, str]:
    found: dict[str, str] = page.evaluate(
        "() => Object.fromEntries(new URLSearchParams(location.search))"
    )
    return found


def smoothed(values: list[float], weight: float) -> list[float]:
    """TensorBoard's debiased EMA (the mean's points are one step apart)."""
    out, last = [], 0.0
    for n, v in enumerate(values, start=1):
        last = weight * last + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


def test_log_scale_outliers_mean_band_and_smoothing_carried_by_the_url(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    problems = BrowserProblems(page)
    tenant = make_tenant(pg_server.database_url)
    ids = seed(pg_server, tenant)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("table.runs")
    page.goto(f"{pg_server.url}/compare?" + "&".join(f"run={i}" for i in ids))

    # A line a run, in colours the legend says are not the run page's axes, the x axis on
    # the data's own ends.
    plain = chart(page, "c.data.length === 3")
    assert [(t["name"], t["color"]) for t in plain["data"]] == [
        ("seed-1", GREEN),
        ("seed-2", ORANGE),
        ("seed-3", PURPLE),
    ]
    assert "red and blue stay the run page’s axes" in plain["legend"]
    assert plain["xrange"] == [0, 199]
    assert plain["ytype"] == "linear"

    # Log scale.
    page.click("#compare-options input[value='log']")
    assert chart(page, "c.ytype === 'log'")["ytype"] == "log"
    page.wait_for_function("() => new URLSearchParams(location.search).get('log') === '1'")

    # Ignore outliers: the axis (log10) fits the lines, and seed 3's spike of 300 runs off.
    page.click("#compare-options input[value='robust']")
    robust = chart(page, "c.yrange[1] < Math.log10(10)")
    assert robust["yrange"][0] < 0 < math.log10(5) < robust["yrange"][1] < 1
    assert query(page)["robust"] == "1"

    # The mean of the three seeds with a min–max band, the seeds faint behind in their colours.
    page.click("#compare-options input[value='mean']")
    grouped = chart(page, f"c.data.some(t => t.name === {MEAN!r})")
    names = [t["name"] for t in grouped["data"]]
    assert names == ["seed-1 (raw)", "seed-2 (raw)", "seed-3 (raw)", "min", "max", MEAN]
    faint = grouped["data"][:3]
    assert [(t["color"], t["opacity"], t["showlegend"], t["hoverinfo"]) for t in faint] == [
        (color, 0.25, False, "skip") for color in (GREEN, ORANGE, PURPLE)
    ]
    assert grouped["data"][4]["fill"] == "tonexty"
    mean = grouped["data"][5]
    # Buckets of one step over 0-199, the last held to step 199.
    assert mean["x"] == [*STEPS, 199]
    want = [hand_mean(s) for s in STEPS]
    assert mean["y"][:-1] == [m for m, _ in want]
    assert mean["counts"][:-1] == [n for _, n in want]
    assert (mean["y"][SPIKE_STEP], mean["counts"][SPIKE_STEP]) == (
        (1 + 2 + SPIKE + 2 * SPIKE_STEP / 128) / 3,
        3,
    )
    assert grouped["xrange"] == [0, 199]
    assert query(page)["group"] == "mean"

    # Smoothing, typed into the slider's own field: the mean smoothed, the seeds stay raw.
    page.fill("#compare-smoothing input", "0.9")
    page.press("#compare-smoothing input", "Tab")
    page.wait_for_function("() => new URLSearchParams(location.search).get('smooth') === '0.9'")
    smooth = chart(page, f"c.data.length === 6 && c.data[5].y[{SPIKE_STEP}] < 50")
    reference = smoothed([m for m, _ in want], 0.9)
    assert all(
        math.isclose(got, ref, rel_tol=1e-9)
        for got, ref in zip(smooth["data"][5]["y"][:-1], reference, strict=True)
    )
    # The band is not smoothed: seed 3's spike stays inside it.
    assert smooth["data"][4]["y"][SPIKE_STEP] == SPIKE
    assert smooth["data"][0]["y"] == grouped["data"][0]["y"]
    assert smooth["ytype"] == "log"
    page.screenshot(path=str(artifacts / "compare-shaping.png"), full_page=True)

    # The link reproduces the view: controls set, the same chart drawn.
    link = page.url
    assert {k: v for k, v in query(page).items() if k != "run"} == {
        "metric": "grad/norm/total",
        "log": "1",
        "smooth": "0.9",
        "robust": "1",
        "group": "mean",
    }
    problems.assert_none()
    page.goto(link)
    again = chart(page, f"c.data.length === 6 && c.data[5].y[{SPIKE_STEP}] < 50")
    for key in ("ytype", "yrange", "xrange", "legend"):
        assert again[key] == smooth[key], key
    assert [t["name"] for t in again["data"]] == names
    assert again["data"][5]["y"] == smooth["data"][5]["y"]
    ticked = page.eval_on_selector_all(
        "#compare-options input:checked", "boxes => boxes.map(b => b.value)"
    )
    assert ticked == ["log", "robust", "mean"]
    assert page.input_value("#compare-smoothing input") == "0.9"
    assert page.url == link

    # A line a run again, each smoothed with its raw points faint behind in its colour.
    page.click("#compare-options input[value='mean']")
    lines = chart(page, "c.data.length === 6 && !c.data.some(t => t.name.startsWith('mean'))")
    assert [(t["name"], t["color"], t["opacity"]) for t in lines["data"]] == [
        ("seed-1 (raw)", GREEN, 0.25),
        ("seed-1", GREEN, 1),
        ("seed-2 (raw)", ORANGE, 0.25),
        ("seed-2", ORANGE, 1),
        ("seed-3 (raw)", PURPLE, 0.25),
        ("seed-3", PURPLE, 1),
    ]
    assert lines["data"][4]["y"][SPIKE_STEP - 50] == SPIKE
    assert lines["data"][5]["y"][SPIKE_STEP - 50] < 50
    page.wait_for_function("() => !new URLSearchParams(location.search).has('group')")
    problems.assert_none()
