"""A run: the red/blue overlay of grad norm against a parameter norm, live.

The view (metrics, step range, log scale) lives in a store and in the URL, so a deep
link reproduces it. Zooming re-queries the series for the new range, so detail appears
as you zoom; a 1 s tick patches only the data, so a zoom is never reset by a refresh.
"""

from __future__ import annotations

import math
import re
from typing import Any

import anyio
import dash
from dash import ALL, Input, Output, State, ctx, dcc, html
from dash.exceptions import PreventUpdate
from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut

from ..data import DashboardData, RunNotFound
from ..figures import AlertMark, Figure, Marker, OverlayView, empty_figure, overlay_figure
from ..session import viewer
from . import run_layers

ROUTES = ("/runs/{run_id}",)
_PATH = re.compile(r"^/runs/([0-9A-Za-z_-]+)/?$")
TICK_MS = 1000
POINTS = 1000
DEFAULT_LEFT = "grad/norm/total"


def match(path: str) -> dict[str, str] | None:
    found = _PATH.match(path)
    return {"run_id": found.group(1)} if found else None


def default_metrics(names: list[str]) -> tuple[str | None, str | None]:
    """Total grad norm on the left; the final norm's gain (else any parameter norm) right."""
    left = (
        DEFAULT_LEFT
        if DEFAULT_LEFT in names
        else next((n for n in names if n.startswith("grad/norm")), names[0] if names else None)
    )
    params = [n for n in names if n.startswith("params/norm/")]
    right = next((n for n in params if "final_norm" in n), params[0] if params else None)
    return left, right


