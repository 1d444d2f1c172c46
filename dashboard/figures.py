"""Pure figure builders: data in, a Plotly figure out. No I/O here.

The run page's charts are redrawn every few seconds for every open page, so their builders
return plain figure dicts (``{"data": [...], "layout": {...}}``, what ``dcc.Graph`` takes):
``plotly.graph_objects`` validates every value and deep-copies the template on each figure,
which cost the chart about 40 ms of a worker's CPU a redraw; plotly.js validates in the
browser anyway. The template, plotly's ``plotly_white``, is turned into its JSON form once.

Every text in a figure that a trainer chose (metric names, event text and kind, alert labels,
rule names) goes through :func:`plot_text` inside these builders, and hovertemplates are
constant strings that take such text from ``text`` or ``meta``: Plotly renders a subset of
HTML in figure text, and a metric name must not bring links or styles into a chart.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
import plotly.io as pio

GRAD_RED = "#d62728"
PARAM_BLUE = "#1f77b4"
EVENT_GREY = "#555555"
FIRING_RED = "#c0392b"
RESOLVED_GREEN = "#2ca02c"
DOWNSAMPLED = " (downsampled, spikes kept)"
"""What a line's name says when it shows fewer points than the range holds: each pixel's
first, last, lowest and highest point (M4), so no spike is lost."""

WHITE_TEMPLATE: dict[str, Any] = pio.templates["plotly_white"].to_plotly_json()
"""plotly_white as plotly.js takes it, built once."""

Figure = dict[str, Any]
"""A figure as ``dcc.Graph`` takes it: ``{"data": [traces], "layout": {...}}``."""

_PLOT_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def typed_array(values: npt.ArrayLike) -> dict[str, str]:
    """``values`` as a plotly.js typed array: float32, base64, with its shape when 2-D.

    Plotly draws them as it does lists of numbers (NaN where a list had null: a gap), but a
    browser decodes them in one step where JSON numbers are parsed one at a time, and the
    server writes them with no walk over Python lists. Read them back with `from_typed`.

    >>> typed_array([[1.0, float("nan")], [0.5, 2.0]])["shape"]
    '2, 2'
    """
    array = np.ascontiguousarray(values, dtype="<f4")
    spec = {"dtype": "f4", "bdata": base64.b64encode(array.tobytes()).decode("ascii")}
    if array.ndim > 1:
        spec["shape"] = ", ".join(str(n) for n in array.shape)
    return spec


def from_typed(spec: Any) -> npt.NDArray[np.float32]:
    """The array a `typed_array` spec holds.

    >>> from_typed(typed_array([[1.0, 2.0]])).tolist()
    [[1.0, 2.0]]
    """
    array = np.frombuffer(base64.b64decode(spec["bdata"]), dtype="<" + spec["dtype"])
    shape = spec.get("shape")
    return array.reshape([int(n) for n in shape.split(",")]) if shape else array


def plot_text(text: str) -> str:
    """``text`` escaped for Plotly's pseudo-HTML, so that a chart shows it as written.

    Plotly renders a subset of HTML in every text of a figure (``<a href=...>``,
    ``<span style=...>``, ``<b>``, ``<br>``, ``<sup>``...) and decodes character entities when
    it draws. This turns ``&`` into ``&amp;``, ``<`` into ``&lt;`` and ``>`` into ``&gt;``
    (no tag can open, and an entity already in the text stays as written), and ``%{`` into
    ``&#37;{`` (no ``%{variable}`` of a hovertemplate can form, should the text land in one).
    Nothing else changes; drawn, the result reads exactly as ``text``.

    >>> plot_text('<a href="javascript:alert(1)">%{y}</a> &amp;')
    '&lt;a href="javascript:alert(1)"&gt;&#37;{y}&lt;/a&gt; &amp;amp;'
    """
    return text.translate(_PLOT_ENTITIES).replace("%{", "&#37;{")


@dataclass(frozen=True)
class Line:
    """One metric's points as the chart draws them."""

    metric: str
    steps: Sequence[int]
    values: Sequence[float]
    downsampled: bool = False
    total_points: int = 0
    source: str | None = None
    """The stored alias drawn for ``metric`` (a canonical name the run logged otherwise)."""


@dataclass(frozen=True)
class Marker:
    """A labelled step: an event (config change, restart) drawn as a vertical line."""

    step: int
    label: str
    kind: str = "note"


@dataclass(frozen=True)
class AlertMark:
    """An alert's state change at a step, drawn as a triangle on the chart's top edge."""

    step: int
    state: str
    label: str
    metric: str = ""
    """The metric the rule fired on ("" for one of the whole run)."""


@dataclass(frozen=True)
class OverlayView:
    """What the overlay chart draws: ``left`` (red) and ``right`` (blue, on its own axis
    unless ``one_axis``), and ``extra`` lines on the left axis in `EXTRA_COLORS`."""

    left: Line | None
    right: Line | None
    events: Sequence[Marker] = field(default_factory=tuple)
    log_y: bool = False
    x_range: tuple[int, int] | None = None
    uirevision: str = "overlay"
    alerts: Sequence[AlertMark] = field(default_factory=tuple)
    height: int = 480
    extra: Sequence[Line] = field(default_factory=tuple)
    one_axis: bool = False
    raw: Mapping[str, Line] = field(default_factory=dict)
    """Lines drawn faint behind those of the same metric: the raw points of smoothed lines."""
    y_ranges: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)
    """The left and right y axes' ranges (log10 on a log axis); None: fitted to the data."""
    y_title: str | None = None
    """The y axis's title in place of the metrics' names (a normalized chart's: "÷ ...")."""


