"""The run page's layers section: a layer × step heatmap that follows the chart's zoom, the
U-index over time under it, and the depth profile at a pinned step.

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
from typing import Any, Protocol

import dash
from dash import Input, Output, State, dcc, html
from normwatch.server.auth import Principal
from normwatch.server.services.layers import LayerGrid

from ..data import MetricRefused, RunNotFound
from ..figures import Figure, depth_figure, empty_figure
from ..layers import (
    LayerHeatmap,
    families_with_layers,
    layer_heatmap_figure,
    layer_rows,
    rows_u_index,
    small_empty,
    u_index_figure,
)
from ..session import viewer
from ..wiring import TriggerId, in_thread, or_prevent, triggered_id
from .run_view import MAX_STEP, RunView, is_step

__all__ = [
    "HEATMAP_COLUMNS",
    "LAYERS_EVERY",
    "NO_LAYERS",
    "PIN_SYNC_JS",
    "LayerReads",
    "draw_depth",
    "draw_grid",
    "Refreshes",
    "grid_text",
    "pin_store",
    "pin_text",
    "pinned_of",
    "refreshes_due",
    "register",
    "section",
    "step_of_click",
    "update_pin",
]

NO_LAYERS = (
    "No per-layer metrics yet: log names like grad/norm/layers.{i} "
    "(normwatch.client.jax.stability_metrics does)."
)
HEATMAP_COLUMNS = 600
"""Columns of the heatmap: about its width in pixels (each a bucket's largest value)."""
LAYERS_EVERY = 5
"""A view of the latest steps re-reads the heatmap and the profile every this many ticks."""
OPTIONS_EVERY = 10
"""The family picker's options are read again every this many ticks."""
PROFILE_RADIUS = 500
"""A pinned step's profile takes each layer's logged step nearest it within about this many
steps (per-layer norms are often logged every few steps)."""
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

DrawnDepth = tuple[Any, str, list[dict[str, str]], str | None]
"""The depth chart, its text, the family picker's options and its value."""
DrawnGrid = tuple[Figure, Figure, str]
"""The heatmap, the U-index chart and the text under them."""


@dataclass(frozen=True)
class Refreshes:
    """Which of the section's charts a tick redraws."""

    grid: bool
    profile: bool


class LayerReads(Protocol):
    """What the section reads, each for the viewer (`RunNotFound` outside its project)."""

    def metric_names(self, who: Principal, run_id: str) -> list[str]: ...

    def layer_grid(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
        at: int | None = None,
    ) -> LayerGrid: ...

    def layer_profile(
        self, who: Principal, run_id: str, prefix: str, *, at: int | None, radius: int
    ) -> LayerGrid | None: ...


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
            options=[{"label": " log scale (profile)", "value": "log"}],
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
                config={"displaylogo": False},
                figure=small_empty("loading…", 320),
            ),
            dcc.Graph(id="u-index", config={"displaylogo": False}, figure=small_empty("", 210)),
            html.Div(id="heatmap-info", className="muted"),
            dcc.Graph(id="depth", config={"displaylogo": False}),
            html.Span(id="depth-info", className="muted"),
            dcc.Store(id="layers-pin", data=pin_store(pinned)),
            dcc.Store(id="layers-grid-tick"),
            dcc.Store(id="layers-profile-tick"),
            html.Div(id="pin-sync", hidden=True),
        ],
        className="layers-section",
    )


def family_options(families: list[str]) -> list[dict[str, str]]:
    return [{"label": f, "value": f} for f in families]


# --- the pinned step ----------------------------------------------------------------------


def pin_store(step: int | None) -> dict[str, int | None]:
    """The pin as the ``layers-pin`` store holds it; ``step`` None follows the latest step."""
    return {"step": step}


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


def _picked(family: object, families: list[str]) -> str | None:
    if isinstance(family, str) and family in families:
        return family
    return families[0] if families else None


def grid_text(grid: LayerGrid, rows: int) -> str:
    """'50 layers × 600 columns, steps 0–999,999; each cell the largest value in its ~1,667
    steps' (or 'at its step' when the range holds no more logged steps than columns)."""
    if not grid.steps:
        return ""
    span = f"steps {grid.steps[0]:,}–{grid.steps[-1]:,}"
    shape = f"{rows} layers × {len(grid.steps):,} columns, {span}"
    if not grid.bucketed:
        return f"{shape}; each cell the value logged at its step"
    width = (grid.steps[-1] - grid.steps[0]) / max(1, len(grid.steps) - 1)
    return f"{shape}; each cell the largest value in its ~{width:,.0f} steps"


def draw_grid(
    data: LayerReads, who: Principal, view: RunView | None, family: object, pinned: int | None
) -> DrawnGrid:
    """The heatmap of the picked ``family`` over the view's steps, the U-index under it, and
    the text that says what a cell is. Rows that lie inside another row (a leaf beside its
    layer) are left out, and the U-index is then taken over the rows drawn."""
    empty = small_empty(NO_LAYERS, 320), small_empty("", 210), ""
    if view is None:
        return empty
    try:
        families = families_with_layers(data.metric_names(who, view.run))
        picked = _picked(family, families)
        if picked is None:
            return empty
        grid = data.layer_grid(
            who, view.run, picked, start=view.start, end=view.end, points=HEATMAP_COLUMNS
        )
    except RunNotFound:
        return empty
    except MetricRefused as exc:
        return small_empty(str(exc), 320), small_empty("", 210), ""
    keep = layer_rows(grid.layers)
    values = [grid.values[i] for i in keep]
    u_index = grid.u_index if len(keep) == len(grid.layers) else rows_u_index(values)
    heatmap = LayerHeatmap(
        family=picked,
        layers=[grid.layers[i] for i in keep],
        steps=grid.steps,
        values=values,
        bucketed=grid.bucketed,
        x_range=view.x_range,
        pinned=pinned,
    )
    if not grid.steps:
        return small_empty(f"No {picked} values in these steps.", 320), small_empty("", 210), ""
    chart = u_index_figure(
        grid.steps,
        u_index,
        x_range=view.x_range,
        pinned=pinned,
        uirevision=f"{picked}|{view.x_range}",
    )
    return layer_heatmap_figure(heatmap), chart, grid_text(grid, len(keep))


