"""The runs list: project, name, status, last step, last seen; refreshed live."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import dash
from dash import Input, Output, dcc, html
from normwatch.server.auth import Principal
from normwatch.server.schemas import RunOut

from ..session import viewer
from ..wiring import in_thread

ROUTES = ("/",)
REFRESH_MS = 2000
COLUMNS = ("name", "project", "status", "segment", "last step", "last seen", "tags")
NO_RUNS = "No runs yet. Start a trainer with normwatch.client.Run, or POST /api/v1/runs."


class RunsReader(Protocol):
    """What the runs list reads."""

    def runs(self, who: Principal) -> list[RunOut]: ...


def match(path: str) -> dict[str, str] | None:
    return {} if path in ("", "/") else None


def layout(data: RunsReader, who: Principal, query: Mapping[str, str]) -> html.Div:
    return html.Div(
        [
            html.H1(f"Runs in {who.project}"),
            html.Div(runs_table(data.runs(who)), id="runs-table"),
            dcc.Interval(id="runs-refresh", interval=REFRESH_MS),
        ],
        className="card",
    )


def ago(when: datetime, now: datetime | None = None) -> str:
    """'12 s ago', '5 min ago', '3 h ago', '2 d ago': whole units, rounded down; a time
    in the future reads '0 s ago'."""
    now = now or datetime.now(UTC)
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def runs_table(runs: list[RunOut], now: datetime | None = None) -> Any:
    """One row a run, each name a link to its page; a hint to start one when there is none."""
    if not runs:
        return html.P(NO_RUNS, className="empty")
    header = html.Tr([html.Th(h) for h in COLUMNS])
    rows = [
        html.Tr(
            [
                html.Td(dcc.Link(run.name, href=f"/runs/{run.id}", className="run-link")),
                html.Td(run.project),
                html.Td(html.Span(run.status, className=f"status status-{run.status}")),
                html.Td(run.segment),
                html.Td("—" if run.last_step is None else f"{run.last_step:,}"),
                html.Td(ago(run.last_seen, now), title=run.last_seen.isoformat()),
                html.Td(", ".join(run.tags)),
            ],
            className="run-row",
        )
        for run in runs
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs")


def refresh(data: RunsReader, who: Principal) -> Any:
    """The runs table as it stands now (the page's periodic refresh)."""
    return runs_table(data.runs(who))


def register(app: dash.Dash, data: RunsReader) -> None:
    @app.callback(
        Output("runs-table", "children"),
        Input("runs-refresh", "n_intervals"),
        prevent_initial_call=True,
    )
    async def on_refresh(_n: int | None) -> Any:
        return await in_thread(refresh, data, viewer())
