"""The runs list: a search, filters by tag, state and config value, and a sort, all kept in
the URL (:class:`~.runs_view.RunsView`); one page of the runs they select
(:mod:`.runs_table`), refreshed live from one read of the project's runs. Chosen columns
show metrics' last, smallest or largest values and config values, read for the whole page
at once (:mod:`.runs_columns`); runs may fold into groups by a config key. Ticking two or
more runs offers a link that compares them (:mod:`.compare`); admins add and remove tags
and edit notes (through the same validation as ``PATCH /api/v1/runs/{id}``)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html

from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut, RunOut
from normwatch.server.services.analytics import MAX_COMPARED_RUNS
from normwatch.server.storage.run_stats import SeriesStats

from ..config_filter import ConfigFilterError, parse_conditions
from ..refusals import RunNotFound
from ..session import viewer
from ..wiring import (
    ROW_CLICK_JS,
    TriggerId,
    clicked,
    clicked_row,
    in_thread,
    or_prevent,
    triggered_id,
)
from .compare_view import compare_href, default_metric
from .runs_cells import column_picker
from .runs_choices import ColumnsChange, update_columns
from .runs_columns import Column, MetricValues, config_keys
from .runs_notes import NoteChange, NoteEditing, change_note, note_editor
from .runs_table import (
    NO_MATCH,
    NO_RUNS,
    ago,
    controls,
    count_text,
    header,
    pager,
    pick_box,
    runs_table,
    sort_labels,
    state_options,
    tag_options,
)
from .runs_tags import TagChange, TagEditing, change_tags, tag_editor
from .runs_view import DEFAULT_SORT, SORTS, URL_SYNC_JS, Listing, RunsView, toggled_sort

__all__ = [
    "NO_MATCH",
    "NO_RUNS",
    "PICK_HINT",
    "ago",
    "compare_action",
    "layout",
    "pick_box",
    "refresh",
    "runs_table",
    "ticked_runs",
    "update_view",
]

ROUTES = ("/",)
REFRESH_MS = 2000
SLOWEST_REFRESH_MS = 30_000
READ_LIMIT = 10_000
"""The most runs one read lists (the most recently active): the API's own bound."""
METRIC_SORT_LIMIT = 2_000
"""The most matched runs the list sorts by a metric column: each refresh reads the values
of all of them."""
PICK_HINT = "Tick two or more runs to compare them."
SORT_BUTTONS = tuple(f"runs-sort-{column}" for column in SORTS)

Shown = tuple[Any, str, Any, Any, bool, bool]
"""The table's rows, the count above it, the tag and state filters' options, and whether
the previous and next page buttons are disabled."""
ViewChange = tuple[Any, ...]
"""The view's store, the config field's error, the sort picker's value and the sortable
columns' titles."""
Refreshed = tuple[Any, str, Any, Any, bool, bool, Any]
"""What `Shown` holds, and the refresh's interval."""


class RunsReader(TagEditing, NoteEditing, Protocol):
    """What the runs list reads and changes, each for the viewer (tags: `TagEditing`;
    notes: `NoteEditing`)."""

    def runs(self, who: Principal, *, limit: int = ...) -> list[RunOut]: ...

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]: ...

    def metric_stats(
        self, who: Principal, run_ids: Sequence[str], names: Sequence[str]
    ) -> dict[str, dict[str, SeriesStats]]: ...

    def logged_names(self, who: Principal) -> list[str]: ...


def first_clicked() -> bool:
    """Whether the input that fired the running callback (the one `triggered_id` names)
    was clicked, not a button that appeared with 0 clicks. A redrawn header fires its
    buttons together with the sort picker's new value, which `clicked` would count."""
    first = ctx.triggered[0] if ctx.triggered else {}
    return bool(first.get("value"))


def match(path: str) -> dict[str, str] | None:
    return {} if path in ("", "/") else None


