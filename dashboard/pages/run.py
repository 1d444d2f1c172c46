"""A run: the red/blue overlay of grad norm against a parameter norm, live.

The view (:class:`~.run_view.RunView`: metrics, step range, log scale, extra series, one
axis or two, forecast, focus) lives in a store and in the URL, so a deep link reproduces
it. Zooming re-queries the series for the new range, so detail appears as you zoom; a 1 s
tick patches only the data, so a zoom is never reset by a refresh. Over the lines the chart
draws its aids (`.run_aids`: alert thresholds, the lines fitted around a focused
transition, the forecast); under it come the sections: transitions, spikes, layers,
attribution, events.
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
from normwatch.server.services.unknown_names import patterns_of

from ..figures import AlertMark, Line, Marker, empty_figure
from ..graph_config import ZOOMABLE_GRAPH_CONFIG
from ..refusals import NO_SUCH_RUN, Refusal, RunNotFound, UnknownMetrics, said
from ..session import viewer
from ..transforms import NORMALIZE_MODES
from ..wiring import ROW_CLICK_JS, TriggerId, clicked_row, in_thread, or_prevent, triggered_id
from . import (
    run_aids,
    run_attribution,
    run_control,
    run_download,
    run_layers,
    run_layers_draw,
    run_live,
    run_note,
    run_panels,
    run_series,
    run_shaping,
    run_spikes,
    run_transitions,
)
from .run_header import header_parts
from .run_live import TICK_MS
from .run_overlay import (
    POINTS,
    chart_shape,
    data_patch,
    event_list,
    overlay_for,
    range_text,
    view_figure,
)
from .run_tick import first_seen, tick
from .run_view import (
    MAX_METRIC,
    URL_SYNC_JS,
    X_AXES,
    ZOOM_JS,
    RunView,
    event_window,
    extra_series,
    is_step,
    smoothing,
    view_from_relayout,
)

ROUTES = ("/runs/{run_id}",)
_PATH = re.compile(r"^/runs/([0-9A-Za-z_-]+)/?$")
RUN_NOT_FOUND = NO_SUCH_RUN
Drawn = tuple[Any, Any, str, Any]
"""The chart's figure (or a patch), its shape, the range text and the event list."""


class RunReads(
    run_control.ControlAccess,
    run_panels.WorkspaceReads,
    run_layers_draw.LayerReads,
    run_spikes.SpikeReads,
    run_transitions.TransitionReads,
    run_attribution.AttributionReads,
    run_aids.AidReads,
    run_series.SeriesReads,
    run_download.ExportReads,
    run_shaping.AxisReads,
    run_note.NoteEditing,
    Protocol,
):
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


