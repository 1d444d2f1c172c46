"""The runs list: project, name, status, last step, last seen; refreshed live. Ticking two
or more runs offers a link that compares them (:mod:`.compare`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, dcc, html
from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut, RunOut
from normwatch.server.services.analytics import MAX_COMPARED_RUNS

from ..data import RunNotFound
from ..session import viewer
from ..wiring import in_thread, or_prevent
from .compare_view import compare_href, default_metric

ROUTES = ("/",)
REFRESH_MS = 2000
COLUMNS = ("name", "project", "status", "segment", "last step", "last seen", "tags")
NO_RUNS = "No runs yet. Start a trainer with normwatch.client.Run, or POST /api/v1/runs."
PICK_HINT = "Tick two or more runs to compare them."


class RunsReader(Protocol):
    """What the runs list reads."""

    def runs(self, who: Principal) -> list[RunOut]: ...

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]: ...


def match(path: str) -> dict[str, str] | None:
    return {} if path in ("", "/") else None


def layout(data: RunsReader, who: Principal, query: Mapping[str, str]) -> html.Div:
    return html.Div(
        [
            html.H1(f"Runs in {who.project}"),
            html.Div(html.Span(PICK_HINT, className="muted"), id="compare-action"),
            dcc.Store(id="compare-ticked", data=[]),
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
    """One row a run, each name a link to its page beside a box to tick it for a comparison;
    a hint to start a run when there is none."""
    if not runs:
        return html.P(NO_RUNS, className="empty")
    header = html.Tr([html.Th(h) for h in COLUMNS])
    rows = [
        html.Tr(
            [
                html.Td(
                    [
                        pick_box(run.id),
                        dcc.Link(run.name, href=f"/runs/{run.id}", className="run-link"),
                    ]
                ),
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


def pick_box(run_id: str) -> dcc.Checklist:
    """The run's box to tick for a comparison. The table is redrawn every few seconds;
    persistence keeps a tick across redraws."""
    return dcc.Checklist(
        id={"type": "compare-pick", "run": run_id},
        options=[{"label": "", "value": run_id}],
        value=[],
        persistence=True,
        persistence_type="memory",
        className="run-pick",
        inline=True,
    )


def ticked_runs(picked: object) -> list[str]:
    """The ticked run ids, each once, in the list's order (``picked``: each row's values).

    >>> ticked_runs([["r2"], [], ["r1"], ["r2"]])
    ['r2', 'r1']
    """
    rows = picked if isinstance(picked, list) else []
    ticked = (v for row in rows if isinstance(row, list) for v in row if isinstance(v, str))
    return list(dict.fromkeys(ticked))


def compare_action(
    data: RunsReader, who: Principal, picked: object, shown: object = None
) -> tuple[Any, list[str]] | None:
    """A link to compare the ticked runs on their default metric
    (:func:`~.compare_view.default_metric`), or a hint with fewer than two or more than
    `MAX_COMPARED_RUNS`, and the ticked runs; None when they are the runs ``shown``
    already (the table's refresh redraws the boxes every few seconds). A run that has gone
    from the project is left out."""
    ticked = ticked_runs(picked)
    if ticked == shown:
        return None
    return _action(data, who, ticked), ticked


def _action(data: RunsReader, who: Principal, ticked: list[str]) -> Any:
    ids: list[str] = []
    names: list[list[str]] = []
    for run_id in ticked:
        try:
            names.append([m.name for m in data.metrics(who, run_id)])
        except RunNotFound:
            continue
        ids.append(run_id)
    if len(ids) < 2:
        return html.Span(PICK_HINT, className="muted")
    if len(ids) > MAX_COMPARED_RUNS:
        return html.Span(f"Compare at most {MAX_COMPARED_RUNS} runs at once.", className="muted")
    href = compare_href(ids, default_metric(names))
    return dcc.Link(f"compare {len(ids)} runs", href=href, id="compare-link", className="button")


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

    @app.callback(
        Output("compare-action", "children"),
        Output("compare-ticked", "data"),
        Input({"type": "compare-pick", "run": ALL}, "value"),
        State("compare-ticked", "data"),
        prevent_initial_call=True,
    )
    async def on_pick(picked: object, shown: object) -> tuple[Any, list[str]]:
        return or_prevent(await in_thread(compare_action, data, viewer(), picked, shown))
