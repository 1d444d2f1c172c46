"""The compare page's chart: one metric of several runs on one step axis. Pure: lines in,
a figure dict out (see :mod:`.figures` for why a dict).

Each run is drawn in `run_color` order, blue first: the legend says so, because on the run
page blue means the right axis. What the page's controls ask for is drawn from the lines
read, with `.transforms`: smoothing (the raw line faint behind the smoothed one), a log y
axis, a y range that ignores the extremes, and the mean of the runs with a min–max band
(the runs faint behind it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .figures import RAW_OPACITY, WHITE_TEMPLATE, Figure, Line, log_ticks, plot_text, run_color
from .transforms import ema, mean_band, outlier_range

__all__ = ["BAND_FILL", "MEAN_COLOR", "compare_figure", "legend_title", "mean_name"]

MEAN_COLOR = "#333333"
"""The mean of the runs: no run's colour, so that it reads as none of them."""
BAND_FILL = "rgba(51, 51, 51, 0.15)"
"""The band between the runs' minimum and maximum, in the mean's colour."""


def compare_figure(
    runs: Sequence[tuple[str, Line]],
    *,
    x_range: tuple[int, int] | None = None,
    uirevision: str = "compare",
    height: int = 480,
    log_y: bool = False,
    smooth: float = 0.0,
    robust: bool = False,
    mean: bool = False,
) -> Figure:
    """One metric of several runs on one step axis (``runs`` pairs each run's label with
    its line): a line a run, in `run_color` order, named after its run in the legend.

    ``smooth`` (an EMA weight, `.transforms.ema`) draws each line smoothed, its raw points
    faint behind it in its colour (no legend entry, no hover). ``mean`` draws the runs'
    mean instead (`.transforms.mean_band`, smoothed as a line would be), a band from their
    minimum to their maximum, and each run faint behind; the hover says how many runs count
    at each step. ``log_y`` draws the y axis in log scale; ``robust`` fits it to the drawn
    values without their extreme 2 % (`.transforms.outlier_range`). Without ``x_range``
    the x axis spans the data's first to last step (plotly's autorange pads past them).

    Non-finite values break a line and are flagged with an ✕ on the top edge, as on
    :func:`.figures.overlay_figure`. The y axis is titled with the metric of the first line.
    """
    traces: list[dict[str, Any]] = []
    drawn: list[npt.NDArray[np.float64]] = []
    for index, (label, line) in enumerate(runs):
        values = np.asarray(line.values, dtype=np.float64)
        if mean or smooth:
            traces.append(_faint(label, line.steps, values, run_color(index)))
            drawn.append(values)
        if not mean:
            shown = ema(line.steps, values, smooth) if smooth else values
            traces.append(_run_trace(label, line.steps, shown, run_color(index)))
            drawn.append(shown)
    if mean and runs:
        grid, average, low, high, count = mean_band([(line.steps, line.values) for _, line in runs])
        if smooth:
            average, low, high = (ema(grid, ys, smooth) for ys in (average, low, high))
        counted = sum(1 for _, line in runs if np.isfinite(line.values).any())
        traces += _mean_traces(mean_name(counted), grid, average, low, high, count)
        drawn += [average, low, high]
    flagged = [(s, flag, label) for label, line in runs for s, flag in _non_finite(line)]
    if flagged:
        traces.append(
            {
                "type": "scatter",
                "x": [s for s, _, _ in flagged],
                "y": [1.0] * len(flagged),
                "yaxis": "y2",
                "mode": "markers",
                "marker": {"symbol": "x", "color": "black", "size": 9},
                "name": "non-finite",
                "text": [f"{plot_text(label)}: {flag}" for _, flag, label in flagged],
                "hovertemplate": "step %{x}<br>%{text}<extra></extra>",
            }
        )
    xaxis: dict[str, object] = {"title": {"text": "step"}, "showgrid": True}
    ends = [(line.steps[0], line.steps[-1]) for _, line in runs if len(line.steps)]
    if x_range is not None:
        xaxis["range"] = list(x_range)
    elif ends:
        xaxis["range"] = [min(e[0] for e in ends), max(e[1] for e in ends)]
        xaxis["autorange"] = False
    yaxis: dict[str, object] = {"title": {"text": plot_text(runs[0][1].metric) if runs else ""}}
    if log_y:
        # Ticks that read, as on the run page (`log_ticks`): plotly's own labels of a log
        # axis give the first digit alone (2, 5, 100, 2, 5).
        yaxis |= {"type": "log", "tickformat": "~g", **log_ticks(True, [line for _, line in runs])}
    shown_range = outlier_range(drawn, log=log_y) if robust else None
    if shown_range is not None:
        yaxis |= {"range": list(shown_range), "autorange": False}
    layout = {
        "uirevision": uirevision,
        "template": WHITE_TEMPLATE,
        "margin": {"l": 70, "r": 30, "t": 30, "b": 50},
        "height": height,
        "hovermode": "x unified",
        "legend": {
            "orientation": "h",
            "x": 0,
            "y": -0.18,
            "title": {"text": legend_title(mean=mean and bool(runs))},
        },
        "xaxis": xaxis,
        "yaxis": yaxis,
        "yaxis2": {"overlaying": "y", "range": [0, 1.05], "visible": False, "fixedrange": True},
    }
    return {"data": traces, "layout": layout}