def layout(data: RunReads, who: Principal, query: Mapping[str, str], run_id: str) -> html.Div:
    """The page of the viewer's run ``run_id``, in the view its URL's ``query`` names."""
    run = data.run(who, run_id)
    metrics = data.metrics(who, run_id)
    names = [m.name for m in metrics]
    view = RunView.from_query(
        run_id,
        names,
        canonical={m.name: m.canonical for m in metrics if m.canonical},
        left=query.get("left"),
        right=query.get("right"),
        start=query.get("start"),
        end=query.get("end"),
        log=query.get("log"),
        series=_every(query, "series"),
        axes=query.get("axes"),
        forecast=query.get("forecast"),
        focus=query.get("focus"),
        smooth=query.get("smooth"),
        x=query.get("x"),
        norm=query.get("norm"),
        robust=query.get("robust"),
    )
    options = run_series.options_with(names, view)
    state, config, _ = header_parts(run)
    aids = run_aids.read_aids(data, who, view)
    # The chart's first figure comes with the page: drawn after it, by a callback, its read
    # waited behind every section's, and its answer was the last one the page got.
    figure, shape, info, events = draw(data, who, view, None, trigger="layout", aids=aids)
    title = [
        html.H1(run.name),
        # The status, segment and config follow the run while the page is open (`tick`).
        html.Span(state, id="run-state", className="run-state"),
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
        dcc.Checklist(
            id="chart-options",
            options=run_series.CHART_OPTIONS,
            value=run_series.chart_options(view),
            inline=True,
            className="toggle",
        ),
        html.Button("full range", id="reset-range", n_clicks=0),
    ]
    return html.Div(
        [
            html.Div(title, className="run-title"),
            run_note.note_section(run, who),
            html.Details(config, id="run-config", className="run-config"),
            html.Div(controls, className="controls"),
            run_shaping.controls(names, view),
            run_series.controls(names, view),
            dcc.Graph(
                id="overlay",
                config=ZOOMABLE_GRAPH_CONFIG,
                figure=figure,
            ),
            html.Div(info, id="range-info", className="muted"),
            run_panels.section(data, who, names),
            run_transitions.section(),
            run_spikes.section(query.get("threshold")),
            run_layers.section(names, query.get("at")),
            run_attribution.section(names),
            html.H3("Events"),
            html.Div(events, id="event-list"),
            dcc.Store(id="event-click"),  # a real click on an event's zoom (`ROW_CLICK_JS`)
            run_control.section(who),
            dcc.Store(id="view", data=view.to_store()),
            # The view the overlay last drew: the sections below follow it rather than the
            # view itself, so that a zoom's overlay request runs first and alone.
            dcc.Store(id="view-drawn", data=view.to_store()),
            html.Div(id="view-drawn-sync", hidden=True),
            dcc.Store(id="overlay-shape", data=shape),
            dcc.Store(id="overlay-zoom"),  # the chart's moves of its x axis (`ZOOM_JS`)
            # The aids come with the page, drawn into its first figure (`run_aids` reads
            # them again as the view changes).
            dcc.Store(id="overlay-aids", data=aids),
            dcc.Store(id="aids-key", data=run_aids.aids_key(view)),
            dcc.Store(id="aids-tick"),
            dcc.Interval(id="tick", interval=TICK_MS),
            *run_live.channel(run_id),
            dcc.Store(id="draw-tick"),
            # The data versions `tick` last gave each part: this page's, as it was drawn.
            dcc.Store(id="ticks-seen", data=first_seen(metrics, run)),
            html.Div(id="url-sync", hidden=True),
        ],
        className="card run-page",
    )


def _every(query: Mapping[str, str], name: str) -> list[str]:
    """Every value of a repeated parameter, where routing's query keeps them all."""
    every = getattr(query, "every", None)
    if callable(every):
        found = every(name)
        return [v for v in found if isinstance(v, str)] if isinstance(found, list) else []
    value = query.get(name)
    return [value] if value else []


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
    extra: object = None,
    options: object = None,
    smooth: object = 0.0,
    x: object = "step",
    norm: object = None,
) -> RunView | None:
    """The view after a change of the page's controls; None when it stays as it is.

    The pickers (``extra``: the "add series" picker's value), the log toggle and the chart
    toggles (``options``), the smoothing slider (``smooth``), the x axis (``x``) and the
    normalize picker (``norm``) always count. Then ``trigger`` says what else moved: the chart
    (``"overlay-zoom"``, with ``relayout`` its zoom or pan), the "full range" button, or an
    event's zoom button (``{"type": "event-zoom", "step": s}``, which counts only once one was
    clicked: a list of events redrawn fires it too), which also focuses the event. A focus the
    new range no longer shows is dropped. ``view`` None (a store that holds no view) changes
    nothing, nor does an event of a run outside the viewer's project.
    """
    if view is None:
        return None
    flags = options if isinstance(options, list) else []
    new = replace(
        view,
        left=_name(left),
        right=_name(right),
        log=bool(log),
        extra=extra_series(extra, exclude=(_name(left), _name(right))),
        one_axis="one-axis" in flags,
        forecast="forecast" in flags,
        robust="robust" in flags,
        smooth=smoothing(smooth),
        x=x if x in X_AXES else "step",
        norm=norm if norm in NORMALIZE_MODES else None,
    )
    if trigger == "overlay-zoom":
        # A zoom comes in the units the chart was drawn in: the view's before this change.
        axis = run_shaping.x_axis(data, who, view)
        new = view_from_relayout(new, relayout, None if axis is None else axis.to_step)
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
        new = replace(new, start=start, end=end, focus=step)
    if new.focus is not None and new.focused is None:
        new = replace(new, focus=None)
    return None if new == view else new