def layout(data: RunsReader, who: Principal, query: Mapping[str, str]) -> html.Div:
    """The list as the URL's ``query`` names it (`RunsView.from_query`)."""
    view = RunsView.from_query(query)
    admin = who.can("admin")
    runs = data.runs(who, limit=READ_LIMIT + 1)
    rows, count, tags, states, first, last = show(data, who, view, runs)
    picker = column_picker(data.logged_names(who), config_keys(runs), view.group, view.columns)
    return html.Div(
        [
            html.H1(f"Runs in {who.project}"),
            html.Div(controls(view, tags, states), className="controls runs-controls"),
            html.Div(picker, className="controls runs-columns"),
            html.Div(pager(count, first, last), className="runs-pager"),
            html.Div(html.Span(PICK_HINT, className="muted"), id="compare-action"),
            tag_editor() if admin else None,
            note_editor() if admin else None,
            html.Div(id="runs-tag-message", className="message"),
            html.Div(id="runs-note-message", className="message"),
            html.Table(
                [html.Thead(header(view.sort, view.columns), id="runs-head"), rows],
                className="runs",
            ),
            dcc.Store(id="runs-view", data=view.to_store()),
            dcc.Store(id="compare-ticked", data=[]),
            dcc.Store(id="runs-changed", data=0),
            dcc.Store(id="runs-tag-editing", data=None),
            dcc.Store(id="runs-note-editing", data=None),
            dcc.Store(id="runs-tag-click"),  # a real click on a tag's × or edit (`ROW_CLICK_JS`)
            dcc.Store(id="runs-note-click"),  # a real click on a note's edit (`ROW_CLICK_JS`)
            dcc.Store(id="runs-group-click"),  # a real click on a group's ▸ or ▾
            html.Div(id="runs-url-sync", hidden=True),
            dcc.Interval(id="runs-refresh", interval=REFRESH_MS),
        ],
        className="card runs-page",
    )


def show(
    data: RunsReader, who: Principal, view: RunsView, read: list[RunOut] | None = None
) -> Shown:
    """The page of runs ``view`` selects, from one read of the project's runs (``read``,
    when the caller has it), and one read of its metric columns' values for the page's
    runs (`page_values`)."""
    read = data.runs(who, limit=READ_LIMIT + 1) if read is None else read
    capped = len(read) > READ_LIMIT
    runs = read[:READ_LIMIT]
    listing, values, said = select(data, who, view, runs)
    empty = NO_RUNS if not runs else NO_MATCH
    table = runs_table(
        listing.rows,
        admin=who.can("admin"),
        empty=empty,
        columns=view.columns,
        values=values,
        groups=listing.groups,
        group_key=view.group,
        opened=view.opened,
    )
    return (
        table,
        count_text(listing, capped=capped) + said,
        tag_options(runs, view),
        state_options(runs, view),
        listing.page <= 1,
        listing.page >= listing.pages,
    )


def select(
    data: RunsReader,
    who: Principal,
    view: RunsView,
    runs: list[RunOut],
    limit: int = METRIC_SORT_LIMIT,
) -> tuple[Listing, MetricValues, str]:
    """The page of ``runs`` the view shows, its metric columns' values, and what the count
    adds. Sorted by a metric column, the values of every matched run are read first (one
    read for all of them), up to ``limit`` runs; past it the list keeps its default order
    and says why."""
    sort_by = view.metric_sort
    if sort_by is None:
        listing = view.select(runs)
        return listing, page_values(data, who, listing.rows, view.columns), ""
    matched = [run for run in runs if view.matches(run)]
    if len(matched) > limit:
        listing = replace(view, sort=DEFAULT_SORT).select(runs)
        said = f" · not sorted by {sort_by.title}: more than {limit:,} runs match"
        return listing, page_values(data, who, listing.rows, view.columns), said
    values = page_values(data, who, matched, view.columns)
    return view.select(runs, values), values, ""


def page_values(
    data: RunsReader, who: Principal, rows: Sequence[RunOut], columns: Sequence[Column]
) -> MetricValues:
    """The metric columns' values of the page's runs ``rows``: one read for all of them,
    none without a metric column."""
    names = list(dict.fromkeys(c.name for c in columns if c.metric))
    if not names or not rows:
        return {}
    return data.metric_stats(who, [run.id for run in rows], names)


def refresh(
    data: RunsReader,
    who: Principal,
    store: object = None,
    tags_shown: object = None,
    states_shown: object = None,
    interval: object = None,
) -> Refreshed:
    """The table as it stands now, for the view in ``store`` (the page's periodic refresh,
    a change of view or of a run's tags); the filters' options only where they changed,
    so that an open picker stays as it is; the refresh's ``interval`` where it changes
    (:func:`refresh_interval`)."""
    started = time.monotonic()
    rows, count, tags, states, first, last = show(data, who, RunsView.from_store(store))
    every = refresh_interval(time.monotonic() - started)
    return (
        rows.children,
        count,
        dash.no_update if tags == tags_shown else tags,
        dash.no_update if states == states_shown else states,
        first,
        last,
        dash.no_update if every == interval else every,
    )


def refresh_interval(elapsed_s: float) -> int:
    """How often the list refreshes, in ms: every `REFRESH_MS`; where one refresh took
    longer than a quarter of that (a project of many thousands of runs), four times as long
    as it took, in whole seconds, at most `SLOWEST_REFRESH_MS`. A viewer keeps a server
    thread busy a quarter of the time at most.

    >>> refresh_interval(0.05), refresh_interval(1.2), refresh_interval(60.0)
    (2000, 5000, 30000)
    """
    wanted = math.ceil(4 * elapsed_s) * 1000
    return min(SLOWEST_REFRESH_MS, max(REFRESH_MS, wanted))


