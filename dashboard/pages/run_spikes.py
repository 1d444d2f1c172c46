"""The run page's spikes section: each spike of the charted metrics (and of the loss and the
update norm), the share of steps spent in spikes, and which metric's spikes come first.

Spikes are found by the server over the whole run, from every stored point
(`normwatch.server.services.analytics.spike_report`); the view's range only chooses which
are listed and the window of the second share. Clicking a spike's row zooms the chart to
it and pins the depth profile to its peak (on the family of the spiking metric when that
family has layers): the per-layer magnitudes at a spike in one click.

The threshold (in noise SDs) is kept in the page's URL as ``?threshold=`` (left out at the
default), read when the page loads; where the next lower threshold would find more spikes,
the section says how many ("2 more at 4 SD").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from normwatch.server.analytics.spikes import THRESHOLD
from normwatch.server.auth import Principal
from normwatch.server.services.analytics import SpikeReport

from ..layers import family_of
from ..numbers import NONE, number_text
from ..refusals import Refusal, RunNotFound, said
from ..session import viewer
from ..wiring import ROW_CLICK_JS, TriggerId, clicked_row, in_thread
from .run_layers import pin_store
from .run_view import MAX_STEP, RunView, is_step

__all__ = [
    "ALSO",
    "MAX_ROWS",
    "NO_SPIKES",
    "SPIKE_ROW",
    "SPIKES_EVERY",
    "SpikeReads",
    "SpikeZoom",
    "THRESHOLDS",
    "THRESHOLD_SYNC_JS",
    "draw_spikes",
    "fractions_table",
    "lead_lag_table",
    "more_text",
    "register",
    "section",
    "spike_metrics",
    "spike_table",
    "spike_window",
    "spikes_due",
    "threshold_of",
    "zoom_to_spike",
]

ALSO = ("train/loss", "updates/norm/total")
"""Metrics whose spikes are listed beside the charted ones, when the run has them: a loss
spike and the update-norm spike that often comes before it."""
SPIKE_ROW = "spike-row"
MAX_ROWS = 100
SPIKES_EVERY = 10
"""A view of the latest steps looks for new spikes every this many ticks."""
MIN_PAD = 50
"""A spike's zoom shows at least this many steps either side of it."""
NO_SPIKES = "No spikes in these steps."
NO_PAIRS = "No metric's spikes were followed by another's within 50 steps."
THRESHOLDS = (10.0, 6.0, THRESHOLD, 4.0, 3.0)
"""The band a spike must pass, in noise SDs, that the section offers: 5.25 is the service's
default (it finds a 7-SD spike, and on Gaussian noise under one false spike in a million
steps); lower finds more in a noisy metric, higher only the largest."""
THRESHOLD_SYNC_JS = """
function(threshold) {
    const params = new URLSearchParams(window.location.search);
    if (threshold === null || threshold === undefined || threshold === DEFAULT) {
        params.delete("threshold");
    } else { params.set("threshold", String(threshold)); }
    const query = params.toString();
    const target = window.location.pathname + (query ? "?" + query : "");
    if (target !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", target);
    }
    return window.dash_clientside.no_update;
}
""".replace("DEFAULT", f"{THRESHOLD:g}")
"""The chosen threshold follows into the URL as ``?threshold=`` (left out at the default),
beside the view's parameters, so that a link opens the section as it was."""
_CELL = {"padding": ".2rem .5rem", "borderBottom": "1px solid #e4e6eb", "textAlign": "left"}
_ROW = {"cursor": "pointer"}

DrawnSpikes = tuple[Any, Any, Any]
"""The spike table, the shares of steps in spikes, and the lead-lag table."""


class SpikeReads(Protocol):
    """What the section reads (`RunNotFound` outside the viewer's project)."""

    def spike_report(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        optional: Sequence[str] = (),
        start: int | None,
        end: int | None,
        threshold: float = THRESHOLD,
    ) -> SpikeReport: ...


