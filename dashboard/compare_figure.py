"""The compare page's chart: one or more metrics of several runs, a panel a metric, on one
step axis. Pure: lines in, a figure dict out (see :mod:`.figures` for why a dict).

Each run is drawn in `run_color` order, from a palette without the run page's red and blue
(`.compare_legend`). What the page's controls ask for is drawn from the lines read, with
`.transforms`: smoothing (the raw line faint behind the smoothed one), a log y axis, a y
range that ignores the extremes, and runs folded into one line (all of them, or those
that share a config value): their mean over buckets of steps, with a band from the least
to the greatest value any of them reaches in each bucket (`.transforms.mean_band`), so
that a spike of any run stays inside the band at every zoom.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .compare_legend import Group, legend_title, mean_name
from .compare_traces import band_fill, band_traces, faint_trace, non_finite, run_trace
from .figures import WHITE_TEMPLATE, Figure, Line, log_ticks, plot_text, run_color
from .transforms import ema, mean_band, outlier_range

__all__ = ["BAND_BUCKETS", "MEAN_COLOR", "band_fill", "compare_figure", "compare_panels"]

MEAN_COLOR = "#333333"
"""The mean of every run: no run's colour, so that it reads as none of them."""
BAND_BUCKETS = 1000
"""Buckets of the mean's grid across the steps shown: as many as the lines are read with
pixels (`.pages.run_overlay.POINTS`), so a bucket holds a pixel's M4 points."""
PANEL_HEIGHT = 320
"""Each panel's height when several metrics are drawn (one alone is ``height`` tall)."""

Runs = Sequence[tuple[str, Line]]
"""A panel's lines: each run's label and its line of the panel's metric."""


def compare_figure(
    runs: Runs,
    *,
    x_range: tuple[int, int] | None = None,
    uirevision: str = "compare",
    height: int = 480,
    log_y: bool = False,
    smooth: float = 0.0,
    robust: bool = False,
    mean: bool = False,
    groups: Sequence[Group] | None = None,
    group_by: str | None = None,
) -> Figure:
    """One metric of several runs on one step axis: `compare_panels` with one panel."""
    return compare_panels(
        [runs],
        x_range=x_range,
        uirevision=uirevision,
        height=height,
        log_y=log_y,
        smooth=smooth,
        robust=robust,
        mean=mean,
        groups=groups,
        group_by=group_by,
    )


def compare_panels(
    panels: Sequence[Runs],
    *,
    x_range: tuple[int, int] | None = None,
    uirevision: str = "compare",
    height: int = 480,
    log_y: bool = False,
    smooth: float = 0.0,
    robust: bool = False,
    mean: bool = False,
    groups: Sequence[Group] | None = None,
    group_by: str | None = None,
) -> Figure:
    """A panel a metric, stacked, on one shared step axis (zooming one zooms all); each
    panel's ``runs`` pair each run's label with its line, in the same run order in every
    panel, drawn in `run_color` order and named after its run (in the legend once).

    ``smooth`` (an EMA weight, `.transforms.ema`) draws each line smoothed, its raw points
    faint behind it in its colour (no legend entry, no hover). ``groups`` (runs that share
    ``group_by``'s value) or ``mean`` (every run as one group) draw each group as its
    mean over buckets of steps with a band from their least to their greatest value
    (`.transforms.mean_band`; only the mean is smoothed, so the band keeps every spike),
    each run faint behind in its group's colour (in its own with ``mean``); the legend
    names each group with its count of runs and where fewer count, and the hover gives the
    count at each bucket. ``log_y`` draws the y axes in log scale; ``robust`` fits them to
    the drawn values without their extreme 2 % (`.transforms.outlier_range`). Without
    ``x_range`` the x axis spans the data's first to last step (plotly's autorange pads
    past them).

    Non-finite values break a line and are flagged with an ✕ on the top edge, as on
    :func:`.figures.overlay_figure`. Each panel's y axis is titled with its metric.
    """
    lines = [line for runs in panels for _, line in runs]
    ends = [(line.steps[0], line.steps[-1]) for line in lines if len(line.steps)]
    shown = x_range or ((min(e[0] for e in ends), max(e[1] for e in ends)) if ends else None)
    folded = list(groups) if groups is not None else None
    if folded is None and mean and panels and panels[0]:
        folded = [Group("", tuple(range(len(panels[0]))))]
    count = len(panels)
    gap = 0.06 if count > 1 else 0.0
    size = (1.0 - gap * (count - 1)) / max(count, 1)
    traces: list[dict[str, Any]] = []
    layout: dict[str, Any] = {}
    for index, runs in enumerate(panels):
        x, y, flags = _axis_names(index)
        panel = _Panel(runs, x, y, flags, first=index == 0, several=count > 1)
        traces += panel.traces(shown, smooth=smooth, groups=folded)
        top = 1.0 - index * (size + gap)
        layout |= panel.axes(
            (max(top - size, 0.0), top), x_range=x_range, shown=shown, log_y=log_y, robust=robust
        )
    layout |= {
        "uirevision": uirevision,
        "template": WHITE_TEMPLATE,
        "margin": {"l": 70, "r": 30, "t": 30, "b": 50},
        "height": height if count <= 1 else PANEL_HEIGHT * count + 80,
        "hovermode": "x unified",
        "legend": {
            "orientation": "h",
            "x": 0,
            "y": -0.18 if count <= 1 else -0.06,
            "title": {"text": legend_title(mean=folded is not None, group_by=group_by)},
        },
    }
    return {"data": traces, "layout": layout}