def update_view(
    store: object,
    trigger: TriggerId,
    click: bool = True,
    *,
    search: object,
    tags: object,
    states: object,
    config: object,
    sort: object,
) -> ViewChange | None:
    """The view after a change of a control (``trigger``: its id): the search, filters and
    sort from the controls' values, a sortable column's title clicked (that column, or
    reversed), the previous or next page. A config field that cannot be read keeps the
    conditions the view had and says why beside the field. None for a button that
    appeared rather than was clicked (``click``)."""
    if trigger in (*SORT_BUTTONS, "runs-prev", "runs-next") and not click:
        return None
    view = RunsView.from_store(store)
    error = ""
    conditions = None
    try:
        conditions = parse_conditions(config if isinstance(config, str) else "")
    except ConfigFilterError as exc:
        error = str(exc)
    new = view.with_controls(search=search, tags=tags, states=states, config=conditions, sort=sort)
    if isinstance(trigger, str) and trigger in SORT_BUTTONS:
        column = trigger.removeprefix("runs-sort-")
        new = replace(new, sort=toggled_sort(new.sort, column), page=1)
    elif trigger == "runs-prev":
        new = replace(new, page=max(1, view.page - 1))
    elif trigger == "runs-next":
        new = replace(new, page=view.page + 1)
    stored = dash.no_update if new == view else new.to_store()
    return stored, error, new.sort, *sort_labels(new.sort)


def ticked_runs(picked: object) -> list[str]:
    """The ticked run ids, each once, in the list's order (``picked``: each row's values).

    >>> ticked_runs([["r2"], [], ["r1"], ["r2"]])
    ['r2', 'r1']
    """
    rows = picked if isinstance(picked, list) else []
    ticked = (v for row in rows if isinstance(row, list) for v in row if isinstance(v, str))
    return list(dict.fromkeys(ticked))


def compare_action(
    data: RunsReader, who: Principal, picked: object, shown: object = None, boxes: object = None
) -> tuple[Any, list[str]] | None:
    """A link to compare the ticked runs on their default metric
    (:func:`~.compare_view.default_metric`), or a hint with fewer than two or more than
    `MAX_COMPARED_RUNS`, and the ticked runs; None when they are the runs ``shown``
    already (the table's refresh redraws the boxes every few seconds). A run that has gone
    from the project is left out.

    ``boxes``: the ids of the boxes ``picked`` comes from. A run ticked before whose box
    is not among them (a search or filter hides it now) stays ticked."""
    ticked = ticked_runs(picked)
    if isinstance(boxes, list) and isinstance(shown, list):
        visible = {b.get("run") for b in boxes if isinstance(b, Mapping)}
        hidden = [r for r in shown if isinstance(r, str) and r not in visible]
        ticked = list(dict.fromkeys([*hidden, *ticked]))
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


