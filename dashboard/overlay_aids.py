"""What the overlay chart draws over its lines to help read them: alert thresholds, the
lines fitted before and after a transition, and the forecast. Pure.

Each aid is drawn in the colour and on the axis of the line it belongs to
(`.figures.series_styles`), as traces after the chart's own (so a tick's data patch, which
goes by trace index, keeps working) and annotations: the notes in paper coordinates (which
read the same on a log axis), each threshold's label in the margin right of the plot at the
line's height, where no data is drawn under it. Every text a trainer chose goes through
`.figures.plot_text`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .figures import Figure, OverlayView, SeriesStyle, plot_text, series_styles
from .forecast import Forecast, forecast_text, value_text
from .numbers import number_text, signed_text

__all__ = [
    "Aids",
    "FitLines",
    "Threshold",
    "continued",
    "label_shift",
    "fit_text",
    "level_change_text",
    "slope_text",
    "threshold_label",
    "with_aids",
]

Segment = tuple[tuple[float, float], tuple[float, float]]
"""A fitted line's two ends, ``((step, value), (step, value))``."""


@dataclass(frozen=True)
class Threshold:
    """An alert rule's value on one charted metric: drawn as a dotted horizontal line."""

    metric: str
    value: float
    rule: str
    kind: str = "threshold"


@dataclass(frozen=True)
class FitLines:
    """One metric's least-squares lines before and after the transition at ``at``, each
    over the steps it was fitted on; slopes per 1,000 steps, ``ratio`` after over before
    (None when the slope before is flat), and the level change at ``at``: the difference
    of the metric's local levels either side (`normwatch.server.analytics.levels`), not of
    the lines' values there."""

    metric: str
    at: int
    before: Segment
    after: Segment
    slope_before: float
    slope_after: float
    ratio: float | None
    level_change: float | None = None


@dataclass(frozen=True)
class Aids:
    thresholds: Sequence[Threshold] = field(default_factory=tuple)
    fits: Sequence[FitLines] = field(default_factory=tuple)
    forecast: Forecast | None = None


def slope_text(fit: FitLines) -> str:
    """'1.967 → 7.503 per 1k steps, ×3.81' (no ratio when the slope before is flat), the
    numbers as the dashboard writes them everywhere (`.numbers.number_text`).

    >>> slope_text(FitLines("m", 5, ((0, 0), (5, 1)), ((5, 1), (9, 4)), 1.967, 7.503, 3.81))
    '1.967 → 7.503 per 1k steps, ×3.81'
    """
    text = f"{number_text(fit.slope_before)} → {number_text(fit.slope_after)} per 1k steps"
    return text if fit.ratio is None else f"{text}, ×{number_text(fit.ratio)}"


def level_change_text(change: float) -> str:
    """A level change, signed (`.numbers.signed_text`).

    >>> level_change_text(0.02), level_change_text(-0.5), level_change_text(0.0)
    ('+0.02', '-0.5', '0')
    """
    return signed_text(change)


def fit_text(fit: FitLines) -> str:
    """The chart's note on a fit: its slopes (`slope_text`) and its level change.

    >>> fit_text(FitLines("m", 5, ((0, 0), (4, 1)), ((5, 1), (9, 4)), 2.0, 7.5, 3.75, -0.004))
    '2 → 7.5 per 1k steps, ×3.75, level change -0.004'
    """
    text = slope_text(fit)
    if fit.level_change is None:
        return text
    return f"{text}, level change {level_change_text(fit.level_change)}"


def _x_span(view: OverlayView, forecast: Forecast | None) -> tuple[float, float] | None:
    """The steps the chart shows: the view's range (else the lines' own), up to the
    forecast's end."""
    if view.x_range is not None:
        steps = list(view.x_range)
    else:
        steps = [s.line.steps[i] for s in series_styles(view) if len(s.line.steps) for i in (0, -1)]
    if forecast is not None and steps:
        steps.append(forecast.end)
    return (min(steps), max(steps)) if steps else None


def _threshold_trace(threshold: Threshold, style: SeriesStyle, span: tuple[float, float]) -> Any:
    label = plot_text(threshold.rule)
    return {
        "type": "scatter",
        "x": list(span),
        "y": [threshold.value, threshold.value],
        "yaxis": style.axis,
        "mode": "lines",
        "line": {"color": style.color, "width": 1.2, "dash": "dot"},
        "name": f"threshold {label} ({value_text(threshold.value)})",
        "meta": f"{label}: {plot_text(threshold.metric)} at {value_text(threshold.value)}",
        "hovertemplate": "%{meta}<extra></extra>",
        "showlegend": False,
    }


LABEL_CHARS = 24
"""The most characters of a rule's name written beside its threshold (the rest is '…'; the
line's hover has it whole)."""
LABEL_GAP = 6
"""Pixels between the plot's right edge and a threshold's label."""
PAST_RIGHT_AXIS = 84
"""Pixels a threshold's label keeps clear of the plot when the right axis's ticks and title
stand between them."""
CHAR_PX = 6.5
"""About the width of a character of the labels' 11 px type, for the margin they need."""


def threshold_label(threshold: Threshold, style: SeriesStyle, view: OverlayView) -> Any:
    """The rule's name beside its threshold line, in the margin right of the plot (where no
    data is drawn), at the line's height on its axis: past the right axis's ticks and title
    when that axis shows. None where the line cannot be drawn (a value of 0 or less on a
    log axis)."""
    if view.log_y and threshold.value <= 0:
        return None
    name = threshold.rule
    short = name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"
    return {
        "text": plot_text(short),
        "xref": "paper",
        "x": 1.0,
        "xanchor": "left",
        "xshift": label_shift(view),
        "yref": style.axis,
        # On a log axis an annotation's y is given as the power of ten.
        "y": math.log10(threshold.value) if view.log_y else threshold.value,
        "yanchor": "middle",
        "showarrow": False,
        "font": {"size": 11, "color": style.color},
    }