def threshold_of(text: object) -> float:
    """The threshold a URL's ``threshold`` parameter (or the picker) names: one of
    `THRESHOLDS`, else the default.

    >>> threshold_of("4"), threshold_of("4.0"), threshold_of(None), threshold_of("7")
    (4.0, 4.0, 5.25, 5.25)
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        return THRESHOLD
    try:
        number = float(text)
    except ValueError:
        return THRESHOLD
    return number if number in THRESHOLDS else THRESHOLD


def section(threshold: str | None = None) -> html.Div:
    """The section, at the URL's ``threshold`` if it is one the section offers."""
    return html.Div(
        [
            html.H3("Spikes"),
            html.P(
                [
                    "Each spike runs from its first abnormal step to its recovery; click one "
                    "to zoom the chart to it and pin the depth profile to its peak. A spike "
                    "rises more than ",
                    dcc.RadioItems(
                        id="spike-threshold",
                        options=[{"label": f" {t:g}", "value": t} for t in THRESHOLDS],
                        value=threshold_of(threshold),
                        inline=True,
                        style={"display": "inline-block"},
                        labelStyle={"marginRight": ".6rem"},
                    ),
                    " noise SDs",
                    " above its baseline (and 5 %); a noisy loss's spikes may need fewer.",
                ],
                className="muted",
            ),
            html.Div(id="spike-table", style={"maxHeight": "18rem", "overflowY": "auto"}),
            html.Div(
                [
                    html.Div([html.H4("Steps in spikes"), html.Div(id="spike-fractions")]),
                    html.Div([html.H4("Which spikes come first"), html.Div(id="lead-lag")]),
                ],
                style={"display": "flex", "gap": "1.5rem", "flexWrap": "wrap"},
            ),
            dcc.Store(id="spikes-tick"),
            html.Div(id="spike-threshold-sync", hidden=True),
            dcc.Store(id="spike-click"),  # a real click on a row (`ROW_CLICK_JS`)
        ],
        className="spikes-section",
    )


def spike_metrics(view: RunView) -> tuple[list[str], list[str]]:
    """The view's metrics, and those of `ALSO` the view does not chart (read when logged).

    >>> spike_metrics(RunView("r", "grad/norm/total", "train/loss"))
    (['grad/norm/total', 'train/loss'], ['updates/norm/total'])
    """
    charted = view.metrics
    return charted, [m for m in ALSO if m not in charted]


def spikes_due(view: RunView | None, n_intervals: object) -> bool:
    """Whether a tick looks for new spikes: for a view of the latest steps (no end), every
    `SPIKES_EVERY`-th tick.

    >>> spikes_due(RunView("r"), 10), spikes_due(RunView("r", end=5), 10)
    (True, False)
    """
    if view is None or view.end is not None:
        return False
    return isinstance(n_intervals, int) and n_intervals % SPIKES_EVERY == 0


def spike_window(start: int, end: int) -> tuple[int, int]:
    """The steps a spike's zoom shows: the spike and twice its length either side (at least
    `MIN_PAD` steps), so that what led it and its recovery are in view.

    >>> spike_window(1208, 1212), spike_window(20, 500)
    ((1158, 1262), (0, 1460))
    """
    pad = max(MIN_PAD, 2 * (end - start))
    return max(0, start - pad), min(MAX_STEP, end + pad)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if value == "Infinity":
        return math.inf
    return None


def _value_text(value: object) -> str:
    return number_text(_number(value))


def _magnitude_text(value: object) -> str:
    number = _number(value)
    if number is None:
        return NONE
    return number_text(number) + ("" if math.isinf(number) else "×")


def percent(fraction: float) -> str:
    """A share of steps as text.

    >>> percent(0.0), percent(0.0004), percent(0.052)
    ('0%', '<0.1%', '5.2%')
    """
    if fraction <= 0:
        return "0%"
    if fraction < 0.001:
        return "<0.1%"
    return f"{100 * fraction:.1f}%"


def steps_text(count: int) -> str:
    """'1 step', '1,200 steps'."""
    return f"{count:,} step" + ("" if count == 1 else "s")


def _cell(content: Any, **props: Any) -> html.Td:
    return html.Td(content, style=_CELL, **props)


def _table(header: list[str], body: list[Any], class_name: str) -> html.Table:
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, style=_CELL) for h in header])),
            html.Tbody(body),
        ],
        className=class_name,
        style={"borderCollapse": "collapse", "fontSize": ".88rem", "marginBottom": ".8rem"},
    )


SPIKE_HEADER = ["metric", "start", "peak", "peak value", "magnitude", "recovery end", "duration"]


MOMENT_COLUMNS = {
    "optim/mu/norm/total": "1st moment",
    "optim/nu/norm/total": "2nd moment",
}
"""Adam's moment norms, when the run logs them: each spike's peak of each over its level
before the spike. A first moment up and a second flat say the spike came from momentum."""


