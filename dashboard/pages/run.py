"""A run: the red/blue overlay of grad norm against a parameter norm, live.

The view (:class:`~.run_view.RunView`: metrics, step range, log scale) lives in a store and
in the URL, so a deep link reproduces it. Zooming re-queries the series for the new range,
so detail appears as you zoom; a 1 s tick patches only the data, so a zoom is never reset
by a refresh.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, dcc, html
from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut, RunOut

from ..data import RunNotFound
from ..figures import AlertMark, Line, Marker, empty_figure
from ..session import viewer
from ..wiring import TriggerId, in_thread, or_prevent, triggered_id
from . import run_layers, run_spikes
from .run_overlay import (
    POINTS,
    chart_shape,
    data_patch,
    event_list,
    overlay_for,
    range_text,
    view_figure,
)
from .run_view import URL_SYNC_JS, RunView, event_window, is_step, view_from_relayout

ROUTES = ("/runs/{run_id}",)
_PATH = re.compile(r"^/runs/([0-9A-Za-z_-]+)/?$")
TICK_MS = 1000
RUN_NOT_FOUND = "No such run in your project"
OPTIONS_EVERY = 5
"""The metric pickers' options are read again every this many ticks."""

Drawn = tuple[Any, Any, str, Any]
"""The chart's figure (or a patch), its shape, the range text and the event list."""


class RunReads(run_layers.LayerReads, run_spikes.SpikeReads, Protocol):
    """What the run page reads, each for the viewer (`RunNotFound` outside its project)."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]: ...

    def lines(
        self,
        who: Principal,
        run_id: str,
        metrics: list[str],
        *,
        start: int | None,
        end: int | None,
        points: int,
    ) -> dict[str, Line]: ...

    def markers(self, who: Principal, run_id: str) -> list[Marker]: ...

    def alert_marks(self, who: Principal, run_id: str) -> list[AlertMark]: ...


def match(path: str) -> dict[str, str] | None:
    found = _PATH.match(path)
    return {"run_id": found.group(1)} if found else None


def metric_options(names: list[str]) -> list[dict[str, str]]:
    return [{"label": n, "value": n} for n in names]


def restarts_text(run: RunOut) -> str:
    """'segment 3 · restarted at 1,200, 5,000' (the steps each later segment began at)."""
    restarts = [s.start_step for s in run.segments or [] if s.segment > 1]
    steps = ", ".join(f"{step:,}" for step in restarts if step is not None)
    return f"segment {run.segment}" + (f" · restarted at {steps}" if restarts else "")


def layout(data: RunReads, who: Principal, query: Mapping[str, str], run_id: str) -> html.Div:
    """The page of the viewer's run ``run_id``, in the view its URL's ``query`` names."""
    run = data.run(who, run_id)
    names = [m.name for m in data.metrics(who, run_id)]
    view = RunView.from_query(
        run_id,
        names,
        left=query.get("left"),
        right=query.get("right"),
        start=query.get("start"),
        end=query.get("end"),
        log=query.get("log"),
    )
    options = metric_options(names)
    title = [
        html.H1(run.name),
        html.Span(run.status, className=f"status status-{run.status}"),
        html.Span(restarts_text(run), className="muted"),
        html.Span(id="run-last-step", className="muted"),
        dcc.Link("alerts for this run", href=f"/alerts?run={run_id}", id="run-alerts-link"),
    ]
    left = dcc.Dropdown(id="left-metric", options=options, value=view.left, clearable=False)
    right = dcc.Dropdown(id="right-metric", options=options, value=view.right)
    controls = [
        html.Label(["left axis (red)", left], className="picker"),
        html.Label(["right axis (blue)", right], className="picker"),
        dcc.Checklist(
            id="log-scale",
            options=[{"label": " log scale", "value": "log"}],
            value=["log"] if view.log else [],
            className="toggle",
        ),
        html.Button("full range", id="reset-range", n_clicks=0),
    ]
    return html.Div(
        [
            html.Div(title, className="run-title"),
            html.Div(controls, className="controls"),
            dcc.Graph(
                id="overlay",
                config={"displaylogo": False, "scrollZoom": True},
                figure=empty_figure("loading…"),
            ),
            html.Div(id="range-info", className="muted"),
            run_spikes.section(),
            run_layers.section(names, query.get("at")),
            html.H3("Events"),
            html.Div(id="event-list"),
            dcc.Store(id="view", data=view.to_store()),
            dcc.Store(id="overlay-shape", data=None),
            dcc.Interval(id="tick", interval=TICK_MS),
            html.Div(id="url-sync", hidden=True),
        ],
        className="card run-page",
    )


def update_view(
    data: RunReads,
    who: Principal,
    view: RunView | None,
    *,
    left: object,
    right: object,
    log: object,
    relayout: object,
    zooms: object,
    trigger: TriggerId,
) -> RunView | None:
    """The view after a change of the page's controls; None when it stays as it is.

    The pickers and the log toggle always count. Then ``trigger`` says what else moved: the
    chart (``relayout``, a zoom or pan), the "full range" button, or an event's zoom button
    (``{"type": "event-zoom", "step": s}``, which counts only once one was clicked: a list
    of events redrawn fires it too). ``view`` None (a store that holds no view) changes
    nothing, nor does an event of a run outside the viewer's project.
    """
    if view is None:
        return None
    new = replace(view, left=_name(left), right=_name(right), log=bool(log))
    if trigger == "overlay":
        new = view_from_relayout(new, relayout)
    elif trigger == "reset-range":
        new = replace(new, start=None, end=None)
    elif isinstance(trigger, Mapping) and trigger.get("type") == "event-zoom":
        step = trigger.get("step")
        if not (isinstance(zooms, list) and any(zooms)) or not is_step(step):
            return None
        try:
            run = data.run(who, view.run)
        except RunNotFound:
            return None
        start, end = event_window(step, run.last_step)
        new = replace(new, start=start, end=end)
    return None if new == view else new


def draw(
    data: RunReads, who: Principal, view: RunView | None, shape: object, *, trigger: TriggerId
) -> Drawn:
    """The chart, its shape, the range text and the events for ``view``.

    On a tick (``trigger == "tick"``) with the chart's ``shape`` unchanged, the figure is a
    patch of its data and the shape and event list are left as they are (``no_update``);
    anything else draws the whole figure. A view of no run of the viewer's project (or
    None) draws the not-found chart.
    """
    if view is None:
        return not_found_drawn()
    try:
        alerts = data.alert_marks(who, view.run)
        markers = data.markers(who, view.run)
        lines = (
            data.lines(who, view.run, view.metrics, start=view.start, end=view.end, points=POINTS)
            if view.metrics
            else {}
        )
    except RunNotFound:
        return not_found_drawn()
    overlay = overlay_for(view, lines, markers, alerts)
    fig = view_figure(overlay)
    new_shape = chart_shape(fig, markers, alerts)
    info = range_text(overlay)
    if trigger != "tick" or shape != new_shape:
        return fig, new_shape, info, event_list(markers)
    return data_patch(fig), dash.no_update, info, dash.no_update


def refresh_options(
    data: RunReads, who: Principal, view: RunView | None, n_intervals: object
) -> tuple[Any, Any, str]:
    """The pickers' options (every `OPTIONS_EVERY` ticks, else ``no_update``) and the
    run's last step; empty for a view of no run of the viewer's project."""
    if view is None:
        return [], [], ""
    try:
        metrics = data.metrics(who, view.run)
    except RunNotFound:
        return [], [], ""
    last = max((m.last_step for m in metrics if m.last_step is not None), default=None)
    label = "" if last is None else f"last step {last:,}"
    if isinstance(n_intervals, int) and n_intervals % OPTIONS_EVERY:
        return dash.no_update, dash.no_update, label
    options = metric_options([m.name for m in metrics])
    return options, options, label


def not_found_drawn() -> Drawn:
    """What :func:`draw` shows for a view of no run of the viewer's project."""
    return empty_figure(RUN_NOT_FOUND), [], "", []


