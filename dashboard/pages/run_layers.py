"""The run page's layers section: a layer × step heatmap that follows the chart's zoom, the
U-index over time under it, and the depth profile at a pinned step (drawn by
:mod:`.run_layers_draw`).

The heatmap reads one family (``grad/norm``...) through the server's layer grid, about
`HEATMAP_COLUMNS` columns of bucket maxima whatever the run's length, and only when the
view, the family or (for a view of the latest steps) every `LAYERS_EVERY`-th tick asks.
Clicking a heatmap cell, a point of the U-index or of the main chart pins the depth profile
to that step (the page's ``layers-pin`` store, and ``?at=`` in the URL); "follow latest"
unpins it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from ..graph_config import GRAPH_CONFIG
from ..layers import (
    families_with_layers,
    pin_shapes,
    small_empty,
    u_index_shapes,
)
from ..session import viewer
from ..wiring import TriggerId, in_thread, or_prevent, triggered_id
from .run_layers_draw import (
    DrawnGrid,
    LayerReads,
    draw_depth,
    draw_grid,
    family_options,
)
from .run_view import MAX_STEP, RunView, is_step

__all__ = [
    "LAYERS_EVERY",
    "PIN_SYNC_JS",
    "Refreshes",
    "pin_moved",
    "pin_store",
    "pin_text",
    "pinned_of",
    "since_of",
    "refreshes_due",
    "register",
    "section",
    "step_of_click",
    "update_pin",
]

LAYERS_EVERY = 5
"""A view of the latest steps re-reads the heatmap and the profile every this many ticks."""
OPTIONS_EVERY = 10
"""The family picker's options are read again every this many ticks."""
CLICK_SOURCES = ("layer-heatmap", "u-index", "overlay")
PIN_SYNC_JS = """
function(pin) {
    if (!pin) { return window.dash_clientside.no_update; }
    const params = new URLSearchParams(window.location.search);
    if (pin.step === null || pin.step === undefined) { params.delete("at"); }
    else { params.set("at", String(pin.step)); }
    const query = params.toString();
    const target = window.location.pathname + (query ? "?" + query : "");
    if (target !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", target);
    }
    return window.dash_clientside.no_update;
}
"""
"""The pinned step follows into the URL as ``?at=``, beside the view's parameters."""


@dataclass(frozen=True)
class Refreshes:
    """Which of the section's charts a tick redraws."""

    grid: bool
    profile: bool


def section(names: list[str], at: str | None = None) -> html.Div:
    """The section for a run with metrics ``names``, pinned to the URL's ``at`` if a step."""
    families = families_with_layers(names)
    pinned = _step_text(at)
    controls = [
        dcc.Dropdown(
            id="depth-family",
            options=family_options(families),
            value=families[0] if families else None,
            clearable=False,
            className="picker",
        ),
        dcc.Checklist(
            id="depth-log",
            options=[
                {"label": " log scale (profile)", "value": "log"},
                {"label": " × baseline", "value": "baseline"},
            ],
            value=["log"],
            className="toggle",
        ),
        html.Button("follow latest", id="pin-latest", n_clicks=0, className="small"),
        html.Span(pin_text(pinned), id="pin-info", className="muted"),
    ]
    return html.Div(
        [
            html.H3("Layers"),
            html.Div(controls, className="controls"),
            dcc.Graph(
                id="layer-heatmap",
                config=GRAPH_CONFIG,
                figure=small_empty("loading…", 320),
            ),
            dcc.Graph(id="u-index", config=GRAPH_CONFIG, figure=small_empty("", 210)),
            html.Div(id="heatmap-info", className="muted"),
            dcc.Graph(id="depth", config=GRAPH_CONFIG),
            html.Span(id="depth-info", className="muted"),
            dcc.Store(id="layers-pin", data=pin_store(pinned)),
            dcc.Store(id="layers-grid-tick"),
            dcc.Store(id="layers-profile-tick"),
            html.Div(id="pin-sync", hidden=True),
        ],
        className="layers-section",
    )


