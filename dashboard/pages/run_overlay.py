"""The run page's overlay chart: what it draws for a view, and the texts beside it. Pure.

A redraw every second sends either the whole figure or, when nothing but the data
changed, a patch of the traces' points, so that the browser keeps the user's zoom and
hover (see :func:`chart_shape`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import dash
import numpy as np
from dash import html

from ..figures import (
    DOWNSAMPLED,
    AlertMark,
    Figure,
    Line,
    Marker,
    OverlayView,
    empty_figure,
    overlay_figure,
)
from ..overlay_aids import Aids, with_aids
from ..transforms import ema, normalize, outlier_range
from .run_view import RunView

__all__ = [
    "NO_EVENTS",
    "NO_METRICS",
    "POINTS",
    "chart_shape",
    "data_patch",
    "event_list",
    "overlay_for",
    "range_text",
    "view_figure",
]

POINTS = 1000
"""Points a metric the chart asks for: about its width in pixels."""
NO_METRICS = "This run has no metrics yet."
NO_EVENTS = "No events. Trainers post them with run.event(...)."


def overlay_for(
    view: RunView,
    lines: Mapping[str, Line],
    markers: Sequence[Marker],
    alerts: Sequence[AlertMark],
) -> OverlayView | None:
    """What the overlay chart draws for ``view`` from the lines read for its metrics;
    None when the view names no metric (the run has none yet)."""
    if not view.metrics:
        return None
    charted = (view.left, view.right)
    if view.norm is not None:
        lines = {name: normalized(line, view.norm) for name, line in lines.items()}
    raw = dict(lines) if view.smooth else {}
    if view.smooth:
        lines = {name: smoothed(line, view.smooth) for name, line in lines.items()}
    left = lines.get(view.left) if view.left else None
    right = lines.get(view.right) if view.right else None
    extra = tuple(lines[m] for m in view.extra if m in lines and m not in charted)
    one_axis = view.one_axis or view.norm is not None
    ranges: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)
    if view.robust:
        on_left = [left, *extra, *([right] if one_axis else [])]
        ranges = (
            outlier_range([line.values for line in on_left if line is not None], log=view.log),
            None if one_axis or right is None else outlier_range([right.values], log=view.log),
        )
    return OverlayView(
        left=left,
        right=right,
        events=markers,
        log_y=view.log,
        x_range=view.x_range,
        # Plotly keeps the user's zoom until this changes: a new run, metric, scale or axes.
        uirevision=f"{view.run}|{view.left}|{view.right}|{view.log}"
        + ("|one" if view.one_axis else "")
        + ("" if view.x == "step" else f"|x={view.x}")
        + ("" if view.norm is None else f"|norm={view.norm}")
        + ("|robust" if view.robust else ""),
        alerts=alerts,
        extra=extra,
        one_axis=one_axis,
        raw=raw,
        y_ranges=ranges,
        y_title=NORMALIZED_TITLES.get(view.norm or ""),
    )


NORMALIZED_TITLES = {
    "median": "each series ÷ its median over the view",
    "start": "each series ÷ its first value in the view",
}
"""The y axis's title in normalize mode: what every series was divided by."""


def normalized(line: Line, mode: str) -> Line:
    """``line`` divided by its value at the start of the view or its median over it
    (`.transforms.normalize`); all gaps where it has nothing to divide by."""
    values = normalize(line.values, mode)
    if values is None:
        values = np.full(len(line.values), np.nan)
    return replace(line, values=values.tolist())


def smoothed(line: Line, weight: float) -> Line:
    """``line`` smoothed with `.transforms.ema` at ``weight``."""
    return replace(line, values=ema(line.steps, line.values, weight).tolist())


def view_figure(overlay: OverlayView | None, aids: Aids | None = None) -> Figure:
    """The chart of ``overlay``, with ``aids`` drawn over its lines."""
    if overlay is None:
        return empty_figure(NO_METRICS)
    fig = overlay_figure(overlay)
    return fig if aids is None else with_aids(fig, overlay, aids)


def chart_shape(fig: Figure, markers: Sequence[Marker], alerts: Sequence[AlertMark]) -> list[str]:
    """What a data patch cannot change: the traces (name and axis), events and alerts.

    The layout's ``uirevision`` names the run, metrics, scale, axes, x axis and normalize
    mode, and the x axis's title its units: a tick's patch drawn for a view that changed
    them since (the view's own redraw superseded by the tick's) must not keep the old ones.

    >>> chart_shape({"data": [{"name": "a", "yaxis": "y"}], "layout": {}}, [Marker(5, "x")], [])
    ['a|y', 'event@5', 'layout:None|None']
    >>> chart_shape({"data": [], "layout": {}}, [], [])
    []
    """
    layout = fig.get("layout", {})
    title = layout.get("xaxis", {}).get("title", {}).get("text")
    return (
        [f"{t.get('name')}|{t.get('yaxis')}" for t in fig["data"]]
        + [f"event@{m.step}" for m in markers]
        + [f"alert:{a.state}@{a.step}" for a in alerts]
        + ([f"layout:{layout.get('uirevision')}|{title}"] if fig["data"] else [])
    )


def data_patch(fig: Figure) -> dash.Patch:
    """A patch that gives the drawn figure ``fig``'s points, event lines and labels."""
    patch = dash.Patch()
    for i, trace in enumerate(fig["data"]):
        patch["data"][i]["x"] = trace.get("x") or []
        patch["data"][i]["y"] = trace.get("y") or []
    shown = fig["layout"]["xaxis"].get("range")
    if shown is not None:
        # A chart that shows every step follows the run as it grows.
        patch["layout"]["xaxis"]["range"] = shown
    patch["layout"]["shapes"] = fig["layout"].get("shapes", [])
    patch["layout"]["annotations"] = fig["layout"].get("annotations", [])
    return patch


def range_text(overlay: OverlayView | None) -> str:
    """'grad/norm/total (downsampled, spikes kept): 4,000 points, steps 0–99,999 · ...', from
    the lines drawn.

    Read from the lines, not the figure, whose names are escaped for Plotly.
    """
    if overlay is None:
        return ""
    parts = []
    for line in (overlay.left, overlay.right, *overlay.extra):
        if line is not None and len(line.steps):
            name = line.metric + (DOWNSAMPLED if line.downsampled else "")
            parts.append(
                f"{name}: {len(line.steps):,} points, steps {line.steps[0]:,}–{line.steps[-1]:,}"
            )
    return " · ".join(parts)


def event_list(markers: Sequence[Marker]) -> Any:
    """The run's events, each with a button that zooms the chart on it."""
    if not markers:
        return html.P(NO_EVENTS, className="muted")
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