def _name(value: object) -> str | None:
    return value if isinstance(value, str) else None


def register(app: dash.Dash, data: RunReads) -> None:
    run_layers.register(app, data)
    run_spikes.register(app, data)

    @app.callback(
        Output("view", "data"),
        Input("left-metric", "value"),
        Input("right-metric", "value"),
        Input("log-scale", "value"),
        Input("overlay", "relayoutData"),
        Input("reset-range", "n_clicks"),
        Input({"type": "event-zoom", "step": ALL}, "n_clicks"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_controls(
        left: object,
        right: object,
        log: object,
        relayout: object,
        _reset: object,
        zooms: object,
        store: object,
    ) -> dict[str, Any]:
        new = await in_thread(
            update_view,
            data,
            viewer(),
            RunView.from_store(store),
            left=left,
            right=right,
            log=log,
            relayout=relayout,
            zooms=zooms,
            trigger=triggered_id(),
        )
        return or_prevent(new).to_store()

    @app.callback(
        Output("overlay", "figure"),
        Output("overlay-shape", "data"),
        Output("range-info", "children"),
        Output("event-list", "children"),
        Input("view", "data"),
        Input("tick", "n_intervals"),
        State("overlay-shape", "data"),
    )
    async def on_draw(store: object, _tick: object, shape: object) -> Drawn:
        view = RunView.from_store(store)
        return await in_thread(draw, data, viewer(), view, shape, trigger=triggered_id())

    @app.callback(
        Output("left-metric", "options"),
        Output("right-metric", "options"),
        Output("run-last-step", "children"),
        Input("tick", "n_intervals"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_tick(n: object, store: object) -> tuple[Any, Any, str]:
        return await in_thread(refresh_options, data, viewer(), RunView.from_store(store), n)

    app.clientside_callback(URL_SYNC_JS, Output("url-sync", "children"), Input("view", "data"))