def pin_store(step: int | None, since: int | None = None) -> dict[str, int | None]:
    """The pin as the ``layers-pin`` store holds it; ``step`` None follows the latest step.
    ``since`` is where the step's baseline ends (a spike's start), for "× baseline"."""
    return {"step": step, "since": since} if since is not None else {"step": step}


def since_of(store: object) -> int | None:
    """Where a pin's baseline ends (`pin_store`), when the store says so and it is no later
    than the pinned step; else None (the baseline ends at the pinned step).

    >>> since_of({"step": 1200, "since": 1190}), since_of({"step": 1200, "since": 1300})
    (1190, None)
    """
    pinned = pinned_of(store)
    since = store.get("since") if isinstance(store, dict) else None
    return since if pinned is not None and is_step(since) and since <= pinned else None


def pinned_of(store: object) -> int | None:
    """The pinned step a store holds; None (follow the latest) for anything else, as a
    crafted request may send anything.

    >>> pinned_of({"step": 1200}), pinned_of({"step": "1200"}), pinned_of(None)
    (1200, None, None)
    """
    step = store.get("step") if isinstance(store, dict) else None
    return step if is_step(step) else None


def pin_text(step: int | None) -> str:
    """What the pin row says.

    >>> pin_text(1208)
    'profile pinned to step 1,208'
    """
    if step is None:
        return "profile at the latest step · click the heatmap, the U-index or the chart to pin"
    return f"profile pinned to step {step:,}"


def pin_moved(pinned: int | None, *, grid_drawn: bool) -> tuple[str, Any, Any]:
    """What a new pin changes: the pin row's text, and the pinned step's line on the
    heatmap and the U-index, as patches of their shapes (their data stays where it is: the
    heatmap of a long run is hundreds of KiB, read and drawn again for one line). Nothing
    is drawn on charts that show no layers (``grid_drawn``: the grid's text is empty).

    >>> text, heatmap, u_index = pin_moved(1208, grid_drawn=True)
    >>> text, [s["x0"] for s in heatmap.to_plotly_json()["operations"][0]["params"]["value"]]
    ('profile pinned to step 1,208', [1208])
    """
    if not grid_drawn:
        return pin_text(pinned), dash.no_update, dash.no_update
    heatmap, u_index = dash.Patch(), dash.Patch()
    heatmap["layout"]["shapes"] = pin_shapes(pinned)
    u_index["layout"]["shapes"] = u_index_shapes(pinned)
    return pin_text(pinned), heatmap, u_index


def step_of_click(click: object) -> int | None:
    """The step of the first point of a graph's ``clickData`` (its x, rounded), or None.

    >>> step_of_click({"points": [{"x": 1207.6, "y": "layers.3"}]})
    1208
    """
    if not isinstance(click, dict):
        return None
    points = click.get("points")
    if not (isinstance(points, list) and points and isinstance(points[0], dict)):
        return None
    x = points[0].get("x")
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    step = round(x)
    return step if is_step(step) else None


def update_pin(trigger: TriggerId, clicks: Mapping[str, object]) -> dict[str, int | None] | None:
    """The pin after a click: ``trigger`` is what fired (a graph of `CLICK_SOURCES`, whose
    ``clickData`` is in ``clicks``, or ``pin-latest``); None when nothing changes."""
    if trigger == "pin-latest":
        return pin_store(None)
    if isinstance(trigger, str) and trigger in CLICK_SOURCES:
        step = step_of_click(clicks.get(trigger))
        return None if step is None else pin_store(step)
    return None


def _step_text(text: str | None) -> int | None:
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    step = int(number)
    return step if 0 <= step <= MAX_STEP else None


# --- the heatmap and the U-index ----------------------------------------------------------