def _axis_names(index: int) -> tuple[str, str, str]:
    """A panel's x axis, y axis and the y axis of its ✕ flags (plotly's names: ``x``,
    ``y``, ``y2`` for the first panel, ``x2``, ``y3``, ``y4`` for the second...).

    >>> _axis_names(0), _axis_names(1)
    (('x', 'y', 'y2'), ('x2', 'y3', 'y4'))
    """
    x = "x" if index == 0 else f"x{index + 1}"
    y = "y" if index == 0 else f"y{2 * index + 1}"
    return x, y, f"y{2 * index + 2}"


class _Panel:
    """One metric's lines, drawn on the axes ``x`` and ``y`` (flags on ``flags``)."""

    def __init__(
        self, runs: Runs, x: str, y: str, flags: str, *, first: bool, several: bool
    ) -> None:
        self.runs, self.x, self.y, self.flags = runs, x, y, flags
        self.first, self.several = first, several
        self.drawn: list[npt.NDArray[np.float64]] = []

    def _on_axes(self, trace: dict[str, Any]) -> dict[str, Any]:
        return trace if self.first else {**trace, "xaxis": self.x, "yaxis": self.y}

    def traces(
        self, shown: tuple[int, int] | None, *, smooth: float, groups: Sequence[Group] | None
    ) -> list[dict[str, Any]]:
        colour = {i: run_color(i) for i in range(len(self.runs))}
        if groups and (len(groups) > 1 or groups[0].name):
            colour = {i: run_color(g) for g, group in enumerate(groups) for i in group.runs}
        out: list[dict[str, Any]] = []
        for index, (label, line) in enumerate(self.runs):
            values = np.asarray(line.values, dtype=np.float64)
            if groups is not None or smooth:
                out.append(self._on_axes(faint_trace(label, line.steps, values, colour[index])))
                self.drawn.append(values)
            if groups is None:
                drawn = ema(line.steps, values, smooth) if smooth else values
                trace = run_trace(label, line.steps, drawn, colour[index])
                if not self.first:
                    trace["showlegend"] = False
                out.append(self._on_axes(trace))
                self.drawn.append(drawn)
        if groups is not None and shown is not None:
            for number, group in enumerate(groups):
                out += self._group_traces(group, number, shown, smooth, len(groups))
        out += self._flag_trace()
        return out

    def _group_traces(
        self, group: Group, number: int, shown: tuple[int, int], smooth: float, groups: int
    ) -> list[dict[str, Any]]:
        members = [self.runs[i][1] for i in group.runs if i < len(self.runs)]
        band = mean_band(
            [(line.steps, line.values) for line in members],
            start=shown[0],
            end=shown[1],
            buckets=BAND_BUCKETS,
            downsampled=[line.downsampled for line in members],
        )
        spans = [s for s in (_span(line, shown) for line in members) if s is not None]
        if not spans:
            return []
        average = ema(band.steps, band.mean, smooth) if smooth else band.mean
        self.drawn += [average, band.low, band.high]
        name = mean_name(spans)
        if group.name:
            name = f"{plot_text(group.name)}: {name}"
        if self.several:
            name = f"{plot_text(self.runs[0][1].metric)} · {name}"
        color = MEAN_COLOR if groups == 1 and not group.name else run_color(number)
        key = f"group-{number}"
        return [self._on_axes(t) for t in band_traces(name, key, color, band, average)]

    def _flag_trace(self) -> list[dict[str, Any]]:
        flagged = [(s, flag, label) for label, line in self.runs for s, flag in non_finite(line)]
        if not flagged:
            return []
        trace = {
            "type": "scatter",
            "x": [s for s, _, _ in flagged],
            "y": [1.0] * len(flagged),
            "yaxis": self.flags,
            "mode": "markers",
            "marker": {"symbol": "x", "color": "black", "size": 9},
            "name": "non-finite",
            "showlegend": self.first,
            "legendgroup": "non-finite",
            "text": [f"{plot_text(label)}: {flag}" for _, flag, label in flagged],
            "hovertemplate": "step %{x}<br>%{text}<extra></extra>",
        }
        return [trace if self.first else {**trace, "xaxis": self.x}]

    def axes(
        self,
        domain: tuple[float, float],
        *,
        x_range: tuple[int, int] | None,
        shown: tuple[int, int] | None,
        log_y: bool,
        robust: bool,
    ) -> dict[str, Any]:
        """This panel's x axis (the first panel's, matched by the others), y axis and flag
        axis, as layout keys."""
        xaxis: dict[str, object] = {"showgrid": True}
        if self.first:
            if x_range is not None:
                xaxis["range"] = list(x_range)
            elif shown is not None:
                xaxis |= {"range": list(shown), "autorange": False}
        else:
            xaxis["matches"] = "x"
        xaxis |= {"title": {"text": "step"}}
        metric = self.runs[0][1].metric if self.runs else ""
        yaxis: dict[str, object] = {"title": {"text": plot_text(metric)}}
        if log_y:
            # Ticks that read, as on the run page (`log_ticks`): plotly's own labels of a log
            # axis give the first digit alone (2, 5, 100, 2, 5).
            ticks = log_ticks(True, [line for _, line in self.runs])
            yaxis |= {"type": "log", "tickformat": "~g", **ticks}
        y_range = outlier_range(self.drawn, log=log_y) if robust else None
        if y_range is not None:
            yaxis |= {"range": list(y_range), "autorange": False}
        flags: dict[str, object] = {
            "overlaying": self.y,
            "range": [0, 1.05],
            "visible": False,
            "fixedrange": True,
        }
        if self.several:
            yaxis |= {"domain": list(domain), "anchor": self.x}
            xaxis |= {"anchor": self.y}
            flags["domain"] = list(domain)
        return {
            _layout_key(self.x, "xaxis"): xaxis,
            _layout_key(self.y, "yaxis"): yaxis,
            _layout_key(self.flags, "yaxis"): flags,
        }


def _layout_key(axis: str, kind: str) -> str:
    """A trace's axis name as its layout key: ``y3`` is ``yaxis3``, ``x`` is ``xaxis``."""
    return kind + axis[1:]


def _span(line: Line, shown: tuple[int, int]) -> tuple[int, int] | None:
    """The first and last step of the line's finite points within ``shown``."""
    steps = [s for s, v in zip(line.steps, line.values, strict=True) if np.isfinite(v)]
    inside = [s for s in steps if shown[0] <= s <= shown[1]]
    return (inside[0], inside[-1]) if inside else None
