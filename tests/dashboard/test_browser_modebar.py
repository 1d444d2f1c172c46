"""No chart can be shared to Plotly's cloud: every mode bar lacks the "Share chart..." button."""

from __future__ import annotations

import ast
from pathlib import Path

from playwright.sync_api import Page

from normwatch.dashboard.graph_config import (
    GRAPH_CONFIG,
    PANEL_GRAPH_CONFIG,
    ZOOMABLE_GRAPH_CONFIG,
)
from normwatch.testing import ServerProcess
from tests.dashboard.seed import create_run, post_points
from tests.helpers.tenants import make_tenant

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"
SHARED_CONFIGS = {"GRAPH_CONFIG", "PANEL_GRAPH_CONFIG", "ZOOMABLE_GRAPH_CONFIG"}


def graph_configs() -> list[tuple[str, str | None]]:
    """Each ``dcc.Graph(...)`` of the dashboard's source: where, and the name its config is."""
    found = []
    for path in sorted(DASHBOARD.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if not (isinstance(func, ast.Attribute) and func.attr == "Graph"):
                continue
            config = next((k.value for k in node.keywords if k.arg == "config"), None)
            name = config.id if isinstance(config, ast.Name) else None
            found.append((f"{path.relative_to(DASHBOARD)}:{node.lineno}", name))
    return found


def test_every_graph_takes_the_shared_config() -> None:
    graphs = graph_configs()
    assert len(graphs) >= 7  # the overlay, compare, attribution, layers (3), rule preview
    assert [where for where, name in graphs if name not in SHARED_CONFIGS] == []


def test_the_shared_config_offers_no_cloud() -> None:
    for config in (GRAPH_CONFIG, PANEL_GRAPH_CONFIG, ZOOMABLE_GRAPH_CONFIG):
        assert config["showSendToCloud"] is False
        assert config["showEditInChartStudio"] is False
        assert config["plotlyServerURL"] == ""
        assert config["displaylogo"] is False
    assert ZOOMABLE_GRAPH_CONFIG == {**GRAPH_CONFIG, "scrollZoom": True}
    assert PANEL_GRAPH_CONFIG == {**GRAPH_CONFIG, "displayModeBar": "hover"}


MODEBARS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => ({
  graph: g.closest('[id]').id,
  titles: Array.from(g.querySelectorAll('.modebar-btn')).map(b => b.getAttribute('data-title')),
  sendToCloud: g._context.showSendToCloud,
  server: g._context.plotlyServerURL,
}))"""


def modebars_once_drawn(page: Page, graphs: set[str]) -> list[dict[str, object]]:
    """The mode bar of each chart on the page, once every one of ``graphs`` has one: those
    and the metric panels drawn so far (their ids are objects: ``{"key": ..., "type":
    "panel-graph"}``), no other chart."""
    page.wait_for_function(
        "ids => ids.every(id => document.querySelector(`#${id} .modebar .modebar-btn`))",
        arg=sorted(graphs),
    )
    bars: list[dict[str, object]] = page.evaluate(MODEBARS)
    drawn = {str(bar["graph"]) for bar in bars}
    assert {g for g in drawn if '"type":"panel-graph"' not in g} == graphs
    return bars


def assert_no_share_button(bars: list[dict[str, object]]) -> None:
    for bar in bars:
        titles = bar["titles"]
        assert isinstance(titles, list)
        assert "Download plot as a PNG" in titles, bar  # the mode bar itself is there
        assert not any("share" in str(t).lower() or "cloud" in str(t).lower() for t in titles)
        assert not any("chart studio" in str(t).lower() for t in titles)
        assert (bar["sendToCloud"], bar["server"]) == (False, ""), bar


def test_no_chart_on_the_run_and_compare_pages_can_be_shared(
    page: Page, pg_server: ServerProcess
) -> None:
    tenant = make_tenant(pg_server.database_url)
    runs = [create_run(pg_server, tenant, name) for name in ("modebar-a", "modebar-b")]
    steps = range(0, 600)
    for run_id in runs:
        post_points(
            pg_server,
            tenant,
            run_id,
            steps,
            {
                "grad/norm/total": [0.3 + 0.001 * s for s in steps],
                "params/norm/final_norm.weight": [78.0 + 0.1 * s for s in steps],
                **{f"grad/norm/layers.{i}": [0.1 + 0.01 * i] * len(steps) for i in range(3)},
            },
        )
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("table.runs")

    page.goto(f"{pg_server.url}/runs/{runs[0]}")
    graphs = {"overlay", "layer-heatmap", "u-index", "depth", "attribution-chart"}
    # Each chart's mode bar shows on hover; its buttons are in the page either way.
    page.hover("#overlay .nsewdrag")
    assert_no_share_button(modebars_once_drawn(page, graphs))

    page.goto(f"{pg_server.url}/compare?run={runs[0]}&run={runs[1]}&metric=grad/norm/total")
    page.hover("#compare-chart .nsewdrag")
    assert_no_share_button(modebars_once_drawn(page, {"compare-chart"}))
