"""A metric panel's small chart: one metric (or expression) of one run or of several. Pure.

The run page draws one panel a metric with its run's line; a comparison can draw the same
panel with a line a run (`PanelSeries` carries the run's label and colour). The lines come
from the same reads as the overlay's (`DashboardData.lines`, downsampled with spikes kept)
with a points budget for a chart a third of the page wide (`PANEL_POINTS`); the panel
follows the page's view: its step range, smoothing (the raw line faint behind), log scale,
and an x axis by tokens or wall time (applied by the page, `.pages.run_axes.XAxis`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .figures import (
    DOWNSAMPLED,
    WHITE_TEMPLATE,
    Figure,
    Line,
    log_ticks,
    plot_text,
)
from .transforms import ema

__all__ = ["PANEL_HEIGHT", "PANEL_POINTS", "PanelSeries", "panel_figure", "smoothed_series"]

PANEL_POINTS = 400
"""Points a panel asks for a line: about its width in pixels."""
PANEL_HEIGHT = 220
RAW_OPACITY = 0.25
PANEL_INK = "#37474f"
"""A run's line in its own panel: neither the overlay's red (its left axis) nor its blue
(its right axis), so that a colour keeps one meaning on the page."""


@dataclass(frozen=True)
class PanelSeries:
    """One line of a panel: the ``line`` read, the run it belongs to (``label``, shown in
    the hover and legend when a panel draws several runs) and its ``color``. ``raw``: the
    unsmoothed line drawn faint behind it."""

    line: Line
    label: str = ""
    color: str = PANEL_INK
    raw: Line | None = None


def smoothed_series(series: PanelSeries, weight: float) -> PanelSeries:
    """``series`` smoothed with `.transforms.ema` at ``weight`` (0: as it is), its raw
    line kept to be drawn faint behind."""
    if not weight:
        return series
    values = ema(series.line.steps, series.line.values, weight).tolist()
    return replace(series, line=replace(series.line, values=values), raw=series.line)


def _finite(values: Sequence[float]) -> list[float | None]:
    """None for what is not finite: Plotly draws a gap there."""
    return [v if v == v and v not in (float("inf"), float("-inf")) else None for v in values]


def panel_figure(
    title: str,
    series: Sequence[PanelSeries],
    *,
    log_y: bool = False,
    x_range: tuple[int, int] | None = None,
    uirevision: str = "panel",
) -> Figure:
    """The panel ``title`` drawing each of ``series`` in its colour, by step.

    ``x_range`` is the view's range (None: every step the lines have, without plotly's
    padding). A panel of several runs shows a legend; of one, none. A panel whose lines
    have no point says so.

    >>> fig = panel_figure("loss", [PanelSeries(Line("loss", [0, 1], [2.0, float("nan")]))])
    >>> fig["data"][0]["y"], fig["layout"]["xaxis"]["range"], fig["layout"]["showlegend"]
    ([2.0, None], [0, 1], False)
    """
    traces: list[dict[str, object]] = []
    for s in series:
        name = plot_text(s.label or s.line.metric)
        if s.raw is not None:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": list(s.raw.steps),
                    "y": _finite(s.raw.values),
                    "name": name + " (raw)",
                    "line": {"color": s.color, "width": 1},
                    "opacity": RAW_OPACITY,
                    "showlegend": False,
                    "hoverinfo": "skip",
                }
            )
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": list(s.line.steps),
                "y": _finite(s.line.values),
                "name": name + (DOWNSAMPLED if s.line.downsampled else ""),
                "meta": name,
                "line": {"color": s.color, "width": 1.5},
                "connectgaps": False,
                "hovertemplate": "step %{x}<br>%{y:.6g}<extra>%{meta}</extra>",
            }
        )
    ends = [(s.line.steps[0], s.line.steps[-1]) for s in series if len(s.line.steps)]
    xaxis: dict[str, object] = {"showgrid": True, "title": {"text": "step"}}
    if x_range is not None:
        xaxis["range"] = list(x_range)
    elif ends:
        xaxis["range"] = [min(a for a, _ in ends), max(b for _, b in ends)]
        xaxis["autorange"] = False
    else:
        xaxis["autorange"] = True
    layout: dict[str, object] = {
        "uirevision": uirevision,
        "template": WHITE_TEMPLATE,
        "title": {"text": plot_text(title), "font": {"size": 12}, "x": 0.02, "y": 0.97},
        "height": PANEL_HEIGHT,
        "margin": {"l": 50, "r": 12, "t": 28, "b": 36},
        "hovermode": "x unified",
        "showlegend": len(series) > 1,
        "legend": {"orientation": "h", "x": 0, "y": -0.3, "font": {"size": 10}},
        "xaxis": xaxis,
        "yaxis": {
            "type": "log" if log_y else "linear",
            **log_ticks(log_y, [s.line for s in series]),
        },
    }
    if not ends:
        layout["annotations"] = [
            {
                "text": "no points in this range",
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
            }
        ]
    return {"data": traces, "layout": layout}
