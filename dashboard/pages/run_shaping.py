"""The run chart's shaping controls and what they need: smoothing, the x axis by step,
tokens or wall time (`.run_axes`), normalize mode, the CSV download; and which alerts the
chart marks. The view they set lives in :class:`~.run_view.RunView`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from dash import dcc, html

from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut

from ..figures import AlertMark, Line
from ..refusals import Refusal
from .run_axes import XAxis, clock_axis, tokens_axis, tokens_metric
from .run_overlay import POINTS
from .run_view import MAX_SMOOTHING, RunView

__all__ = [
    "NORMALIZE_OPTIONS",
    "X_MISSING",
    "AxisReads",
    "controls",
    "watching",
    "x_axis",
    "x_options",
]


class AxisReads(Protocol):
    """What the x axis by tokens or time reads (`RunNotFound` outside the viewer's project)."""

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

    def clock(self, who: Principal, run_id: str) -> tuple[list[int], list[float]]: ...


def controls(names: Sequence[str], view: RunView) -> html.Div:
    """The smoothing slider, the x axis choice, the normalize picker and the CSV button."""
    return html.Div(
        [
            html.Label(
                [
                    "smoothing",
                    dcc.Slider(
                        id="smoothing",
                        min=0,
                        max=MAX_SMOOTHING,
                        step=0.01,
                        value=view.smooth,
                        marks={0: "off", 0.6: "0.6", 0.9: "0.9", MAX_SMOOTHING: "0.99"},
                        updatemode="drag",
                        tooltip={"placement": "bottom"},
                    ),
                ],
                className="picker smoothing",
            ),
            html.Label(
                [
                    "x axis",
                    dcc.RadioItems(
                        id="x-axis",
                        options=x_options(names),
                        value=view.x,
                        inline=True,
                        className="toggle",
                    ),
                ],
                className="picker",
            ),
            html.Label(
                [
                    "normalize",
                    dcc.Dropdown(
                        id="normalize",
                        options=NORMALIZE_OPTIONS,
                        value=view.norm,
                        placeholder="off",
                        clearable=True,
                        searchable=False,
                    ),
                ],
                className="picker",
            ),
            html.A(
                "download CSV",
                id="download-csv",
                download="",
                className="button",
                title="every stored point of the charted series over the range shown",
            ),
        ],
        className="controls shaping",
    )


X_MISSING = {
    "tokens": "This run logs no tokens metric (such as throughput/total_tokens)",
    "time": "This run has no clock marks yet",
}
"""Why the chart could not be drawn by tokens or by time."""
NORMALIZE_OPTIONS = [
    {"label": "÷ median over the view", "value": "median"},
    {"label": "÷ first value in the view", "value": "start"},
]
"""The normalize picker's modes, the default (the median, which a warm-up does not move)
first."""


def x_options(names: Sequence[str]) -> list[dict[str, Any]]:
    """The x axis choices: step, tokens (offered when the run logs a tokens metric, and
    named after it), wall time."""
    tokens = tokens_metric(names)
    return [
        {"label": " step", "value": "step"},
        {
            "label": f" tokens ({tokens})" if tokens else " tokens (none logged)",
            "value": "tokens",
            "disabled": tokens is None,
        },
        {"label": " wall time", "value": "time"},
    ]


def x_axis(data: AxisReads, who: Principal, view: RunView) -> XAxis | None:
    """The x axis ``view`` asks for when it counts tokens or time; None by step, or when
    the run has nothing to draw it through (no tokens metric, fewer than two marks)."""
    try:
        if view.x == "tokens":
            metric = tokens_metric([m.name for m in data.metrics(who, view.run)])
            if metric is None:
                return None
            line = data.lines(who, view.run, [metric], start=None, end=None, points=POINTS)
            read = line.get(metric)
            return None if read is None else tokens_axis(metric, read.steps, read.values)
        if view.x == "time":
            return clock_axis(*data.clock(who, view.run))
    except Refusal:
        return None
    return None


def watching(alerts: list[AlertMark], lines: Mapping[str, Line]) -> list[AlertMark]:
    """The alerts of rules that watch a metric the chart draws (by its name or the stored
    alias drawn for it), and those of the whole run: a rule on the loss marks no grad
    norm chart.

    >>> marks = [AlertMark(1, "firing", "a", "loss"), AlertMark(2, "firing", "b", "g"),
    ...          AlertMark(3, "firing", "stalled")]
    >>> [m.step for m in watching(marks, {"g": Line("g", [], [])})]
    [2, 3]
    """
    charted = {name for line in lines.values() for name in (line.metric, line.source) if name}
    return [a for a in alerts if not a.metric or a.metric in charted]