EXTRA_COLORS = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
"""The extra series' colours, in turn: none of them the left's red or the right's blue."""


@dataclass(frozen=True)
class SeriesStyle:
    """How the overlay chart draws one line: its colour and its y axis (``y`` or ``y2``)."""

    line: Line
    color: str
    axis: str


def series_styles(view: OverlayView) -> list[SeriesStyle]:
    """The lines of ``view`` in drawing order (left, right, extras), each with its colour
    and axis: the right on ``y2`` unless ``one_axis``, every other line on ``y``."""
    right_axis = "y" if view.one_axis else "y2"
    styled = [
        SeriesStyle(line, color, axis)
        for line, color, axis in ((view.left, GRAD_RED, "y"), (view.right, PARAM_BLUE, right_axis))
        if line is not None
    ]
    styled += [
        SeriesStyle(line, EXTRA_COLORS[i % len(EXTRA_COLORS)], "y")
        for i, line in enumerate(view.extra)
    ]
    return styled


def _finite(line: Line) -> tuple[list[int], list[float | None]]:
    """Plotly draws None as a gap: non-finite values become gaps on the line."""
    ys: list[float | None] = [v if math.isfinite(v) else None for v in line.values]
    return list(line.steps), ys


def _non_finite(line: Line) -> list[tuple[int, str]]:
    return [
        (s, "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf"))
        for s, v in zip(line.steps, line.values, strict=True)
        if not math.isfinite(v)
    ]