def register(app: dash.Dash, data: RunsReader) -> None:
    @app.callback(
        Output("runs-view", "data"),
        Output("runs-config-error", "children"),
        Output("runs-sort", "value"),
        *[Output(button, "children") for button in SORT_BUTTONS],
        Input("runs-search", "value"),
        Input("runs-tag", "value"),
        Input("runs-state", "value"),
        Input("runs-config", "value"),
        Input("runs-sort", "value"),
        *[Input(button, "n_clicks") for button in SORT_BUTTONS],
        Input("runs-prev", "n_clicks"),
        Input("runs-next", "n_clicks"),
        State("runs-view", "data"),
        prevent_initial_call=True,
    )
    def on_view(
        search: object, tags: object, states: object, config: object, sort: object, *rest: object
    ) -> ViewChange:
        controls = {"search": search, "tags": tags, "states": states, "config": config}
        changed = update_view(rest[-1], triggered_id(), first_clicked(), sort=sort, **controls)
        return or_prevent(changed)

    @app.callback(
        Output("runs-table", "children"),
        Output("runs-count", "children"),
        Output("runs-tag", "options"),
        Output("runs-state", "options"),
        Output("runs-prev", "disabled"),
        Output("runs-next", "disabled"),
        Output("runs-refresh", "interval"),
        Input("runs-refresh", "n_intervals"),
        Input("runs-view", "data"),
        Input("runs-changed", "data"),
        State("runs-tag", "options"),
        State("runs-state", "options"),
        State("runs-refresh", "interval"),
        prevent_initial_call=True,
    )
    async def on_refresh(_n: object, store: object, _changed: object, *shown: object) -> Refreshed:
        return await in_thread(refresh, data, viewer(), store, *shown)

    @app.callback(
        Output("compare-action", "children"),
        Output("compare-ticked", "data"),
        Input({"type": "compare-pick", "run": ALL}, "value"),
        State({"type": "compare-pick", "run": ALL}, "id"),
        State("compare-ticked", "data"),
        prevent_initial_call=True,
    )
    async def on_pick(picked: object, boxes: object, shown: object) -> tuple[Any, list[str]]:
        return or_prevent(await in_thread(compare_action, data, viewer(), picked, shown, boxes))

    @app.callback(
        Output("runs-tag-editing", "data"),
        Output("runs-tag-message", "children"),
        Output("runs-changed", "data"),
        Output("runs-tag-editor", "hidden"),
        Output("runs-tag-input", "value"),
        Output("runs-tag-title", "children"),
        Input("runs-tag-click", "data"),
        Input("runs-tag-save", "n_clicks"),
        Input("runs-tag-input", "n_submit"),
        Input("runs-tag-cancel", "n_clicks"),
        State("runs-tag-editing", "data"),
        State("runs-tag-input", "value"),
        State("runs-changed", "data"),
        prevent_initial_call=True,
    )
    async def on_tags(tag_click: object, *values: object) -> TagChange:
        editing, typed, changed = values[-3:]
        trigger, click = triggered_id(), clicked()
        if trigger == "runs-tag-click":
            trigger, click = clicked_row(tag_click)
        return or_prevent(
            await in_thread(change_tags, data, viewer(), trigger, click, editing, typed, changed)
        )

    @app.callback(
        Output("runs-view", "data", allow_duplicate=True),
        Output("runs-head", "children"),
        Output("runs-sort", "options"),
        Output("runs-sort", "value", allow_duplicate=True),
        Input("runs-col-add-metric", "n_clicks"),
        Input("runs-col-add-config", "n_clicks"),
        Input("runs-group", "value"),
        Input({"type": "runs-col-remove", "col": ALL}, "n_clicks"),
        Input({"type": "runs-sort-col", "col": ALL}, "n_clicks"),
        Input("runs-group-click", "data"),
        State("runs-col-metric", "value"),
        State("runs-col-stat", "value"),
        State("runs-col-config", "value"),
        State("runs-view", "data"),
        prevent_initial_call=True,
    )
    def on_columns(*values: object) -> ColumnsChange:
        metric, stat, config_key, store = values[-4:]
        trigger, click = triggered_id(), first_clicked()
        if trigger == "runs-group-click":
            trigger, click = clicked_row(values[5])
        changed = update_columns(
            store,
            trigger,
            click,
            metric=metric,
            stat=stat,
            config_key=config_key,
            group=values[2],
        )
        return or_prevent(changed)

    @app.callback(
        Output("runs-note-editing", "data"),
        Output("runs-note-message", "children"),
        Output("runs-changed", "data", allow_duplicate=True),
        Output("runs-note-editor", "hidden"),
        Output("runs-note-input", "value"),
        Output("runs-note-title", "children"),
        Input("runs-note-click", "data"),
        Input("runs-note-save", "n_clicks"),
        Input("runs-note-cancel", "n_clicks"),
        State("runs-note-editing", "data"),
        State("runs-note-input", "value"),
        State("runs-changed", "data"),
        prevent_initial_call=True,
    )
    async def on_note(note_click: object, *values: object) -> NoteChange:
        editing, typed, changed = values[-3:]
        trigger, click = triggered_id(), clicked()
        if trigger == "runs-note-click":
            trigger, click = clicked_row(note_click)
        return or_prevent(
            await in_thread(change_note, data, viewer(), trigger, click, editing, typed, changed)
        )

    # The table's tag, note and group buttons reach their callbacks through click stores,
    # filled only by a real click: on their own n_clicks, each refresh of the table ran the
    # callbacks again, and Dash dropped the answer of a save or an add still on its way.
    app.clientside_callback(
        ROW_CLICK_JS,
        Output("runs-tag-click", "data"),
        Input({"type": "run-tag-edit", "run": ALL}, "n_clicks"),
        Input({"type": "run-tag-remove", "run": ALL, "tag": ALL}, "n_clicks"),
    )
    app.clientside_callback(
        ROW_CLICK_JS,
        Output("runs-note-click", "data"),
        Input({"type": "run-note-edit", "run": ALL}, "n_clicks"),
    )
    app.clientside_callback(
        ROW_CLICK_JS,
        Output("runs-group-click", "data"),
        Input({"type": "runs-group-toggle", "group": ALL}, "n_clicks"),
    )

    app.clientside_callback(
        URL_SYNC_JS, Output("runs-url-sync", "children"), Input("runs-view", "data")
    )
