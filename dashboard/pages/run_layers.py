"""The run page's per-layer section: latest norms by depth, with how steep the U is."""

from __future__ import annotations

import math
from typing import Any

import anyio
import dash
from dash import Input, Output, State, dcc, html
from normwatch.server.schemas import MetricOut

from ..data import DashboardData, RunNotFound
from ..figures import depth_figure, empty_figure
from ..layers import depth_profile, families_with_layers
from ..session import viewer


def section(names: list[str]) -> html.Div:
    families = families_with_layers(names)
    return html.Div(
        [
            html.H3("Layers"),
            html.Div(
                [
                    dcc.Dropdown(
                        id="depth-family",
                        options=[{"label": f, "value": f} for f in families],
                        value=families[0] if families else None,
                        clearable=False,
                        className="picker",
                    ),
                    dcc.Checklist(
                        id="depth-log",
                        options=[{"label": " log scale", "value": "log"}],
                        value=[],
                        className="toggle",
                    ),
                    html.Span(id="depth-info", className="muted"),
                ],
                className="controls",
            ),
            dcc.Graph(id="depth", config={"displaylogo": False}),
        ]
    )


NO_LAYERS = (
    "No per-layer metrics yet: log names like grad/norm/layers.{i} "
    "(normwatch.client.jax.stability_metrics does)."
)


def _value(metric: MetricOut) -> float:
    v = metric.last_value
    if v is None:
        return math.nan
    return float(v)  # "NaN"/"Infinity" strings parse as the floats they spell


def depth_view(metrics: list[MetricOut], family: str, log_y: bool) -> tuple[Any, str]:
    profile = depth_profile(((m.name, _value(m)) for m in metrics), family)
    names = {f"{family}/{label}" for label in profile.labels}
    steps = [m.last_step for m in metrics if m.name in names and m.last_step is not None]
    fig = depth_figure(
        profile.labels,
        profile.values,
        family=family,
        step=max(steps) if steps else None,
        log_y=log_y,
    )
    ratio = profile.end_to_middle
    info = "" if ratio is None else f"ends / middle: {ratio:.1f}×"
    return fig, info


def register(app: dash.Dash, data: DashboardData) -> None:
    @app.callback(
        Output("depth", "figure"),
        Output("depth-info", "children"),
        Output("depth-family", "options"),
        Output("depth-family", "value"),
        Input("depth-family", "value"),
        Input("depth-log", "value"),
        Input("tick", "n_intervals"),
        State("view", "data"),
    )
    async def draw_depth(
        family: str | None, log: list[str] | None, _tick: int | None, view: dict[str, Any]
    ) -> Any:
        who = viewer()
        try:
            metrics: list[MetricOut] = await anyio.to_thread.run_sync(
                lambda: data.metrics(who, view["run"])
            )
        except RunNotFound:  # the view names no run of the viewer's project
            return empty_figure(NO_LAYERS), "", [], None
        families = families_with_layers(m.name for m in metrics)
        options = [{"label": f, "value": f} for f in families]
        if not families:
            return empty_figure(NO_LAYERS), "", options, None
        family = family if family in families else families[0]
        fig, info = depth_view(metrics, family, bool(log))
        return fig, info, options, family
