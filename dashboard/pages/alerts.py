"""Alerts: what is firing now and the recent history, with each notification's delivery,
and between them the project's silences (`oncall`: silencing and acknowledging, for admins).

Refreshed live; ``?run=<id>`` narrows both lists to one run. Each alert links to its run
page zoomed on the step where the state changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import dash
from dash import Input, Output, State, dcc, html

from normwatch.server.alerts.payloads import dashboard_link
from normwatch.server.auth import Principal
from normwatch.server.schemas.alerts import AlertOut, DeliveryOut

from ..refusals import RunNotFound
from ..session import viewer
from ..wiring import in_thread
from . import oncall
from .runs import ago

ROUTES = ("/alerts",)
REFRESH_MS = 2000
RECENT = 100
COLUMNS = (
    "rule",
    "run",
    "metric",
    "state",
    "step",
    "value",
    "threshold",
    "reason",
    "time",
    "delivery",
)
NOTHING_FIRING = "Nothing is firing."
NO_ALERTS = "No alerts yet."


class AlertsReader(oncall.OnCallAccess, Protocol):
    """What the alerts page reads, for the viewer's project (and changes, for admins)."""

    def firing(self, who: Principal) -> list[AlertOut]: ...

    def alerts(
        self, who: Principal, run_id: str | None = None, limit: int = 100
    ) -> list[AlertOut]: ...


@dataclass(frozen=True)
class AlertsFilter:
    """Which alerts the page lists: one run's (``run``) or, with None, the project's."""

    run: str | None = None

    def to_store(self) -> dict[str, Any]:
        return {"run": self.run}

    @classmethod
    def from_store(cls, data: object) -> AlertsFilter | None:
        """The filter a store holds, or None for anything :meth:`to_store` cannot write."""
        if not isinstance(data, dict):
            return None
        run = data.get("run")
        return cls(run) if run is None or isinstance(run, str) else None


def match(path: str) -> dict[str, str] | None:
    return {} if path.rstrip("/") == "/alerts" else None


def layout(data: AlertsReader, who: Principal, query: Mapping[str, str]) -> html.Div:
    """The project's alerts, or one run's with ``?run=`` (`RunNotFound` outside it)."""
    shown = AlertsFilter(query.get("run") or None)
    firing, recent = read(data, who, shown)
    admin = who.can("admin")
    title = f"Alerts in {who.project}" + (f" for run {shown.run}" if shown.run else "")
    return html.Div(
        [
            html.H1(title),
            dcc.Link("all alerts", href="/alerts", className="muted") if shown.run else None,
            html.H3("Firing now"),
            html.Div(alerts_table(firing, empty=NOTHING_FIRING, admin=admin), id="alerts-firing"),
            oncall.section(data, who),
            html.H3("Recent"),
            html.Div(alerts_table(recent, empty=NO_ALERTS), id="alerts-recent"),
            dcc.Store(id="alerts-filter", data=shown.to_store()),
            dcc.Interval(id="alerts-refresh", interval=REFRESH_MS),
        ],
        className="card alerts-page",
    )


def read(
    data: AlertsReader, who: Principal, shown: AlertsFilter
) -> tuple[list[AlertOut], list[AlertOut]]:
    """What is firing now and the `RECENT` latest alerts, both narrowed by ``shown``."""
    firing = [a for a in data.firing(who) if shown.run is None or a.run["id"] == shown.run]
    return firing, data.alerts(who, shown.run, limit=RECENT)


def run_href(alert: AlertOut) -> str:
    """The run page with the alert's metric on the left, zoomed on its step."""
    if alert.step is None:
        return f"/runs/{quote(alert.run['id'], safe='')}?{urlencode({'left': alert.metric})}"
    return dashboard_link("", alert.run["id"], alert.metric, alert.step)


def number_text(value: float | str | None) -> str:
    """A value as the tables show it: six significant digits, '—' for none, and the
    service's spelling of a non-finite one ('NaN', 'Infinity')."""
    if value is None:
        return "—"
    return value if isinstance(value, str) else f"{value:.6g}"