def moment_text(ratio: object) -> str:
    """A moment's rise over a spike.

    >>> moment_text(1.94), moment_text(8.76701), moment_text(None)
    ('×1.94', '×8.767', '—')
    """
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not math.isfinite(ratio):
        return NONE
    return f"×{number_text(ratio)}"


def spike_table(spikes: Sequence[Mapping[str, Any]], limit: int = MAX_ROWS) -> Any:
    """One clickable row per spike (in step order), at most ``limit``; with a column for
    each of Adam's moments the run logs (`MOMENT_COLUMNS`)."""
    if not spikes:
        return html.P(NO_SPIKES, className="muted")

    def moments_of(spike: Mapping[str, Any]) -> Mapping[str, Any]:
        moments = spike.get("moments")
        return moments if isinstance(moments, Mapping) else {}

    logged = [n for n in MOMENT_COLUMNS if any(n in moments_of(s) for s in spikes[:limit])]
    rows = []
    for spike in spikes[:limit]:
        start, peak, end = spike["start"], spike["peak"], spike["end"]
        recovered = bool(spike.get("recovered", True))
        duration = end - start
        row_id = {
            "type": SPIKE_ROW,
            "metric": str(spike["metric"]),
            "start": start,
            "peak": peak,
            "end": end,
        }
        rows.append(
            html.Tr(
                [
                    _cell(str(spike["metric"]), className="metric"),
                    _cell(f"{start:,}"),
                    _cell(f"{peak:,}"),
                    _cell(_value_text(spike.get("peak_value"))),
                    _cell(_magnitude_text(spike.get("magnitude"))),
                    _cell(f"{end:,}" if recovered else "not recovered"),
                    _cell(steps_text(duration) if recovered else f"≥ {steps_text(duration)}"),
                    *(_cell(moment_text(moments_of(spike).get(name))) for name in logged),
                ],
                id=row_id,
                n_clicks=0,
                style=_ROW,
                title="zoom the chart to this spike and pin the depth profile to its peak",
            )
        )
    header = SPIKE_HEADER + [f"{MOMENT_COLUMNS[name]} ×" for name in logged]
    table = _table(header, rows, "spike-list")
    if len(spikes) <= limit:
        return table
    more = f"… and {len(spikes) - limit:,} more: zoom the chart in to list them."
    return html.Div([table, html.P(more, className="muted")])


def more_text(report: SpikeReport) -> str | None:
    """What a lower threshold would add, or None where it adds nothing.

    >>> from normwatch.server.services.analytics import MoreAt
    >>> more_text(SpikeReport([], {}, None, [], 5.25, {}, MoreAt(4.0, 2, {"loss": 2})))
    '2 more at 4 SD: lower the threshold to list them.'
    """
    more = report.more_at
    if more is None or more.count <= 0:
        return None
    return f"{more.count:,} more at {more.threshold:g} SD: lower the threshold to list them."


def fractions_table(report: SpikeReport) -> Any:
    """Per metric: how many spikes are listed, and the share of its logged steps inside a
    spike over the whole run and over the view's range."""
    if not report.fraction_in_spikes:
        return html.P("No metric to look at.", className="muted")
    listed: dict[str, int] = {}
    for spike in report.spikes:
        listed[str(spike["metric"])] = listed.get(str(spike["metric"]), 0) + 1
    window = report.fraction_in_window
    rows = [
        html.Tr(
            [
                _cell(metric, className="metric"),
                _cell(f"{listed.get(metric, 0):,}"),
                _cell(percent(share)),
                _cell("—" if window is None else percent(window.get(metric, 0.0))),
            ]
        )
        for metric, share in report.fraction_in_spikes.items()
    ]
    header = ["metric", "spikes listed", "steps in spikes (run)", "(visible range)"]
    return _table(header, rows, "spike-fractions")


def lead_lag_table(report: SpikeReport) -> Any:
    """The ordered pairs whose leader's spikes some follower spike came after: the median
    lag, how many were followed, how many were not."""
    pairs = sorted(
        (p for p in report.lead_lag if p.matched > 0),
        key=lambda p: (-p.matched, p.leader, p.follower),
    )
    if not pairs:
        return html.P(NO_PAIRS, className="muted")
    rows = [
        html.Tr(
            [
                _cell(f"{p.leader} → {p.follower}", className="metric"),
                _cell(number_text(p.lag_steps)),
                _cell(f"{p.matched:,}"),
                _cell(f"{p.unmatched_leader:,}"),
            ],
            className="lead-lag-row",
        )
        for p in pairs
    ]
    header = ["leader → follower", "median lag (steps)", "followed", "not followed"]
    return _table(header, rows, "lead-lag")