def label_shift(view: OverlayView) -> int:
    """How far right of the plot the thresholds' labels start, in pixels."""
    right_axis = view.right is not None and not view.one_axis and view.y_title is None
    return PAST_RIGHT_AXIS if right_axis else LABEL_GAP


def continued(fit: FitLines) -> Segment:
    """The line fitted before the step, carried on from its last point to the last point
    fitted after the step: where the metric would have gone had its slope not changed.

    >>> continued(FitLines("m", 10, ((0, 0.0), (10, 1.0)), ((10, 1.0), (20, 5.0)), 100, 400, 4))
    ((10, 1.0), (20, 2.0))
    """
    (last, level), end = fit.before[1], fit.after[1][0]
    return (last, level), (end, level + fit.slope_before * (end - last) / 1000)


def _fit_traces(fit: FitLines, style: SeriesStyle) -> list[Any]:
    name = plot_text(fit.metric)
    sides = (
        ("before", fit.before, "dash", 3),
        ("after", fit.after, "dash", 3),
        ("before, continued", continued(fit), "dot", 1.5),
    )
    return [
        {
            "type": "scatter",
            "x": [segment[0][0], segment[1][0]],
            "y": [segment[0][1], segment[1][1]],
            "yaxis": style.axis,
            "mode": "lines",
            "line": {"color": style.color, "width": width, "dash": dash},
            "opacity": 0.9,
            "name": f"fit {side}: {name}",
            "meta": f"{name}, fit {side} {fit.at:,}",
            "hovertemplate": "%{meta}: %{y:.6g} at %{x}<extra></extra>",
            "showlegend": False,
        }
        for side, segment, dash, width in sides
    ]


def _forecast_trace(found: Forecast, style: SeriesStyle) -> Any:
    return {
        "type": "scatter",
        "x": [found.first, found.end],
        "y": [found.value(found.first), found.value(found.end)],
        "yaxis": style.axis,
        "mode": "lines",
        "line": {"color": style.color, "width": 2, "dash": "dashdot"},
        "name": f"forecast: {plot_text(found.metric)}",
        "hovertemplate": "forecast<br>step %{x}<br>%{y:.6g}<extra></extra>",
    }


def _note(text: str, color: str, y: float, x: float = 0.01) -> dict[str, Any]:
    return {
        "text": text,
        "x": x,
        "y": y,
        "xref": "paper",
        "yref": "paper",
        "xanchor": "left" if x < 0.5 else "right",
        "yanchor": "top" if y > 0.5 else "bottom",
        "showarrow": False,
        "align": "left",
        "font": {"size": 12, "color": color},
        "bgcolor": "rgba(255,255,255,0.85)",
    }


def with_aids(fig: Figure, view: OverlayView, aids: Aids) -> Figure:
    """``fig`` (the overlay chart of ``view``) with ``aids`` drawn on it: each aid of a
    metric the chart draws, in that line's colour on its axis.

    - a **threshold**: a dotted horizontal line across the steps shown, the rule's name
      beside its right end in the margin, clear of the data (`threshold_label`);
    - a **fit**: the two dashed fitted lines, the one before carried on dotted past the
      step (where the metric was heading), and a note at the top with the slopes
      ('final_norm.weight: 2.0 → 7.5 per 1k steps, ×3.8');
    - the **forecast**: a dash-dot line from the first point fitted to its end (the
      range shown stretched to take it in), and a note at the bottom right saying when it
      reaches a threshold.
    """
    styles = {s.line.metric: s for s in series_styles(view)}
    span = _x_span(view, aids.forecast)
    traces: list[Any] = []
    notes: list[dict[str, Any]] = []
    if span is not None:
        drawn = [t for t in aids.thresholds if t.metric in styles]
        traces += [_threshold_trace(t, styles[t.metric], span) for t in drawn]
        labels = [threshold_label(t, styles[t.metric], view) for t in drawn]
        notes += [label for label in labels if label is not None]
        if drawn:
            # The right margin widens to hold the longest label.
            widest = max(min(len(t.rule), LABEL_CHARS) for t in drawn)
            margin = fig["layout"].setdefault("margin", {})
            need = label_shift(view) + LABEL_GAP + round(CHAR_PX * widest)
            margin["r"] = max(int(margin.get("r", 0)), need)
    fits = [f for f in aids.fits if f.metric in styles]
    for i, fit in enumerate(fits):
        style = styles[fit.metric]
        traces += _fit_traces(fit, style)
        text = f"{plot_text(fit.metric)}: {fit_text(fit)}"
        notes.append(_note(text, style.color, 0.98 - 0.07 * i))
    found = aids.forecast
    if found is not None and found.metric in styles:
        style = styles[found.metric]
        traces.append(_forecast_trace(found, style))
        notes.append(_note(plot_text(forecast_text(found)), style.color, 0.02, x=0.99))
        if span is not None and "range" in fig["layout"]["xaxis"]:
            # A range that ends at the last point drawn (the view's, or the data's own
            # ends that an unzoomed chart is drawn to) would hide the forecast.
            fig["layout"]["xaxis"]["range"] = list(span)
    fig["data"] = [*fig["data"], *traces]
    fig["layout"]["annotations"] = [*fig["layout"].get("annotations", []), *notes]
    return fig