def delivery_text(n: DeliveryOut) -> str:
    """'webhook: delivered', 'slack: pending (2 attempts)', 'webhook: failed — timeout'."""
    if n.status == "delivered":
        return f"{n.channel}: delivered"
    if n.status == "failed":
        return f"{n.channel}: failed — {n.last_error or 'no error recorded'}"
    tries = f" ({n.attempts} attempt{'s' if n.attempts != 1 else ''})" if n.attempts else ""
    error = f" — {n.last_error}" if n.last_error else ""
    return f"{n.channel}: {n.status}{tries}{error}"


def state_cell(alert: AlertOut, *, admin: bool = False) -> list[Any]:
    """The state's badge, then what else the history says of it: the repeat, the silence
    that held it back, who acknowledged it (or, for admins, a button to)."""
    cell: list[Any] = [html.Span(alert.state, className=f"badge badge-{alert.state}")]
    if alert.repeat:
        cell.append(html.Div(f"repeat {alert.repeat}", className="muted alert-repeat"))
    if alert.silenced_by is not None:
        cell.append(html.Div(f"silenced (#{alert.silenced_by})", className="muted alert-silenced"))
    if alert.acked is not None:
        by, why = alert.acked.get("by") or "someone", alert.acked.get("comment") or ""
        said = f"acknowledged by {by}" + (f": {why}" if why else "")
        cell.append(html.Div(said, className="muted alert-acked"))
    elif admin and alert.state == "firing":
        button = html.Button("Acknowledge", id={"type": "alert-ack", "alert": alert.id}, n_clicks=0)
        cell.append(html.Div(button))
    return cell


def alerts_table(
    alerts: list[AlertOut], *, empty: str, now: datetime | None = None, admin: bool = False
) -> Any:
    """One row an alert, linking to its run; ``empty`` said when there is none. With
    ``admin``, a firing alert nobody has taken on has an Acknowledge button."""
    if not alerts:
        return html.P(empty, className="empty")
    header = html.Tr([html.Th(c) for c in COLUMNS])
    rows = [
        html.Tr(
            [
                html.Td(a.rule["name"]),
                html.Td(dcc.Link(a.run["name"], href=run_href(a), className="alert-run-link")),
                html.Td(a.metric, className="metric"),
                html.Td(state_cell(a, admin=admin)),
                html.Td("—" if a.step is None else f"{a.step:,}"),
                html.Td(number_text(a.value)),
                html.Td(number_text(a.threshold)),
                html.Td(a.reason),
                html.Td(ago(a.created_at, now), title=a.created_at.isoformat()),
                html.Td(
                    [
                        html.Div(delivery_text(n), className=f"delivery delivery-{n.status}")
                        for n in a.notifications
                    ]
                    or html.Span(
                        "no channels"
                        if a.silenced_by is None
                        else f"not sent: silence #{a.silenced_by}",
                        className="muted",
                    )
                ),
            ],
            className=f"alert-row alert-{a.state}",
        )
        for a in alerts
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs alerts")


def refresh(data: AlertsReader, who: Principal, shown: AlertsFilter | None) -> tuple[Any, Any]:
    """Both tables as they stand now; empty ones for a filter naming no run of the
    viewer's project (or a store that holds no filter)."""
    try:
        firing, recent = read(data, who, shown) if shown is not None else ([], [])
    except RunNotFound:  # the filter names no run of the viewer's project
        firing, recent = [], []
    admin = who.can("admin")
    return (
        alerts_table(firing, empty=NOTHING_FIRING, admin=admin),
        alerts_table(recent, empty=NO_ALERTS),
    )


def register(app: dash.Dash, data: AlertsReader) -> None:
    oncall.register(app, data)

    @app.callback(
        Output("alerts-firing", "children"),
        Output("alerts-recent", "children"),
        Input("alerts-refresh", "n_intervals"),
        Input("oncall-changed", "data"),
        State("alerts-filter", "data"),
        prevent_initial_call=True,
    )
    async def on_refresh(_n: object, _changed: object, store: object) -> tuple[Any, Any]:
        return await in_thread(refresh, data, viewer(), AlertsFilter.from_store(store))