def draw_spikes(
    data: SpikeReads, who: Principal, view: RunView | None, threshold: object = THRESHOLD
) -> DrawnSpikes:
    """The section's three parts for the view's run and range, spikes being ``threshold``
    noise SDs above their baseline (one of `THRESHOLDS`; anything else is the default)."""
    nothing = html.P("", className="muted")
    if view is None:
        return nothing, nothing, nothing
    metrics, optional = spike_metrics(view)
    try:
        report = data.spike_report(
            who,
            view.run,
            metrics,
            optional=optional,
            start=view.start,
            end=view.end,
            threshold=threshold_of(threshold),
        )
    except RunNotFound:
        return nothing, nothing, nothing
    except Refusal as exc:
        return html.P(said(exc), className="muted"), nothing, nothing
    table = spike_table(report.spikes)
    hint = more_text(report)
    if hint is not None:
        table = html.Div([table, html.P(hint, className="muted spike-more")])
    return table, fractions_table(report), lead_lag_table(report)


@dataclass(frozen=True)
class SpikeZoom:
    """What a click on a spike changes: the view's range, the pinned step, the family."""

    view: RunView
    pin: dict[str, int | None]
    family: str | None


def zoom_to_spike(
    view: RunView | None, trigger: TriggerId, was_clicked: bool, families: object
) -> SpikeZoom | None:
    """The view zoomed to the clicked spike's window (`spike_window`, no longer focused on
    a transition), the profile pinned to its peak, and the family of its metric when
    ``families`` (the picker's options) has it; None for no real click, or a row id that
    is no spike's."""
    if view is None or not was_clicked or not isinstance(trigger, Mapping):
        return None
    start, peak, end = trigger.get("start"), trigger.get("peak"), trigger.get("end")
    metric = trigger.get("metric")
    if not (is_step(start) and is_step(peak) and is_step(end) and isinstance(metric, str)):
        return None
    if not start <= end:
        return None
    lo, hi = spike_window(start, end)
    options = families if isinstance(families, list) else []
    names = [o.get("value") for o in options if isinstance(o, dict)]
    family = family_of(metric, [n for n in names if isinstance(n, str)])
    # The pin's baseline ends where the spike starts: "× baseline" compares each layer's
    # peak with its own level before the spike, not with the spike's first steps.
    pin = pin_store(peak, since=start)
    return SpikeZoom(replace(view, start=lo, end=hi, focus=None), pin, family)


def register(app: dash.Dash, data: SpikeReads) -> None:
    @app.callback(
        Output("spike-table", "children"),
        Output("spike-fractions", "children"),
        Output("lead-lag", "children"),
        Input("view-drawn", "data"),
        Input("spikes-tick", "data"),
        Input("spike-threshold", "value"),
    )
    async def on_spikes(store: object, _n: object, threshold: object) -> DrawnSpikes:
        view = RunView.from_store(store)
        return await in_thread(draw_spikes, data, viewer(), view, threshold)

    app.clientside_callback(
        THRESHOLD_SYNC_JS,
        Output("spike-threshold-sync", "children"),
        Input("spike-threshold", "value"),
    )
    row = {"type": SPIKE_ROW, "metric": ALL, "start": ALL, "peak": ALL, "end": ALL}
    app.clientside_callback(ROW_CLICK_JS, Output("spike-click", "data"), Input(row, "n_clicks"))

    @app.callback(
        Output("view", "data", allow_duplicate=True),
        Output("layers-pin", "data", allow_duplicate=True),
        Output("depth-family", "value", allow_duplicate=True),
        Input("spike-click", "data"),
        State("view", "data"),
        State("depth-family", "options"),
        prevent_initial_call=True,
    )
    async def on_row(click: object, store: object, families: object) -> tuple[Any, Any, Any]:
        trigger, was_clicked = clicked_row(click)
        zoom = zoom_to_spike(RunView.from_store(store), trigger, was_clicked, families)
        if zoom is None:
            raise PreventUpdate
        dash.set_props("view-drawn", {"data": zoom.view.to_store()})
        return zoom.view.to_store(), zoom.pin, zoom.family or dash.no_update