def draw(
    data: RunReads,
    who: Principal,
    view: RunView | None,
    shape: object,
    *,
    trigger: TriggerId,
    aids: object = None,
) -> Drawn:
    """The chart, its shape, the range text and the events for ``view``, with the aids of
    the ``aids`` store (`.run_aids.aids_of`) drawn over its lines.

    On a tick (``trigger == "tick"``) with the chart's ``shape`` unchanged, the figure is a
    patch of its data and the shape and event list are left as they are (``no_update``);
    anything else draws the whole figure. A view of no run of the viewer's project (or
    None) draws the not-found chart; a series the service will not read, a chart saying why;
    a name the run never logged, the other series and, beside them, the name with the
    closest ones the run has (`drawable_lines`).
    """
    if view is None:
        return not_found_drawn()
    try:
        alerts = data.alert_marks(who, view.run)
        markers = data.markers(who, view.run)
        lines, unknown = drawable_lines(data, who, view)
    except RunNotFound:
        return not_found_drawn()
    except Refusal as exc:
        return empty_figure(f"Cannot draw these series: {said(exc)}"), [], "", event_list(markers)
    overlay = overlay_for(view, lines, markers, run_shaping.watching(alerts, lines))
    # Rule lines, fits and forecasts are in the metrics' own units: none on a normalized chart.
    fig = view_figure(overlay, None if view.norm else run_aids.aids_of(aids, view, overlay))
    info: Any = range_text(overlay)
    if unknown is not None:
        info = [html.Span(f"Not drawn: {said(unknown)}.", className="error"), " ", info]
    if view.x != "step" and overlay is not None:
        axis = run_shaping.x_axis(data, who, view)
        if axis is None:
            info = f"{run_shaping.X_MISSING[view.x]}: drawn by step. {info}"
        else:
            fig = axis.apply(fig)
    new_shape = chart_shape(fig, markers, alerts)
    if trigger != "tick" or shape != new_shape:
        return fig, new_shape, info, event_list(markers)
    return data_patch(fig), dash.no_update, info, dash.no_update


def drawable_lines(
    data: RunReads, who: Principal, view: RunView
) -> tuple[dict[str, Line], UnknownMetrics | None]:
    """The view's series, and the refusal of those naming what the run never logged
    (None when it logged them all): the others are drawn without them, so that a name
    typed wrong, or one not logged yet, leaves the rest of the chart. A refusal for every
    series, or of another kind, is raised."""
    if not view.metrics:
        return {}, None
    try:
        read = data.lines(
            who, view.run, view.metrics, start=view.start, end=view.end, points=POINTS
        )
        return read, None
    except UnknownMetrics as exc:
        missing = set(exc.unknown)
        rest = [m for m in view.metrics if missing.isdisjoint(patterns_of([m]))]
        if not rest:
            raise
        return data.lines(who, view.run, rest, start=view.start, end=view.end, points=POINTS), exc


def not_found_drawn() -> Drawn:
    """What :func:`draw` shows for a view of no run of the viewer's project."""
    return empty_figure(RUN_NOT_FOUND), [], "", []


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and len(value) <= MAX_METRIC else None


VIEW_DRAWN_JS = """
function(_figure, view, drawn) {
    if (view && JSON.stringify(view) !== JSON.stringify(drawn)) {
        window.dash_clientside.set_props("view-drawn", {data: view});
    }
    return window.dash_clientside.no_update;
}
"""
"""The view the chart has drawn, into ``view-drawn`` (a tick or new aids leave it be), set
with ``set_props``: that output belongs to `FIRST_DRAW_JS`. Dash holds a callback whose
input some pending callback's outputs lead to, through any chain of callbacks, so while the
chart's figure is on its way the sections' reads wait for it."""

FIRST_DRAW_JS = """
function(_figure, view) {
    const triggered = window.dash_clientside.callback_context.triggered || [];
    if (triggered.some(t => t.prop_id !== '.')) { return window.dash_clientside.no_update; }
    const started = performance.now();
    return new Promise(resolve => {
        const check = () => {
            const chart = document.querySelector('#overlay .js-plotly-plot');
            if ((chart && chart._fullLayout) || performance.now() - started > 5000) {
                resolve(view);
            } else {
                setTimeout(check, 30);
            }
        };
        check();
    });
}
"""
"""On a page load, ``view-drawn`` again once plotly has drawn the chart's first figure (or
after 5 s): the sections below read only then, as their inputs wait for this callback, so
the chart is drawn first rather than after every section's answer. Later figures pass
through (`VIEW_DRAWN_JS` follows them)."""


