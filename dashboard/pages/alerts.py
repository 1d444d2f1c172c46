"""Alerts: what is firing now and the recent history, with each notification's delivery.

Refreshed live; ``?run=<id>`` narrows both lists to one run. Each alert links to its run
page zoomed on the step where the state changed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import anyio
import dash
from dash import Input, Output, State, dcc, html
from normwatch.server.alerts.payloads import dashboard_link
from normwatch.server.auth import Principal
from normwatch.server.schemas import AlertOut, DeliveryOut

from ..data import DashboardData, RunNotFound
from ..session import viewer
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


def match(path: str) -> dict[str, str] | None:
    return {} if path.rstrip("/") == "/alerts" else None


def layout(data: DashboardData, who: Principal, run: str | None = None, **_params: str) -> html.Div:
    firing, recent = _read(data, who, run)
    title = f"Alerts in {who.project}" + (f" for run {run}" if run else "")
    return html.Div(
        [
            html.H1(title),
            dcc.Link("all alerts", href="/alerts", className="muted") if run else None,
            html.H3("Firing now"),
            html.Div(alerts_table(firing, empty="Nothing is firing."), id="alerts-firing"),
            html.H3("Recent"),
            html.Div(alerts_table(recent, empty="No alerts yet."), id="alerts-recent"),
            dcc.Store(id="alerts-filter", data={"run": run}),
            dcc.Interval(id="alerts-refresh", interval=REFRESH_MS),
        ],
        className="card alerts-page",
    )


def _read(
    data: DashboardData, who: Principal, run: str | None
) -> tuple[list[AlertOut], list[AlertOut]]:
    firing = [a for a in data.firing(who) if run is None or a.run["id"] == run]
    return firing, data.alerts(who, run, limit=RECENT)


def run_href(alert: AlertOut) -> str:
    """The run page with the alert's metric on the left, zoomed on its step."""
    if alert.step is None:
        return f"/runs/{quote(alert.run['id'], safe='')}?{urlencode({'left': alert.metric})}"
    return dashboard_link("", alert.run["id"], alert.metric, alert.step)


def number_text(value: float | str | None) -> str:
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


def alerts_table(alerts: list[AlertOut], *, empty: str) -> Any:
    if not alerts:
        return html.P(empty, className="empty")
    header = html.Tr([html.Th(c) for c in COLUMNS])
    rows = [
        html.Tr(
            [
                html.Td(a.rule["name"]),
                html.Td(dcc.Link(a.run["name"], href=run_href(a), className="alert-run-link")),
                html.Td(a.metric, className="metric"),
                html.Td(html.Span(a.state, className=f"badge badge-{a.state}")),
                html.Td("—" if a.step is None else f"{a.step:,}"),
                html.Td(number_text(a.value)),
                html.Td(number_text(a.threshold)),
                html.Td(a.reason),
                html.Td(ago(a.created_at), title=a.created_at.isoformat()),
                html.Td(
                    [
                        html.Div(delivery_text(n), className=f"delivery delivery-{n.status}")
                        for n in a.notifications
                    ]
                    or html.Span("no channels", className="muted")
                ),
            ],
            className=f"alert-row alert-{a.state}",
        )
        for a in alerts
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs alerts")


def register(app: dash.Dash, data: DashboardData) -> None:
    @app.callback(
        Output("alerts-firing", "children"),
        Output("alerts-recent", "children"),
        Input("alerts-refresh", "n_intervals"),
        State("alerts-filter", "data"),
        prevent_initial_call=True,
    )
    async def refresh(_n: int, view: dict[str, Any]) -> tuple[Any, Any]:
        who = viewer()
        try:
            firing, recent = await anyio.to_thread.run_sync(
                lambda: _read(data, who, view.get("run"))
            )
        except RunNotFound:  # the filter names no run of the viewer's project
            firing, recent = [], []
        return (
            alerts_table(firing, empty="Nothing is firing."),
            alerts_table(recent, empty="No alerts yet."),
        )