def refreshes_due(view: RunView | None, pinned: int | None, n_intervals: object) -> Refreshes:
    """Which charts a tick redraws: the heatmap for a view of the latest steps (no end),
    every `LAYERS_EVERY`-th tick; the profile while it follows the latest step, as often,
    and every `OPTIONS_EVERY`-th tick for the family picker's options.

    >>> refreshes_due(RunView("r"), None, 5), refreshes_due(RunView("r", end=9), 120, 5)
    (Refreshes(grid=True, profile=True), Refreshes(grid=False, profile=False))
    >>> refreshes_due(RunView("r", end=9), 120, 10)
    Refreshes(grid=False, profile=True)
    """
    if not isinstance(n_intervals, int) or view is None:
        return Refreshes(False, False)
    now = n_intervals % LAYERS_EVERY == 0
    options = n_intervals % OPTIONS_EVERY == 0
    return Refreshes(grid=now and view.end is None, profile=(now and pinned is None) or options)


# --- wiring -------------------------------------------------------------------------------


def register(app: dash.Dash, data: LayerReads) -> None:
    @app.callback(
        Output("layers-pin", "data"),
        Input("layer-heatmap", "clickData"),
        Input("u-index", "clickData"),
        Input("overlay", "clickData"),
        Input("pin-latest", "n_clicks"),
        prevent_initial_call=True,
    )
    async def on_click(heatmap: object, chart: object, overlay: object, _latest: object) -> Any:
        clicks = {"layer-heatmap": heatmap, "u-index": chart, "overlay": overlay}
        return or_prevent(update_pin(triggered_id(), clicks))

    @app.callback(
        Output("layer-heatmap", "figure"),
        Output("u-index", "figure"),
        Output("heatmap-info", "children"),
        Input("view-drawn", "data"),
        Input("depth-family", "value"),
        Input("layers-grid-tick", "data"),
        State("layers-pin", "data"),
        State("view", "data"),
    )
    async def on_grid(
        store: object, family: object, _n: object, pin: object, wanted: object
    ) -> DrawnGrid:
        # A family picked along with a new view (a spike's click picks the family that
        # spiked first) waits for the view to be drawn: the grid is read once, for both.
        if triggered_id() == "depth-family" and wanted != store:
            raise PreventUpdate
        view = RunView.from_store(store)
        return await in_thread(draw_grid, data, viewer(), view, family, pinned_of(pin))

    @app.callback(
        Output("pin-info", "children"),
        Output("layer-heatmap", "figure", allow_duplicate=True),
        Output("u-index", "figure", allow_duplicate=True),
        Input("layers-pin", "data"),
        State("heatmap-info", "children"),
        prevent_initial_call=True,
    )
    async def on_pin(pin: object, drawn: object) -> tuple[str, Any, Any]:
        return pin_moved(pinned_of(pin), grid_drawn=bool(drawn))

    @app.callback(
        Output("depth", "figure"),
        Output("depth-info", "children"),
        Output("depth-family", "options"),
        Input("layers-pin", "data"),
        Input("depth-family", "value"),
        Input("depth-log", "value"),
        Input("layers-profile-tick", "data"),
        State("view", "data"),
        State("depth-family", "options"),
    )
    async def on_depth(
        pin: object, family: object, log: object, _n: object, store: object, options: object
    ) -> tuple[Any, Any, Any]:
        view = RunView.from_store(store)
        fig, info, new_options, value = await in_thread(
            draw_depth, data, viewer(), view, family, log, pinned_of(pin), since_of(pin)
        )
        # Unchanged picker props are left alone: setting them would redraw the heatmap. The
        # family goes by `set_props`, not as an output: Dash holds a callback whose input is
        # a pending callback's output, and the heatmap's first read waited for this one.
        if value != family:
            dash.set_props("depth-family", {"value": value})
        return fig, info, dash.no_update if new_options == options else new_options

    app.clientside_callback(
        PIN_SYNC_JS, Output("pin-sync", "children"), Input("layers-pin", "data")
    )