def register(app: dash.Dash, data: RunReads) -> None:
    run_layers.register(app, data)
    run_spikes.register(app, data)
    run_transitions.register(app, data)
    run_attribution.register(app, data)
    run_aids.register(app, data)
    run_control.register(app, data)
    run_series.register(app, data)
    run_download.register(app)
    run_live.register(app)
    run_note.register(app, data)
    run_panels.register(app, data)

    @app.callback(
        Output("view", "data"),
        Input("left-metric", "value"),
        Input("right-metric", "value"),
        Input("log-scale", "value"),
        Input("overlay-zoom", "data"),
        Input("reset-range", "n_clicks"),
        Input("event-click", "data"),
        Input("add-series", "value"),
        Input("chart-options", "value"),
        Input("smoothing", "value"),
        Input("x-axis", "value"),
        Input("normalize", "value"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_controls(
        left: object,
        right: object,
        log: object,
        relayout: object,
        _reset: object,
        event_click: object,
        extra: object,
        options: object,
        smooth: object,
        x: object,
        norm: object,
        store: object,
    ) -> dict[str, Any]:
        trigger = triggered_id()
        zooms: list[int] = []
        if trigger == "event-click":  # the event's button (`update_view`'s event-zoom)
            trigger, clicked = clicked_row(event_click)
            zooms = [1 if clicked else 0]
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
            trigger=trigger,
            extra=extra,
            options=options,
            smooth=smooth,
            x=x,
            norm=norm,
        )
        return or_prevent(new).to_store()

    @app.callback(
        Output("overlay", "figure"),
        Output("overlay-shape", "data"),
        Output("range-info", "children"),
        Output("event-list", "children"),
        Input("view", "data"),
        Input("draw-tick", "data"),
        Input("overlay-aids", "data"),
        State("overlay-shape", "data"),
        prevent_initial_call=True,  # the page's layout drew the first figure
    )
    async def on_draw(store: object, _tick: object, aids: object, shape: object) -> Drawn:
        view = RunView.from_store(store)
        # A redraw the tick asked for: `draw` patches the data of a chart of the same shape.
        trigger = "tick" if triggered_id() == "draw-tick" else triggered_id()
        return await in_thread(draw, data, viewer(), view, shape, trigger=trigger, aids=aids)

    app.clientside_callback(
        FIRST_DRAW_JS,
        Output("view-drawn", "data"),
        Input("overlay", "figure"),
        State("view", "data"),
    )
    # Once drawn, a changed view moves the sections below (`VIEW_DRAWN_JS`).
    app.clientside_callback(
        VIEW_DRAWN_JS,
        Output("view-drawn-sync", "children"),
        Input("overlay", "figure"),
        State("view", "data"),
        State("view-drawn", "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("left-metric", "options"),
        Output("right-metric", "options"),
        Output("run-last-step", "children"),
        Output("left-metric", "value"),
        Output("right-metric", "value"),
        Output("draw-tick", "data"),
        Output("ticks-seen", "data"),
        # The sections listen to these stores, not to the tick: a tick that asked for
        # nothing would otherwise supersede (and so drop) a read still on its way.
        Output("aids-tick", "data"),
        Output("transitions-tick", "data"),
        Output("attribution-tick", "data"),
        Output("layers-grid-tick", "data"),
        Output("layers-profile-tick", "data"),
        Output("spikes-tick", "data"),
        Output("tick", "interval"),
        Output("x-axis", "options"),
        Output("run-state", "children"),
        Output("run-config", "children"),
        Output("run-note", "children"),
        Input("tick", "n_intervals"),
        Input("live-poke", "data"),
        State("view", "data"),
        State("layers-pin", "data"),
        State("ticks-seen", "data"),
        prevent_initial_call=True,
    )
    async def on_tick(
        n: object, poke: object, store: object, pin: object, seen: object
    ) -> tuple[Any, ...]:
        view = RunView.from_store(store)
        pinned = run_layers.pinned_of(pin)
        return await in_thread(tick, data, viewer(), view, n, pinned, seen, poke)

    # The events' zoom buttons reach the view through a click store, filled only by a real
    # click: on their own n_clicks, the view's callback ran each time the list was redrawn.
    app.clientside_callback(
        ROW_CLICK_JS,
        Output("event-click", "data"),
        Input({"type": "event-zoom", "step": ALL}, "n_clicks"),
    )
    app.clientside_callback(URL_SYNC_JS, Output("url-sync", "children"), Input("view", "data"))
    app.clientside_callback(
        ZOOM_JS, Output("overlay-zoom", "data"), Input("overlay", "relayoutData")
    )
