"""The run page's per-layer section: latest norms by depth, with how steep the U is."""

from __future__ import annotations

import math
from typing import Any, Protocol

import dash
from dash import Input, Output, State, dcc, html
from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut

from ..data import RunNotFound
from ..figures import Figure, depth_figure, empty_figure
from ..layers import depth_profile, families_with_layers
from ..session import viewer
from ..wiring import in_thread
from .run_view import RunView

NO_LAYERS = (
    "No per-layer metrics yet: log names like grad/norm/layers.{i} "
    "(normwatch.client.jax.stability_metrics does)."
)

DrawnDepth = tuple[Any, str, list[dict[str, str]], str | None]
"""The depth chart, its ratio text, the family picker's options and its value."""


class MetricsReader(Protocol):
    """What the section reads: the run's metrics with their last values."""

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]: ...


def section(names: list[str]) -> html.Div:
    families = families_with_layers(names)
    return html.Div(
        [
            html.H3("Layers"),
            html.Div(
                [
                    dcc.Dropdown(
                        id="depth-family",
                        options=family_options(families),
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


def family_options(families: list[str]) -> list[dict[str, str]]:
    return [{"label": f, "value": f} for f in families]


def _value(metric: MetricOut) -> float:
    v = metric.last_value
    if v is None:
        return math.nan
    return float(v)  # "NaN"/"Infinity" strings parse as the floats they spell


def depth_view(metrics: list[MetricOut], family: str, log_y: bool) -> tuple[Any, str]:
    """``family``'s latest values by depth, at the latest step among them, and the text
    'ends / middle: 8.0×' (empty with fewer than four finite layers)."""
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


def no_layers(options: list[dict[str, str]]) -> DrawnDepth:
    figure: Figure = empty_figure(NO_LAYERS)
    return figure, "", options, None


def draw_depth(
    data: MetricsReader, who: Principal, view: RunView | None, family: object, log: object
) -> DrawnDepth:
    """The depth chart of the view's run for the picked ``family`` (the first family with
    layers when it has none of that name), with the picker's options and value."""
    if view is None:
        return no_layers([])
    try:
        metrics = data.metrics(who, view.run)
    except RunNotFound:  # the view names no run of the viewer's project
        return no_layers([])
    families = families_with_layers(m.name for m in metrics)
    if not families:
        return no_layers(family_options(families))
    picked = family if isinstance(family, str) and family in families else families[0]
    fig, info = depth_view(metrics, picked, bool(log))
    return fig, info, family_options(families), picked


def register(app: dash.Dash, data: MetricsReader) -> None:
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
    async def on_draw(family: object, log: object, _tick: object, store: object) -> DrawnDepth:
        view = RunView.from_store(store)
        return await in_thread(draw_depth, data, viewer(), view, family, log)
