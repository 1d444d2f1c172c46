"""Runs side by side: one or more metrics of several runs on one step axis (a panel a
metric), a summary of each run, and the config keys whose values differ between them.

The view (:class:`~.compare_view.CompareView`: runs, metrics, step range, and how the chart
draws them) lives in a store and in the URL
(``?run=&run=&metric=&metric=&start=&end=&log=1&smooth=0.9&robust=1&group=mean&group_by=lr``),
so a deep link reproduces it. The metric is a stored name or a derived expression
(``share(grad/norm/lm_head*, grad/norm/total)``). Zooming re-reads the range, as on the run
page: the summary's largest and final values and slope follow it, its spikes are those of
the whole run. The chart's toggles and smoothing shape what was read (`.compare_figure`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import dash
from dash import Input, Output, State, dcc, html

from normwatch.server.analytics.summary import config_diff
from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut, RunOut
from normwatch.server.schemas.analytics import CompareOut
from normwatch.server.services.analytics import MAX_COMPARED_RUNS

from ..compare_figure import compare_panels
from ..figures import Line, empty_figure
from ..graph_config import ZOOMABLE_GRAPH_CONFIG
from ..refusals import Refusal, RunNotFound, said
from ..session import viewer
from ..wiring import in_thread, or_prevent, triggered_id
from .compare_controls import controls
from .compare_js import URL_SYNC_JS, ZOOM_JS
from .compare_tables import diff_table, line_of, range_text, run_labels, summary_table
from .compare_title import groups_of, run_colours, title_runs, titles_of
from .compare_view import CompareView, chart_options, picker_state, update_view
from .run_overlay import POINTS
from .run_view import RUN_ID

ROUTES = ("/compare",)
NO_RUNS = "Tick two or more runs on the runs page, then follow “compare”."
TOO_MANY = f"Compare at most {MAX_COMPARED_RUNS} runs at once."
NO_METRIC = "These runs share no metric: pick one, or type an expression."
SUMMARY_NOTE = "Max, final and slope over the steps shown; spikes over the whole run."
SUMMARY_OF_FIRST = "Of the first metric. "

Drawn = tuple[Any, str, Any, Any]
"""The chart, the text under it, the summary table and the config diff table."""


class PageQuery(Protocol):
    """A URL's query as routing passes it: the last value of a name, and every value."""

    def get(self, key: str, /) -> str | None: ...

    def every(self, name: str, /) -> list[str]: ...


class CompareReads(Protocol):
    """What the page reads, each for the viewer (`RunNotFound` outside its project)."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]: ...

    def compare(
        self,
        who: Principal,
        run_ids: Sequence[str],
        metric: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
    ) -> CompareOut: ...


def match(path: str) -> dict[str, str] | None:
    return {} if path in ("/compare", "/compare/") else None


def cannot_compare(message: str) -> html.Div:
    """What the page shows instead of a comparison, and why."""
    return html.Div(
        [html.H2("Cannot compare"), html.P(message), dcc.Link("All runs", href="/")],
        className="card",
    )


def layout(data: CompareReads, who: Principal, query: PageQuery) -> html.Div:
    """The comparison the URL's ``query`` names (``run`` repeated, ``metric`` repeated: a
    panel each, ``start``, ``end``, and the chart's ``log``, ``smooth``, ``robust``,
    ``group``, ``group_by``): a message instead when it names no run, too many, or one that
    is no run of the viewer's project."""
    ids = list(dict.fromkeys(query.every("run")))
    if not ids:
        return cannot_compare(NO_RUNS)
    if len(ids) > MAX_COMPARED_RUNS:
        return cannot_compare(TOO_MANY)
    runs: list[RunOut] = []
    names: list[list[str]] = []
    missing = []
    for run_id in ids:
        if not RUN_ID.match(run_id):
            missing.append(run_id)
            continue
        try:
            runs.append(data.run(who, run_id))
            names.append([m.name for m in data.metrics(who, run_id)])
        except RunNotFound:
            missing.append(run_id)
    if missing:
        return cannot_compare(f"No run {', '.join(missing)} in your project.")
    metrics = query.every("metric")
    view = CompareView.from_query(
        ids,
        names,
        metric=metrics[0] if metrics else None,
        more=metrics[1:],
        group_by=query.get("group_by"),
        start=query.get("start"),
        end=query.get("end"),
        log=query.get("log"),
        smooth=query.get("smooth"),
        robust=query.get("robust"),
        group=query.get("group"),
    )
    labels = run_labels(runs)
    diff = config_diff([dict(r.config) for r in runs])
    title = title_runs(labels, run_colours(len(runs), view.group_by, diff))
    return html.Div(
        [
            html.Div(
                [html.H1("Compare runs"), html.Span(title, id="compare-title")],
                className="run-title",
            ),
            *controls(names, view, list(diff)),
            dcc.Graph(
                id="compare-chart",
                config=ZOOMABLE_GRAPH_CONFIG,
                figure=empty_figure("loading…"),
            ),
            html.Div(id="compare-range", className="muted"),
            html.H3("Summary"),
            html.Div(id="compare-summary"),
            html.P(
                (SUMMARY_OF_FIRST if view.more_metrics else "") + SUMMARY_NOTE, className="muted"
            ),
            html.H3("Config differences"),
            html.Div(id="compare-diff"),
            dcc.Store(id="compare-view", data=view.to_store()),
            dcc.Store(id="compare-configs", data={"labels": labels, "diff": diff}),
            html.Div(id="compare-url-sync", hidden=True),
            dcc.Store(id="compare-zoom"),  # the chart's moves of its x axis (`ZOOM_JS`)
        ],
        className="card compare-page",
    )