# --- the depth profile --------------------------------------------------------------------


def no_layers(options: list[dict[str, str]]) -> DrawnDepth:
    figure: Figure = empty_figure(NO_LAYERS)
    return figure, "", options, None


def profile_text(profile_u: float | None, at: int, steps: list[int | None]) -> str:
    """'ends / middle: 4.3×', and which steps the values were logged at when not all at
    ``at``.

    >>> profile_text(4.29, 1208, [1200, 1210])
    'ends / middle: 4.3× · values logged at steps 1,200–1,210'
    """
    logged = sorted({s for s in steps if s is not None})
    parts = [] if profile_u is None else [f"ends / middle: {profile_u:.1f}×"]
    if not logged:
        parts.append(f"no values logged near step {at:,}")
    elif logged != [at]:
        where = f"{logged[0]:,}" if len(logged) == 1 else f"{logged[0]:,}–{logged[-1]:,}"
        parts.append(f"values logged at step{'s' if len(logged) > 1 else ''} {where}")
    return " · ".join(parts)


def draw_depth(
    data: LayerReads,
    who: Principal,
    view: RunView | None,
    family: object,
    log: object,
    pinned: int | None = None,
) -> DrawnDepth:
    """The depth profile of the view's run for the picked ``family`` (the first family with
    layers when it has none of that name) at the ``pinned`` step, else the latest, with the
    picker's options and value."""
    if view is None:
        return no_layers([])
    try:
        families = families_with_layers(data.metric_names(who, view.run))
        picked = _picked(family, families)
        if picked is None:
            return no_layers(family_options(families))
        grid = data.layer_profile(who, view.run, picked, at=pinned, radius=PROFILE_RADIUS)
    except RunNotFound:  # the view names no run of the viewer's project
        return no_layers([])
    except MetricRefused as exc:
        figure: Figure = empty_figure(str(exc))
        return figure, "", family_options(families), picked
    if grid is None or grid.profile is None:
        return no_layers(family_options(families))
    keep = layer_rows(grid.layers)
    profile = grid.profile
    values = [profile.values[i] for i in keep]
    u_index = (
        profile.u_index
        if len(keep) == len(grid.layers)
        else rows_u_index([[v] for v in values])[0]
        if values
        else None
    )
    fig = depth_figure(
        [grid.layers[i] for i in keep],
        [math.nan if v is None else v for v in values],
        family=picked,
        step=profile.step,
        log_y=bool(log),
    )
    info = profile_text(u_index, profile.step, [profile.steps[i] for i in keep])
    return fig, info, family_options(families), picked


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
        Output("layers-grid-tick", "data"),
        Output("layers-profile-tick", "data"),
        Input("tick", "n_intervals"),
        State("view", "data"),
        State("layers-pin", "data"),
        prevent_initial_call=True,
    )
    async def on_tick(n: object, store: object, pin: object) -> tuple[Any, Any]:
        # The charts' callbacks listen to these stores, not to the tick: a tick that asked
        # for nothing would otherwise supersede (and so drop) a redraw still on its way.
        due = refreshes_due(RunView.from_store(store), pinned_of(pin), n)
        return (n if due.grid else dash.no_update, n if due.profile else dash.no_update)

    @app.callback(
        Output("layer-heatmap", "figure"),
        Output("u-index", "figure"),
        Output("heatmap-info", "children"),
        Input("view", "data"),
        Input("depth-family", "value"),
        Input("layers-pin", "data"),
        Input("layers-grid-tick", "data"),
    )
    async def on_grid(store: object, family: object, pin: object, _n: object) -> DrawnGrid:
        view = RunView.from_store(store)
        return await in_thread(draw_grid, data, viewer(), view, family, pinned_of(pin))

    @app.callback(
        Output("pin-info", "children"),
        Input("layers-pin", "data"),
        prevent_initial_call=True,
    )
    async def on_pin(pin: object) -> str:
        return pin_text(pinned_of(pin))

    @app.callback(
        Output("depth", "figure"),
        Output("depth-info", "children"),
        Output("depth-family", "options"),
        Output("depth-family", "value"),
        Input("layers-pin", "data"),
        Input("depth-family", "value"),
        Input("depth-log", "value"),
        Input("layers-profile-tick", "data"),
        State("view", "data"),
        State("depth-family", "options"),
    )
    async def on_depth(
        pin: object, family: object, log: object, _n: object, store: object, options: object
    ) -> tuple[Any, Any, Any, Any]:
        view = RunView.from_store(store)
        fig, info, new_options, value = await in_thread(
            draw_depth, data, viewer(), view, family, log, pinned_of(pin)
        )
        # Unchanged picker props are left alone: setting them would redraw the heatmap.
        return (
            fig,
            info,
            dash.no_update if new_options == options else new_options,
            dash.no_update if value == family else value,
        )

    app.clientside_callback(
        PIN_SYNC_JS, Output("pin-sync", "children"), Input("layers-pin", "data")
    )
