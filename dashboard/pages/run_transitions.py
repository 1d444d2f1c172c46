"""The run page's transitions section: every event and every change of slope the server
finds in the charted metrics over the view's steps, largest slope change first.

Each row gives, per charted metric, the least-squares slope before and after the step (per
1,000 steps), their ratio and the level change there: the difference of the metric's local
levels either side of the step (`normwatch.server.services.transitions`). Clicking a row
zooms the chart around the step, as an event's zoom button does, and focuses it: the chart
then draws the two fitted lines, each over the points it was fitted on, with their numbers
(`.run_aids`), and the table is computed over the same window, so that both say the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from normwatch.server.analytics.transitions import Fit
from normwatch.server.auth import Principal
from normwatch.server.schemas import RunOut
from normwatch.server.services.transitions import Transitions

from ..numbers import number_text
from ..overlay_aids import level_change_text
from ..refusals import Refusal, RunNotFound, said
from ..session import viewer
from ..wiring import ROW_CLICK_JS, TriggerId, clicked_row, in_thread
from .run_aids import fit_window
from .run_view import RunView, event_window, is_step

__all__ = [
    "MAX_ROWS",
    "NO_METRICS",
    "NO_TRANSITIONS",
    "TRANSITION_ROW",
    "TransitionReads",
    "draw_transitions",
    "level_text",
    "register",
    "section",
    "transition_table",
    "zoom_to_transition",
]

TRANSITION_ROW = "transition-row"
MAX_ROWS = 20
NO_TRANSITIONS = "No events and no change of slope in these steps."
NO_METRICS = "Chart a metric to see how its slope changes."
TOO_FEW_TO_DETECT = "Too few steps shown to look for changes of trend (events only): zoom out."
HEADER = ["step", "source", "label", "metric", "slope per 1k steps", "ratio", "level change"]
_CELL = {"padding": ".2rem .5rem", "borderBottom": "1px solid #e4e6eb", "textAlign": "left"}
_ROW = {"cursor": "pointer"}
_FOCUSED = {**_ROW, "background": "#fff4d6"}


class TransitionReads(Protocol):
    """What the section reads (`RunNotFound` outside the viewer's project)."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...

    def transitions(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        start: int | None,
        end: int | None,
        window: int | None = None,
    ) -> Transitions: ...


def section() -> html.Div:
    return html.Div(
        [
            html.H3("Transitions"),
            html.P(
                "Events and detected changes of slope in the charted metrics over the steps "
                "shown, the largest change first; click one to zoom the chart to it and "
                "draw the lines fitted on either side.",
                className="muted",
            ),
            html.Div(id="transition-table", style={"maxHeight": "22rem", "overflowY": "auto"}),
            dcc.Store(id="transitions-tick"),
            dcc.Store(id="transition-click"),  # a real click on a row (`ROW_CLICK_JS`)
        ],
        className="transitions-section",
    )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def level_text(before: object, after: object) -> str:
    """The level change at the step, signed: the metric's local level after it less its
    local level before it (the server's `level_after - level_before`, measured next to the
    step, so that a curve that only bends there reads ≈ 0); '—' without both levels.

    >>> level_text(240.4, 240.42), level_text(1.0, 0.5), level_text(None, 2.0)
    ('+0.02', '-0.5', '—')
    """
    a, b = _number(before), _number(after)
    if a is None or b is None:
        return "—"
    return level_change_text(b - a)


def _slopes_text(fit: Fit) -> str:
    before, after = _number(fit.slope_before), _number(fit.slope_after)
    if before is None or after is None:
        return "—"
    return f"{number_text(before)} → {number_text(after)}"


def _ratio_text(fit: Fit) -> str:
    ratio = _number(fit.ratio)
    return "—" if ratio is None else f"×{number_text(ratio)}"


def _cell(content: Any, **props: Any) -> html.Td:
    return html.Td(content, style=_CELL, **props)


def _lines(texts: list[str], class_name: str | None = None) -> html.Td:
    """A cell with one line a metric."""
    return _cell([html.Div(t) for t in texts], className=class_name)


def transition_table(
    found: Transitions, metrics: Sequence[str], focus: int | None, limit: int = MAX_ROWS
) -> Any:
    """One clickable row per transition of ``found`` (the service's answer), in its order,
    at most ``limit``; a line per metric of ``metrics`` the transition has a fit for. The
    row at ``focus`` is highlighted."""
    rows = []
    listed = found.transitions
    for transition in listed[:limit]:
        step = transition.step
        fitted = transition.fits
        names = [m for m in metrics if m in fitted]
        levels = [level_text(fitted[m].level_before, fitted[m].level_after) for m in names]
        rows.append(
            html.Tr(
                [
                    _cell(f"{step:,}"),
                    _cell(transition.source),
                    _cell(transition.label),
                    _lines(names or ["—"], "metric"),
                    _lines([_slopes_text(fitted[m]) for m in names]),
                    _lines([_ratio_text(fitted[m]) for m in names]),
                    _lines(levels),
                ],
                id={"type": TRANSITION_ROW, "step": step},
                n_clicks=0,
                style=_FOCUSED if step == focus else _ROW,
                className="transition focused" if step == focus else "transition",
                title="zoom the chart to this step and draw the lines fitted either side",
            )
        )
    if not rows:
        if not found.detecting:
            return html.P(NO_TRANSITIONS + " " + TOO_FEW_TO_DETECT, className="muted")
        return html.P(NO_TRANSITIONS, className="muted")
    table = html.Table(
        [
            html.Thead(html.Tr([html.Th(h, style=_CELL) for h in HEADER])),
            html.Tbody(rows),
        ],
        className="transition-list",
        style={"borderCollapse": "collapse", "fontSize": ".88rem", "marginBottom": ".8rem"},
    )
    note = (
        f"Slopes fitted on {found.window:,} steps either side of each step; the level change "
        "compares the levels measured on the points nearest it."
    )
    if not found.detecting:
        note += " " + TOO_FEW_TO_DETECT
    more = len(listed) - limit
    tail = f" … and {more:,} more: zoom the chart in to list them." if more > 0 else ""
    return html.Div([table, html.P(note + tail, className="muted")])


def draw_transitions(data: TransitionReads, who: Principal, view: RunView | None) -> Any:
    """The table for the view's run, charted metrics and steps; while the view is zoomed
    around a focus, fitted on the window the chart's fitted lines use."""
    if view is None:
        return html.P("", className="muted")
    if not view.metrics:
        return html.P(NO_METRICS, className="muted")
    try:
        found = data.transitions(
            who, view.run, view.metrics, start=view.start, end=view.end, window=fit_window(view)
        )
    except RunNotFound:
        return html.P("", className="muted")
    except Refusal as exc:
        return html.P(said(exc), className="muted")
    return transition_table(found, view.metrics, view.focused)


def zoom_to_transition(
    data: TransitionReads,
    who: Principal,
    view: RunView | None,
    trigger: TriggerId,
    was_clicked: bool,
) -> RunView | None:
    """The view zoomed around the clicked transition's step (`event_window`, as an event's
    zoom button) and focused on it; None for no real click, a row id that is no
    transition's, or a view of no run of the viewer's project."""
    if view is None or not was_clicked or not isinstance(trigger, Mapping):
        return None
    step = trigger.get("step")
    if trigger.get("type") != TRANSITION_ROW or not is_step(step):
        return None
    try:
        run = data.run(who, view.run)
    except RunNotFound:
        return None
    start, end = event_window(step, run.last_step)
    return replace(view, start=start, end=end, focus=step)


def register(app: dash.Dash, data: TransitionReads) -> None:
    @app.callback(
        Output("transition-table", "children"),
        Input("view-drawn", "data"),
        Input("transitions-tick", "data"),
    )
    async def on_transitions(store: object, _n: object) -> Any:
        return await in_thread(draw_transitions, data, viewer(), RunView.from_store(store))

    app.clientside_callback(
        ROW_CLICK_JS,
        Output("transition-click", "data"),
        Input({"type": TRANSITION_ROW, "step": ALL}, "n_clicks"),
    )

    @app.callback(
        Output("view", "data", allow_duplicate=True),
        Input("transition-click", "data"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_row(click: object, store: object) -> Any:
        trigger, was_clicked = clicked_row(click)
        zoomed = await in_thread(
            zoom_to_transition, data, viewer(), RunView.from_store(store), trigger, was_clicked
        )
        if zoomed is None:
            raise PreventUpdate
        # A click's view is final: the sections read it beside the chart, not after it.
        dash.set_props("view-drawn", {"data": zoomed.to_store()})
        return zoomed.to_store()