def _int_or_none(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def layout(
    data: DashboardData,
    who: Principal,
    run_id: str,
    left: str | None = None,
    right: str | None = None,
    start: str | None = None,
    end: str | None = None,
    log: str | None = None,
    **_params: str,
) -> html.Div:
    run = data.run(who, run_id)
    names = [m.name for m in data.metrics(who, run_id)]
    default_left, default_right = default_metrics(names)
    view = {
        "run": run_id,
        "left": left or default_left,
        "right": right if right is not None else default_right,
        "start": _int_or_none(start),
        "end": _int_or_none(end),
        "log": log in ("1", "true", "yes"),
    }
    options = [{"label": n, "value": n} for n in names]
    segments = run.segments or []
    restarts = [s for s in segments if s.segment > 1]
    return html.Div(
        [
            html.Div(
                [
                    html.H1(run.name),
                    html.Span(run.status, className=f"status status-{run.status}"),
                    html.Span(
                        f"segment {run.segment}"
                        + (
                            " · restarted at "
                            + ", ".join(
                                f"{s.start_step:,}" for s in restarts if s.start_step is not None
                            )
                            if restarts
                            else ""
                        ),
                        className="muted",
                    ),
                    html.Span(id="run-last-step", className="muted"),
                    dcc.Link(
                        "alerts for this run", href=f"/alerts?run={run_id}", id="run-alerts-link"
                    ),
                ],
                className="run-title",
            ),
            html.Div(
                [
                    html.Label(
                        [
                            "left axis (red)",
                            dcc.Dropdown(
                                id="left-metric",
                                options=options,
                                value=view["left"],
                                clearable=False,
                            ),
                        ],
                        className="picker",
                    ),
                    html.Label(
                        [
                            "right axis (blue)",
                            dcc.Dropdown(id="right-metric", options=options, value=view["right"]),
                        ],
                        className="picker",
                    ),
                    dcc.Checklist(
                        id="log-scale",
                        options=[{"label": " log scale", "value": "log"}],
                        value=["log"] if view["log"] else [],
                        className="toggle",
                    ),
                    html.Button("full range", id="reset-range", n_clicks=0),
                ],
                className="controls",
            ),
            dcc.Graph(
                id="overlay",
                config={"displaylogo": False, "scrollZoom": True},
                figure=empty_figure("loading…"),
            ),
            html.Div(id="range-info", className="muted"),
            run_layers.section(names),
            html.H3("Events"),
            html.Div(id="event-list"),
            dcc.Store(id="view", data=view),
            dcc.Store(id="overlay-shape", data=None),
            dcc.Interval(id="tick", interval=TICK_MS),
            html.Div(id="url-sync", hidden=True),
        ],
        className="card run-page",
    )


def view_from_relayout(view: dict[str, Any], relayout: dict[str, Any] | None) -> dict[str, Any]:
    """The new view after a zoom, pan or autoscale on the chart; unchanged otherwise."""
    if not relayout:
        return view
    if relayout.get("xaxis.autorange"):
        return {**view, "start": None, "end": None}
    lo = relayout.get("xaxis.range[0]")
    hi = relayout.get("xaxis.range[1]")
    if lo is None and isinstance(relayout.get("xaxis.range"), list):
        lo, hi = relayout["xaxis.range"]
    if lo is None or hi is None:
        return view
    start, end = math.floor(float(lo)), math.ceil(float(hi))
    return {**view, "start": max(0, start), "end": max(0, end)}


def event_window(step: int, last_step: int | None) -> tuple[int, int]:
    """A zoom around an event: wide enough to see the slope before and after."""
    half = max(200, (last_step or step) // 40)
    return max(0, step - half), step + half


def build_view(
    data: DashboardData,
    who: Principal,
    view: dict[str, Any],
    alerts: list[AlertMark] | None = None,
    markers: list[Marker] | None = None,
) -> OverlayView | None:
    """What the overlay chart draws for ``view``; None when the run has no metrics yet."""
    metrics = [m for m in (view.get("left"), view.get("right")) if m]
    if not metrics:
        return None
    lines = data.lines(
        who, view["run"], metrics, start=view.get("start"), end=view.get("end"), points=POINTS
    )
    x_range = None
    if view.get("start") is not None and view.get("end") is not None:
        x_range = (view["start"], view["end"])
    return OverlayView(
        left=lines.get(view["left"]) if view.get("left") else None,
        right=lines.get(view["right"]) if view.get("right") else None,
        events=data.markers(who, view["run"]) if markers is None else markers,
        log_y=bool(view.get("log")),
        x_range=x_range,
        uirevision=f"{view['run']}|{view.get('left')}|{view.get('right')}|{view.get('log')}",
        alerts=alerts or (),
    )


def view_figure(overlay: OverlayView | None) -> Figure:
    if overlay is None:
        return empty_figure("This run has no metrics yet.")
    return overlay_figure(overlay)


def figure_shape(fig: Figure) -> list[str]:
    return [f"{t.get('name')}|{t.get('yaxis')}" for t in fig["data"]]


def range_text(overlay: OverlayView | None) -> str:
    """'grad/norm/total (M4): 4,000 points, steps 0–99,999 · ...', from the lines drawn.

    Read from the lines, not the figure, whose names are escaped for Plotly.
    """
    if overlay is None:
        return ""
    parts = []
    for line in (overlay.left, overlay.right):
        if line is not None and len(line.steps):
            name = line.metric + (" (M4)" if line.downsampled else "")
            parts.append(
                f"{name}: {len(line.steps):,} points, steps {line.steps[0]:,}–{line.steps[-1]:,}"
            )
    return " · ".join(parts)


def event_list(markers: list[Any]) -> Any:
    if not markers:
        return html.P("No events. Trainers post them with run.event(...).", className="muted")
    return html.Ul(
        [
            html.Li(
                [
                    html.Button(
                        "zoom",
                        id={"type": "event-zoom", "step": m.step},
                        n_clicks=0,
                        className="small",
                    ),
                    html.Span(f" step {m.step:,} · {m.kind} · {m.label}"),
                ]
            )
            for m in markers
        ],
        className="events",
    )


RUN_NOT_FOUND = "No such run in your project"


def register(app: dash.Dash, data: DashboardData) -> None:
    run_layers.register(app, data)

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
    async def update_view(
        left: str | None,
        right: str | None,
        log: list[str] | None,
        relayout: dict[str, Any] | None,
        _reset: int,
        _zooms: list[int],
        view: dict[str, Any],
    ) -> dict[str, Any]:
        trigger = ctx.triggered_id
        new = {**view, "left": left, "right": right, "log": bool(log)}
        if trigger == "overlay":
            new = view_from_relayout(new, relayout)
        elif trigger == "reset-range":
            new = {**new, "start": None, "end": None}
        elif isinstance(trigger, dict) and trigger.get("type") == "event-zoom":
            if not any(_zooms):
                raise PreventUpdate
            who = viewer()
            try:
                run = await anyio.to_thread.run_sync(lambda: data.run(who, view["run"]))
            except RunNotFound:  # the view names no run of the viewer's project
                raise PreventUpdate from None
            start, end = event_window(int(trigger["step"]), run.last_step)
            new = {**new, "start": start, "end": end}
        if new == view:
            raise PreventUpdate
        return new

    @app.callback(
        Output("overlay", "figure"),
        Output("overlay-shape", "data"),
        Output("range-info", "children"),
        Output("event-list", "children"),
        Input("view", "data"),
        Input("tick", "n_intervals"),
        State("overlay-shape", "data"),
    )
    async def draw(view: dict[str, Any], _tick: int | None, shape: list[str] | None) -> Any:
        who = viewer()

        def read_and_build() -> tuple[list[AlertMark], list[Marker], OverlayView | None, Figure]:
            alerts = data.alert_marks(who, view["run"])
            markers = data.markers(who, view["run"])
            overlay = build_view(data, who, view, alerts, markers)
            return alerts, markers, overlay, view_figure(overlay)

        try:
            alerts, markers, overlay, fig = await anyio.to_thread.run_sync(read_and_build)
        except RunNotFound:  # the view names no run of the viewer's project
            return empty_figure(RUN_NOT_FOUND), [], "", []
        # Traces, events and alerts make the shape; a change of any redraws, not patches.
        new_shape = (
            figure_shape(fig)
            + [f"event@{m.step}" for m in markers]
            + [f"alert:{a.state}@{a.step}" for a in alerts]
        )
        info = range_text(overlay)
        if ctx.triggered_id != "tick" or shape != new_shape:
            return fig, new_shape, info, event_list(markers)
        patch = dash.Patch()
        for i, trace in enumerate(fig["data"]):
            patch["data"][i]["x"] = trace.get("x") or []
            patch["data"][i]["y"] = trace.get("y") or []
        patch["layout"]["shapes"] = fig["layout"].get("shapes", [])
        patch["layout"]["annotations"] = fig["layout"].get("annotations", [])
        return patch, dash.no_update, info, dash.no_update

    @app.callback(
        Output("left-metric", "options"),
        Output("right-metric", "options"),
        Output("run-last-step", "children"),
        Input("tick", "n_intervals"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def refresh_options(n: int, view: dict[str, Any]) -> Any:
        who = viewer()
        try:
            metrics: list[MetricOut] = await anyio.to_thread.run_sync(
                lambda: data.metrics(who, view["run"])
            )
        except RunNotFound:  # the view names no run of the viewer's project
            return [], [], ""
        last = max((m.last_step for m in metrics if m.last_step is not None), default=None)
        label = "" if last is None else f"last step {last:,}"
        if n % 5:
            return dash.no_update, dash.no_update, label
        options = [{"label": m.name, "value": m.name} for m in metrics]
        return options, options, label

    app.clientside_callback(
        """
        function(view) {
            if (!view) { return window.dash_clientside.no_update; }
            const params = new URLSearchParams(window.location.search);
            for (const key of ["left", "right", "start", "end"]) {
                const v = view[key];
                if (v === null || v === undefined || v === "") { params.delete(key); }
                else { params.set(key, String(v)); }
            }
            if (view.log) { params.set("log", "1"); } else { params.delete("log"); }
            const query = params.toString();
            const target = window.location.pathname + (query ? "?" + query : "");
            if (target !== window.location.pathname + window.location.search) {
                window.history.replaceState(window.history.state, "", target);
            }
            return window.dash_clientside.no_update;
        }
        """,
        Output("url-sync", "children"),
        Input("view", "data"),
    )