def overlay_figure(view: OverlayView) -> Figure:
    """Total grad norm (red, left axis) against a parameter norm (blue, right axis).

    Events are dashed vertical lines labelled at the top. Non-finite values break the
    line and are flagged with an ✕ marker on the top edge, so a NaN is never invisible.
    Alerts are triangles on the top edge: red where a rule fired, green where it resolved.
    The metric traces come first (left ``y``, then right ``y2``, then the extra lines on
    ``y``; with ``one_axis`` all on ``y``), markers after them.
    """
    traces: list[dict[str, Any]] = []
    axis_type = "log" if view.log_y else "linear"
    styles = series_styles(view)
    for style in styles:
        line, color, axis = style.line, style.color, style.axis
        raw = view.raw.get(line.metric)
        if raw is not None:
            raw_xs, raw_ys = _finite(raw)
            traces.append(
                {
                    "type": "scatter",
                    "x": raw_xs,
                    "y": raw_ys,
                    "name": plot_text(line.metric) + " (raw)",
                    "mode": "lines",
                    "line": {"color": color, "width": 1},
                    "opacity": RAW_OPACITY,
                    "yaxis": axis,
                    "connectgaps": False,
                    "showlegend": False,
                    "hoverinfo": "skip",
                }
            )
        xs, ys = _finite(line)
        suffix = DOWNSAMPLED if line.downsampled else ""
        traces.append(
            {
                "type": "scatter",
                "x": xs,
                "y": ys,
                "name": plot_text(line.metric)
                + (f" ({plot_text(line.source)})" if line.source else "")
                + suffix,
                "meta": plot_text(line.metric),
                "mode": "lines",
                "line": {"color": color, "width": 1.5},
                "yaxis": axis,
                "connectgaps": False,
                "hovertemplate": "step %{x}<br>%{y:.6g}<extra>%{meta}</extra>",
            }
        )
    flagged = [
        (s, label, style.line.metric) for style in styles for s, label in _non_finite(style.line)
    ]
    if flagged:
        traces.append(
            {
                "type": "scatter",
                "x": [s for s, _, _ in flagged],
                "y": [1.0] * len(flagged),
                "yaxis": "y3",
                "mode": "markers",
                "marker": {"symbol": "x", "color": "black", "size": 9},
                "name": "non-finite",
                "text": [f"{plot_text(metric)}: {label}" for _, label, metric in flagged],
                "hovertemplate": "step %{x}<br>%{text}<extra></extra>",
            }
        )
    for state, color, y in (("firing", FIRING_RED, 1.0), ("resolved", RESOLVED_GREEN, 0.97)):
        marks = [a for a in view.alerts if a.state == state]
        if marks:
            traces.append(
                {
                    "type": "scatter",
                    "x": [a.step for a in marks],
                    "y": [y] * len(marks),
                    "yaxis": "y3",
                    "mode": "markers",
                    "marker": {"symbol": "triangle-down", "color": color, "size": 12},
                    "name": f"alert {state}",
                    "text": [plot_text(a.label) for a in marks],
                    "hovertemplate": f"step %{{x}}<br>%{{text}}<extra>{state}</extra>",
                }
            )
    shapes = []
    annotations = []
    extent = _extent(style.line for style in styles)
    shown = view.x_range if view.x_range is not None else extent
    for ev in view.events:
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": ev.step,
                "x1": ev.step,
                "y0": 0,
                "y1": 1,
                "line": {"color": EVENT_GREY, "width": 1.2, "dash": "dash"},
                "name": f"event:{plot_text(ev.kind)}",
            }
        )
        annotations.append(
            {
                "x": ev.step,
                "y": 1.0,
                "xref": "x",
                "yref": "paper",
                "yanchor": "bottom",
                "xanchor": edge_anchor(ev.step, shown),
                "text": f"{plot_text(ev.label)} ({ev.step:,})",
                "showarrow": False,
                "font": {"size": 11, "color": EVENT_GREY},
            }
        )
    left_title = plot_text(view.left.metric) if view.left else ""
    right_title = plot_text(view.right.metric) if view.right else ""
    left_color = GRAD_RED
    if view.one_axis and view.right is not None:
        # One axis for both: its title names both, in neither's colour.
        left_title = " · ".join(t for t in (left_title, right_title) if t)
        right_title, left_color = "", EVENT_GREY
    if view.y_title is not None:
        left_title, left_color, right_title = plot_text(view.y_title), EVENT_GREY, ""
    xaxis: dict[str, object] = {"title": {"text": "step"}, "showgrid": True}
    if view.x_range is not None:
        xaxis["range"] = list(view.x_range)
    elif extent is not None:
        # The data's own ends: autorange pads past them (the markers on the top edge
        # widen the pad), and a run of 0-95k drew from -11k.
        xaxis["range"], xaxis["autorange"] = list(extent), False
    else:
        # Said outright: with the same uirevision, Plotly keeps a range drawn before.
        xaxis["autorange"] = True
    left_range, right_range = view.y_ranges
    layout = {
        "uirevision": view.uirevision,
        "template": WHITE_TEMPLATE,
        "margin": {"l": 70, "r": 80, "t": 50, "b": 50},
        "height": view.height,
        "hovermode": "x unified",
        "legend": {
            "orientation": "h",
            "x": 0,
            "y": -0.18,
            # The colour rule of this chart, said where the names are: red is the left axis
            # and blue the right one (no compared run is drawn in either).
            "title": {"text": _legend_title(view)},
        },
        "xaxis": xaxis,
        "yaxis": {
            "title": {"text": left_title, "font": {"color": left_color}},
            "tickfont": {"color": left_color},
            "type": axis_type,
            **_y_range(left_range),
            **log_ticks(view.log_y, _drawn_on("y", styles, view)),
        },
        "yaxis2": {
            "title": {"text": right_title, "font": {"color": PARAM_BLUE}},
            "tickfont": {"color": PARAM_BLUE},
            "overlaying": "y",
            "side": "right",
            "type": axis_type,
            # Ticks of its own, at round values: an overlaying axis otherwise takes the
            # positions of the left axis's grid (plotly.js's "sync"), at values like 339.82.
            "tickmode": "auto",
            "showgrid": False,
            **_y_range(right_range),
            **log_ticks(view.log_y, _drawn_on("y2", styles, view)),
            **({"visible": False} if view.one_axis else {}),
        },
        "yaxis3": {"overlaying": "y", "range": [0, 1.05], "visible": False, "fixedrange": True},
        "shapes": shapes,
        "annotations": annotations,
    }
    return {"data": traces, "layout": layout}


EDGE = 0.12
"""How near either end of the x range (a fraction of it) a label starts to lean inward."""


def edge_anchor(x: float, shown: tuple[float, float] | None) -> str:
    """Where a label over the chart at ``x`` hangs from it: centred, but starting at ``x``
    near the left end of the range ``shown`` and ending there near the right end, so that
    the label of an event at step 0 reads whole instead of running off the chart's edge.

    >>> edge_anchor(0, (0, 1000)), edge_anchor(500, (0, 1000)), edge_anchor(990, (0, 1000))
    ('left', 'center', 'right')
    """
    if shown is None or shown[1] <= shown[0]:
        return "left"
    at = (x - shown[0]) / (shown[1] - shown[0])
    return "left" if at < EDGE else "right" if at > 1 - EDGE else "center"


