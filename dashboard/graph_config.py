"""The plotly.js ``config`` of every chart on the dashboard (``dcc.Graph(config=...)``).

plotly.js 4 puts a "Share chart..." button in every chart's mode bar by default
(``showSendToCloud``), which uploads the chart's data, names and values included, to
``plotlyServerURL`` (Plotly's cloud); older versions had "Edit in Chart Studio" for the same.
Runs here are private: every chart is drawn without either button, with no server to send to,
and without the Plotly logo.
"""

from __future__ import annotations

from typing import Final

from dash import dcc

__all__ = ["GRAPH_CONFIG", "PANEL_GRAPH_CONFIG", "ZOOMABLE_GRAPH_CONFIG"]

GRAPH_CONFIG: Final[dcc.Graph.Config] = {
    "displaylogo": False,
    "showSendToCloud": False,
    "showEditInChartStudio": False,
    "plotlyServerURL": "",
    # The camera's PNG at twice the pixels, for slides and papers, named after the tool.
    "toImageButtonOptions": {"format": "png", "scale": 2, "filename": "normwatch-chart"},
}
"""The config of a chart."""

ZOOMABLE_GRAPH_CONFIG: Final[dcc.Graph.Config] = {**GRAPH_CONFIG, "scrollZoom": True}
"""The config of a chart that the mouse wheel zooms (the run page's overlay, the comparison)."""

PANEL_GRAPH_CONFIG: Final[dcc.Graph.Config] = {**GRAPH_CONFIG, "displayModeBar": "hover"}
"""The config of a run page's metric panel: its mode bar only while the mouse is over it, so
that a grid of small charts is not a grid of toolbars."""