def draw(data: CompareReads, who: Principal, view: CompareView | None) -> Drawn:
    """The chart (a panel a metric, a line a run or a group of runs), the range text, the
    summary and the config diff for ``view`` (the summary of its first metric); a chart
    that says why when there is nothing to draw: no view, no metric, a run outside the
    viewer's project, a first metric the service refuses (one no run logged: named with the
    closest names they have), or no points. A further metric the service refuses is named
    in the range text, and the others are drawn; so is a run that never logged a metric,
    beside others that did."""
    if view is None:
        return nothing_drawn(NO_RUNS)
    if view.metric is None:
        return nothing_drawn(NO_METRIC)
    try:
        compared = data.compare(
            who, view.runs, view.metric, start=view.start, end=view.end, points=POINTS
        )
    except RunNotFound as exc:
        return nothing_drawn(f"No run {exc.run_id} in your project.")
    except Refusal as exc:
        return nothing_drawn(f"Cannot draw {view.metric}: {said(exc)}")
    labels = run_labels(compared.runs)
    panels = [_panel(labels, compared)]
    texts = [range_text(panels[0], [r.missing for r in compared.runs])]
    for metric in view.more_metrics:
        try:
            more = data.compare(
                who, view.runs, metric, start=view.start, end=view.end, points=POINTS
            )
        except Refusal as exc:
            texts.append(f"not drawn: {said(exc)}")
            continue
        panels.append(_panel(labels, more))
        texts.append(range_text(panels[-1], [r.missing for r in more.runs]))
    if any(line.steps for panel in panels for _, line in panel):
        # Plotly keeps the user's zoom until this changes: other runs or metrics, or a y
        # axis of another kind.
        uirevision = "|".join([*view.runs, *view.metrics]) + "".join(
            f"|{flag}" for flag in chart_options(view)
        )
        fig = compare_panels(
            panels,
            x_range=view.x_range,
            uirevision=uirevision + (f"|by {view.group_by}" if view.group_by else ""),
            log_y=view.log,
            smooth=view.smooth,
            robust=view.robust,
            mean=view.group == "mean",
            groups=groups_of(view.group_by, compared) if view.group_by else None,
            group_by=view.group_by,
        )
    else:
        fig = empty_figure(f"None of these runs logged {view.metric} in this range.")
    lines = [html.Div(f"{m}: {t}") for m, t in zip(view.metrics, texts, strict=True)]
    info: Any = lines if len(texts) > 1 else texts[0]
    return fig, info, summary_table(compared, labels), diff_table(compared, labels)


def _panel(labels: Sequence[str], compared: CompareOut) -> list[tuple[str, Line]]:
    return [(label, line_of(r)) for label, r in zip(labels, compared.runs, strict=True)]


def nothing_drawn(message: str) -> Drawn:
    return empty_figure(message), "", [], []


def register(app: dash.Dash, data: CompareReads) -> None:
    @app.callback(
        Output("compare-view", "data"),
        Output("compare-metric", "options"),
        Output("compare-metric", "value"),
        Output("compare-more", "value"),
        Input("compare-metric", "value"),
        Input("compare-expression", "n_submit"),
        Input("compare-apply", "n_clicks"),
        Input("compare-zoom", "data"),
        Input("compare-reset", "n_clicks"),
        Input("compare-options", "value"),
        Input("compare-smoothing", "value"),
        Input("compare-more", "value"),
        Input("compare-group-by", "value"),
        State("compare-expression", "value"),
        State("compare-metric", "options"),
        State("compare-view", "data"),
        prevent_initial_call=True,
    )
    def on_controls(
        picked: object,
        _submit: object,
        _apply: object,
        relayout: object,
        _reset: object,
        flags: object,
        smooth: object,
        more: object,
        group_by: object,
        expression: object,
        options: object,
        store: object,
    ) -> tuple[dict[str, Any], list[Any], str | None, list[str]]:
        new = update_view(
            CompareView.from_store(store),
            picked=picked,
            expression=expression,
            relayout=relayout,
            trigger=triggered_id(),
            flags=flags,
            smooth=smooth,
            more=more,
            group_by=group_by,
        )
        view = or_prevent(new)
        # The further metrics' picker follows too: a metric made the first leaves it.
        return (view.to_store(), *picker_state(view, options), list(view.more_metrics))

    @app.callback(
        Output("compare-chart", "figure"),
        Output("compare-range", "children"),
        Output("compare-summary", "children"),
        Output("compare-diff", "children"),
        Input("compare-view", "data"),
    )
    async def on_draw(store: object) -> Drawn:
        return await in_thread(draw, data, viewer(), CompareView.from_store(store))

    @app.callback(
        Output("compare-title", "children"),
        Input("compare-view", "data"),
        State("compare-configs", "data"),
        prevent_initial_call=True,
    )
    def on_title(store: object, configs: object) -> list[html.Span]:
        return or_prevent(titles_of(store, configs))

    app.clientside_callback(
        URL_SYNC_JS, Output("compare-url-sync", "children"), Input("compare-view", "data")
    )
    app.clientside_callback(
        ZOOM_JS, Output("compare-zoom", "data"), Input("compare-chart", "relayoutData")
    )