def _legend_title(view: OverlayView) -> str:
    if view.y_title is not None or (view.one_axis and view.right is not None):
        return "one axis:"
    if view.right is None:
        return "left axis:"
    return "red: left axis · blue: right axis ·"


RAW_OPACITY = 0.25
"""How strongly a smoothed line's raw points show behind it."""


def _drawn_on(axis: str, styles: Sequence[SeriesStyle], view: OverlayView) -> list[Line]:
    """The lines on ``axis``, with the raw lines drawn faint behind them."""
    on = [style.line for style in styles if style.axis == axis]
    return on + [view.raw[line.metric] for line in on if line.metric in view.raw]


def _extent(lines: Iterable[Line]) -> tuple[int, int] | None:
    """The first and last step of any of ``lines``; None when they have no point."""
    ends = [(line.steps[0], line.steps[-1]) for line in lines if len(line.steps)]
    if not ends:
        return None
    return min(first for first, _ in ends), max(last for _, last in ends)


def _y_range(shown: tuple[float, float] | None) -> dict[str, object]:
    return {} if shown is None else {"range": list(shown), "autorange": False}


def log_ticks(log: bool, lines: Iterable[Line]) -> dict[str, object]:
    """A log axis that reads. Across a decade or more: a labelled tick at each power of ten
    (``0.001``, ``1``, ``1000``, ``1e+06``) and unlabelled minor grid lines at 2-9 times it.
    Within a decade: ticks at round values a linear step apart (``0.4, 0.6, 0.8, 1, 1.2``).
    plotly.js's own choice labels its ticks with their first digit alone (``5, 2, 100, 5,
    2, 10``; ``3, 4, 5, 1, 2``)."""
    if not log:
        return {}
    return log_ticks_of([v for line in lines for v in line.values])


def log_ticks_of(drawn: Iterable[float | None]) -> dict[str, object]:
    """`log_ticks` for a log axis that draws the values ``drawn`` (None: a gap)."""
    values = np.array([v for v in drawn if v is not None], dtype=np.float64)
    values = values[np.isfinite(values) & (values > 0)]
    if len(values) == 0:
        return {}
    low, high = float(values.min()), float(values.max())
    if np.log10(high / low) >= 1.0:
        return {
            "dtick": 1,
            "tickformat": "~g",
            "minor": {"dtick": "D1", "showgrid": True, "gridcolor": "#f2f2f2"},
        }
    rough = (high - low) / 5 or high / 5
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    return {"dtick": f"L{step:.6g}", "tick0": 0, "tickformat": "~g"}


def empty_figure(message: str) -> Figure:
    layout = {
        "template": WHITE_TEMPLATE,
        "height": 480,
        "xaxis": {"visible": False},
        "yaxis": {"visible": False},
        "annotations": [
            {
                "text": plot_text(message),
                "showarrow": False,
                "font": {"size": 16},
                "x": 0.5,
                "y": 0.5,
                "xref": "paper",
                "yref": "paper",
            }
        ],
    }
    return {"data": [], "layout": layout}


def depth_figure(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    family: str,
    step: int | None,
    log_y: bool = False,
) -> go.Figure:
    """Latest per-layer norms against depth: the U across depth at a glance.

    The labels are drawn as category ticks, so they are escaped like any text of a chart.
    """
    fig = go.Figure(
        go.Bar(
            x=[plot_text(label) for label in labels],
            y=[v if math.isfinite(v) else None for v in values],
            marker={"color": GRAD_RED if family.startswith("grad") else PARAM_BLUE},
            hovertemplate="%{x}<br>%{y:.6g}<extra></extra>",
            name=plot_text(family),
        )
    )
    at = f" at step {step:,}" if step is not None else ""
    fig.update_layout(
        template="plotly_white",
        height=320,
        margin={"l": 70, "r": 30, "t": 40, "b": 80},
        title={"text": f"{plot_text(family)} by depth{at}", "font": {"size": 14}},
        xaxis={"title": {"text": "depth (embedding → lm_head)"}, "tickangle": -45},
        yaxis={"type": "log" if log_y else "linear"},
        uirevision=family,
    )
    return fig


RUN_COLORS = (
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
"""One colour a compared run (or group of runs), in turn: plotly's palette without its
red and blue, which mean the left and right axis on a run's page (`GRAD_RED`,
`PARAM_BLUE`), so that no colour means one thing on one page and another on the next."""


def run_color(index: int) -> str:
    """The colour of the ``index``-th compared run (the palette starts over after eight)."""
    return RUN_COLORS[index % len(RUN_COLORS)]
