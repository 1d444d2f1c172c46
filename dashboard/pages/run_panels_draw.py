"""The run page's metric panels drawn: which panels a call draws, what it reads for them,
and their figures.

A panel is drawn only once the browser says it is in (or near) view (`.run_panels`'s
observer fills the ``panels-seen`` store), so a run of 300 metrics reads only the few on
screen when its page loads. A drawn panel remembers what it was drawn for (the view and
the run's data the live tick saw, `drawn_for`): when either changes, the panels in view
are drawn again at once, and the others when they next come into view.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import dash
from dash import dcc

from normwatch.server.analytics.derived import is_derived
from normwatch.server.auth import Principal
from normwatch.server.services.unknown_names import patterns_of

from ..figures import Figure, Line, empty_figure
from ..graph_config import PANEL_GRAPH_CONFIG
from ..panel_figure import PANEL_HEIGHT, PANEL_POINTS, PanelSeries, panel_figure, smoothed_series
from ..refusals import NO_SUCH_RUN, Refusal, RunNotFound, UnknownMetrics, said
from . import run_shaping
from .run_view import RunView

__all__ = ["MAX_DRAWN", "PanelReads", "draw_panels", "drawn_for", "panel_figures"]

MAX_DRAWN = 60
"""The most panels one call draws: a crafted ``panels-seen`` store reads no more."""


class PanelReads(run_shaping.AxisReads, Protocol):
    """What drawing the panels reads (`RunNotFound` outside the viewer's project)."""


def drawn_for(view: RunView, seen: object) -> str:
    """What a panel was drawn for: the view, and the version of the run's data the page's
    tick last drew the overlay for (``ticks-seen``'s ``draw``, `.run_tick.data_version`):
    a tick that found nothing new redraws no panel."""
    version = seen.get("draw") if isinstance(seen, Mapping) else None
    return json.dumps([view.to_store(), version if isinstance(version, int) else None])


def draw_panels(
    data: PanelReads,
    who: Principal,
    view: RunView | None,
    ids: object,
    seen: object,
    drawn: object,
    ticks: object = None,
) -> tuple[list[Any], dict[str, str]] | None:
    """The panels' new bodies (``no_update`` for each not drawn now) and the new
    ``panels-drawn`` store; None when no panel is due.

    ``ids`` are the panel bodies' pattern ids in page order, ``seen`` the keys the browser
    says are in or near view, ``drawn`` what each panel was last drawn for, ``ticks`` the
    page's ``ticks-seen`` store. Due: the panels in view not drawn for this view and this
    version of the run's data (`drawn_for`), at most `MAX_DRAWN`.
    """
    if view is None or not isinstance(ids, list):
        return None
    keys = [i.get("key") if isinstance(i, Mapping) else None for i in ids]
    visible = {k for k in seen if isinstance(k, str)} if isinstance(seen, list) else set()
    before = {}
    if isinstance(drawn, dict):
        before = {k: v for k, v in drawn.items() if isinstance(v, str)}
    now = drawn_for(view, ticks)
    due = [k for k in keys if isinstance(k, str) and k in visible and before.get(k) != now]
    due = due[:MAX_DRAWN]
    if not due:
        return None
    figures = panel_figures(data, who, view, due)
    bodies = [_graph(k, figures[k]) if k in figures else dash.no_update for k in keys]
    return bodies, {**before, **dict.fromkeys(due, now)}


def _graph(key: str, figure: Figure) -> dcc.Graph:
    return dcc.Graph(
        id={"type": "panel-graph", "key": key},
        figure=figure,
        config=PANEL_GRAPH_CONFIG,
        style={"height": f"{PANEL_HEIGHT}px"},
    )


def panel_figures(
    data: PanelReads, who: Principal, view: RunView, keys: Sequence[str]
) -> dict[str, Figure]:
    """Each panel's figure for ``view``: its line read through the chart reads (spikes
    kept, `PANEL_POINTS` points), smoothed, on a log axis and by tokens or time as the view
    says; a panel that cannot be read says why."""
    try:
        lines, errors = _read(data, who, view, keys)
        axis = None if view.x == "step" else run_shaping.x_axis(data, who, view)
    except RunNotFound:
        return {k: _message(NO_SUCH_RUN) for k in keys}
    figures = {}
    for key in keys:
        if key in errors:
            figures[key] = _message(f"{key}: {errors[key]}")
            continue
        line = lines.get(key, Line(key, [], []))
        series = smoothed_series(PanelSeries(line), view.smooth)
        fig = panel_figure(
            key,
            [series],
            log_y=view.log,
            x_range=view.x_range,
            uirevision=f"{view.run}|{key}|{view.log}|{view.x}",
        )
        figures[key] = fig if axis is None else axis.apply(fig)
    return figures


def _read(
    data: PanelReads, who: Principal, view: RunView, keys: Sequence[str]
) -> tuple[dict[str, Line], dict[str, str]]:
    """The lines of ``keys`` (metric names in one read, each expression in its own, so
    that one the service refuses leaves the others), and why each that was not read."""
    lines: dict[str, Line] = {}
    errors: dict[str, str] = {}
    names = [k for k in keys if not is_derived(k)]
    reads = [names] if names else []
    reads += [[k] for k in keys if is_derived(k)]
    for metrics in reads:
        try:
            lines |= _lines(data, who, view, metrics)
        except RunNotFound:
            raise
        except UnknownMetrics as exc:
            missing = set(exc.unknown)
            rest = [m for m in metrics if missing.isdisjoint(patterns_of([m]))]
            errors |= dict.fromkeys([m for m in metrics if m not in rest], said(exc))
            if rest:
                lines |= _lines(data, who, view, rest)
        except Refusal as exc:
            errors |= dict.fromkeys(metrics, said(exc))
    return lines, errors


def _lines(data: PanelReads, who: Principal, view: RunView, metrics: list[str]) -> dict[str, Line]:
    return data.lines(who, view.run, metrics, start=view.start, end=view.end, points=PANEL_POINTS)


def _message(text: str) -> Figure:
    fig = empty_figure(text)
    fig["layout"]["height"] = PANEL_HEIGHT
    fig["layout"]["annotations"][0]["font"] = {"size": 11}
    return fig