def legend_title(*, mean: bool) -> str:
    """The chart's colour rule, said where the names are: on a comparison blue is the first
    run (on the run page it is the right axis).

    >>> legend_title(mean=False)
    'colours in run order, blue first:'
    """
    if mean:
        return "faint: each run, in run order, blue first ·"
    return "colours in run order, blue first:"


def mean_name(runs: int) -> str:
    """The mean's name in the legend, saying what its band spans.

    >>> mean_name(3), mean_name(1)
    ('mean of 3 runs (band: min–max)', 'mean of 1 run (band: min–max)')
    """
    return f"mean of {runs} run{'' if runs == 1 else 's'} (band: min–max)"


def _gaps(values: npt.NDArray[np.float64]) -> list[float | None]:
    """Plotly draws None as a gap: non-finite values become gaps on the line."""
    return [float(v) if np.isfinite(v) else None for v in values]


def _run_trace(
    label: str, steps: Sequence[int], values: npt.NDArray[np.float64], color: str
) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": list(steps),
        "y": _gaps(values),
        "name": plot_text(label),
        "meta": plot_text(label),
        "mode": "lines",
        "line": {"color": color, "width": 1.5},
        "connectgaps": False,
        "hovertemplate": "step %{x}<br>%{y:.6g}<extra>%{meta}</extra>",
    }


def _faint(
    label: str, steps: Sequence[int], values: npt.NDArray[np.float64], color: str
) -> dict[str, Any]:
    """A run's raw points, faint behind what is drawn of them."""
    return {
        "type": "scatter",
        "x": list(steps),
        "y": _gaps(values),
        "name": plot_text(label) + " (raw)",
        "mode": "lines",
        "line": {"color": color, "width": 1},
        "opacity": RAW_OPACITY,
        "connectgaps": False,
        "showlegend": False,
        "hoverinfo": "skip",
    }


def _mean_traces(
    name: str,
    steps: npt.NDArray[np.int64],
    average: npt.NDArray[np.float64],
    low: npt.NDArray[np.float64],
    high: npt.NDArray[np.float64],
    count: npt.NDArray[np.int64],
) -> list[dict[str, Any]]:
    """The band's lower edge, its upper edge filled down to it, then the mean over it; one
    legend entry (the mean's) shows and hides all three."""
    xs = steps.tolist()
    edge = {
        "type": "scatter",
        "x": xs,
        "mode": "lines",
        "line": {"width": 0, "color": MEAN_COLOR},
        "connectgaps": False,
        "showlegend": False,
        "hoverinfo": "skip",
        "legendgroup": "mean",
    }
    return [
        {**edge, "y": _gaps(low), "name": "min"},
        {**edge, "y": _gaps(high), "name": "max", "fill": "tonexty", "fillcolor": BAND_FILL},
        {
            "type": "scatter",
            "x": xs,
            "y": _gaps(average),
            "name": name,
            "mode": "lines",
            "line": {"color": MEAN_COLOR, "width": 2},
            "connectgaps": False,
            "legendgroup": "mean",
            "customdata": [
                [int(n), lo, hi] for n, lo, hi in zip(count, _gaps(low), _gaps(high), strict=True)
            ],
            "hovertemplate": "step %{x}<br>mean %{y:.6g} of %{customdata[0]} runs"
            "<br>min %{customdata[1]:.6g} · max %{customdata[2]:.6g}<extra></extra>",
        },
    ]


def _non_finite(line: Line) -> list[tuple[int, str]]:
    return [
        (s, "NaN" if np.isnan(v) else ("+Inf" if v > 0 else "-Inf"))
        for s, v in zip(line.steps, line.values, strict=True)
        if not np.isfinite(v)
    ]
