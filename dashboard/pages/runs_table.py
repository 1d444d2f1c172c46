"""The runs list's parts: its controls (search, filters, sort, pager), the table's header,
whose columns sort the list, and one row a run, with a box to tick it for a comparison, its
chosen columns (:mod:`.runs_cells`) and its note and, for admins, buttons to change its
tags and its note; grouped, a row a group before its runs. Pure: it draws what it is
given."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dash import dcc, html

from normwatch.server.schemas import RunOut

from .runs_cells import column_headers, group_row, run_cells
from .runs_columns import Column, Group, MetricValues
from .runs_view import PAGE_SIZE, SORTS, STATES, Listing, RunsView

__all__ = [
    "COLUMNS",
    "CONFIG_HINT",
    "NO_MATCH",
    "NO_RUNS",
    "SORT_OPTIONS",
    "ago",
    "controls",
    "count_text",
    "header",
    "pager",
    "pick_box",
    "runs_table",
    "sort_choices",
    "sort_labels",
    "state_options",
    "tag_options",
]

COLUMNS = ("name", "status", "segment", "last step", "last seen", "created", "tags")
SORTABLE = {
    "name": "name",
    "status": "status",
    "last step": "last_step",
    "last seen": "last_seen",
    "created": "created",
}
"""Each sortable column's title and its name in ``sort=``."""
NO_RUNS = "No runs yet. Start a trainer with normwatch.client.Run, or POST /api/v1/runs."
NO_MATCH = "No runs match this search and these filters."
CONFIG_HINT = "optimizer.lr>=3e-4, model.qk_norm=true"
SORT_OPTIONS = [
    {"label": f"{title} {arrow}", "value": f"{sign}{column}"}
    for title, column in SORTABLE.items()
    for sign, arrow in (("", "↑"), ("-", "↓"))
]


def ago(when: datetime, now: datetime | None = None) -> str:
    """'12 s ago', '5 min ago', '3 h ago', '2 d ago': whole units, rounded down; a time
    in the future reads '0 s ago'."""
    now = now or datetime.now(UTC)
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def sort_labels(sort: str) -> list[str]:
    """Each sortable column's header text, in `SORTS` order: the column sorted by carries
    an arrow (↑ ascending, ↓ descending).

    >>> sort_labels("-last_step")
    ['name', 'status', 'last step ↓', 'last seen', 'created']
    """
    column, arrow = sort.removeprefix("-"), "↓" if sort.startswith("-") else "↑"
    titles = {name: title for title, name in SORTABLE.items()}
    return [f"{titles[c]} {arrow}" if c == column else titles[c] for c in SORTS]


def header(sort: str, columns: Sequence[Column] = ()) -> html.Tr:
    """The header row; a click on a sortable column's title sorts by it (again: reversed);
    the chosen ``columns`` (`runs_cells.column_headers`) before the notes."""
    labels = dict(zip(SORTS, sort_labels(sort), strict=True))
    cells = []
    for title in COLUMNS:
        column = SORTABLE.get(title)
        if column is None:
            cells.append(html.Th(title))
            continue
        button = html.Button(
            labels[column],
            id=f"runs-sort-{column}",
            n_clicks=0,
            className="sort-header",
            title=f"sort by {title}; again to reverse",
        )
        cells.append(html.Th(button))
    return html.Tr([*cells, *column_headers(columns, sort), html.Th("notes")], id="runs-head-row")


def runs_table(
    runs: Sequence[RunOut],
    now: datetime | None = None,
    *,
    admin: bool = False,
    empty: str = NO_RUNS,
    columns: Sequence[Column] = (),
    values: MetricValues | None = None,
    groups: Sequence[Group] | None = None,
    group_key: str = "",
    opened: Sequence[str] = (),
) -> html.Tbody:
    """The table's body: one row a run, each name a link to its page beside a box to tick it
    for a comparison, its values in the chosen ``columns`` (metrics' from ``values``), its
    note; ``empty`` in a row of its own when there is none. An ``admin`` gets a button to
    remove each tag, one to edit the run's tags and one to edit its note. With ``groups``
    (grouped by the config key ``group_key``), a row a group, followed by its runs where
    the group is ``opened``."""
    width = len(COLUMNS) + len(columns) + 1
    if not runs:
        row = html.Tr([html.Td(empty, colSpan=width, className="empty")])
        return html.Tbody([row], id="runs-table")
    now = now or datetime.now(UTC)
    values = values or {}
    if groups is None:
        rows = [_row(run, now, admin, columns, values) for run in runs]
        return html.Tbody(rows, id="runs-table")
    drawn: list[html.Tr] = []
    for group in groups:
        open_ = group.id in opened
        drawn.append(group_row(group, group_key, columns, values, open_=open_, span=len(COLUMNS)))
        if open_:
            drawn += [_row(run, now, admin, columns, values, member=True) for run in group.runs]
    return html.Tbody(drawn, id="runs-table")


def _row(
    run: RunOut,
    now: datetime,
    admin: bool,
    columns: Sequence[Column] = (),
    values: MetricValues | None = None,
    *,
    member: bool = False,
) -> html.Tr:
    return html.Tr(
        [
            html.Td(
                [pick_box(run.id), dcc.Link(run.name, href=f"/runs/{run.id}", className="run-link")]
            ),
            html.Td(html.Span(run.status, className=f"status status-{run.status}")),
            html.Td(run.segment),
            html.Td("—" if run.last_step is None else f"{run.last_step:,}"),
            html.Td(ago(run.last_seen, now), title=run.last_seen.isoformat()),
            html.Td(ago(run.created_at, now), title=run.created_at.isoformat()),
            html.Td(_tags(run, admin), className="tags"),
            *run_cells(run, columns, values or {}),
            html.Td(_note(run, admin), className="notes"),
        ],
        className="run-row group-member" if member else "run-row",
    )


NOTE_SHOWN = 140
"""Characters of a note its cell shows; the whole note is its tooltip."""


def _note(run: RunOut, admin: bool) -> list[Any]:
    note = run.notes or ""
    shown = note if len(note) <= NOTE_SHOWN else note[: NOTE_SHOWN - 1] + "…"
    text = html.Span(shown, className="run-note", title=note or None)
    if not admin:
        return [text]
    edit = html.Button(
        "edit note" if note else "+ note",
        id={"type": "run-note-edit", "run": run.id},
        n_clicks=0,
        className="small note-edit",
    )
    return [text, edit]


def _tags(run: RunOut, admin: bool) -> list[Any]:
    if not admin:
        return [html.Span(tag, className="tag") for tag in run.tags]
    chips: list[Any] = [
        html.Span(
            [
                tag,
                html.Button(
                    "×",
                    id={"type": "run-tag-remove", "run": run.id, "tag": tag},
                    n_clicks=0,
                    className="tag-remove",
                    title=f"remove tag {tag}",
                ),
            ],
            className="tag",
        )
        for tag in run.tags
    ]
    edit = html.Button(
        "edit tags" if run.tags else "+ tag",
        id={"type": "run-tag-edit", "run": run.id},
        n_clicks=0,
        className="small tag-edit",
    )
    return [*chips, edit]


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


def tag_options(runs: Sequence[RunOut], view: RunsView) -> list[str]:
    """The project's tags, sorted, with those the view filters by (a link may name a tag
    no run has: it stays shown, to be taken out)."""
    return sorted({tag for run in runs for tag in run.tags} | set(view.tags))


def state_options(runs: Sequence[RunOut], view: RunsView) -> list[str]:
    """The states a run may be in, then any other the project's runs or the view name."""
    seen = [run.status for run in runs] + list(view.states)
    return [*STATES, *sorted(set(seen) - set(STATES))]


def count_text(listing: Listing, *, capped: bool) -> str:
    """What the table shows of how many: '3 of 40 runs', '40 runs · page 2 of 3'; ``capped``
    when the project has more runs than were read; grouped, how many groups.

    >>> count_text(Listing([], 120, 400, 2, 3), capped=False)
    '120 of 400 runs · 51–100 on page 2 of 3'
    """
    total = f"{listing.total:,}{'+' if capped else ''}"
    noun = "run" if listing.total == 1 and not capped else "runs"
    shown = f"{listing.matched:,} of " if listing.matched != listing.total else ""
    said = f"{shown}{total} {noun}"
    if listing.groups is not None:
        said += f" in {listing.group_count:,} group{'' if listing.group_count == 1 else 's'}"
        if listing.pages > 1:
            said += f" · page {listing.page} of {listing.pages}"
        return said
    if listing.pages > 1:
        first = (listing.page - 1) * PAGE_SIZE + 1
        last = min(listing.page * PAGE_SIZE, listing.matched)
        said += f" · {first:,}–{last:,} on page {listing.page} of {listing.pages}"
    return said


def controls(view: RunsView, tags: list[str], states: list[str]) -> list[Any]:
    """The search box, the tag, state and config filters and the sort picker, showing
    ``view``; ``tags`` and ``states``: the filters' options."""
    return [
        html.Label(
            [
                "search",
                dcc.Input(
                    id="runs-search",
                    type="text",
                    value=view.search,
                    debounce=0.3,
                    placeholder="name or id",
                ),
            ],
            className="picker narrow",
        ),
        html.Label(
            ["tags", _multi("runs-tag", tags, view.tags, "any tag")], className="picker narrow"
        ),
        html.Label(
            ["state", _multi("runs-state", states, view.states, "any state")],
            className="picker narrow",
        ),
        html.Label(
            [
                "config (Enter applies)",
                dcc.Input(
                    id="runs-config",
                    type="text",
                    value=view.config_text,
                    debounce=True,
                    placeholder=CONFIG_HINT,
                ),
                html.Span(id="runs-config-error", className="field-error"),
            ],
            className="picker",
        ),
        html.Label(
            [
                "sort",
                dcc.Dropdown(
                    id="runs-sort",
                    options=[*SORT_OPTIONS, *sort_choices(view.columns)],
                    value=view.sort,
                    clearable=False,
                    searchable=False,
                ),
            ],
            className="picker narrow",
        ),
    ]


def sort_choices(columns: Sequence[Column]) -> list[dict[str, str]]:
    """The sort picker's choices for the chosen columns, both ways."""
    return [
        {"label": f"{c.title} {arrow}", "value": f"{sign}{c.text}"}
        for c in columns
        for sign, arrow in (("", "↑"), ("-", "↓"))
    ]


def pager(count: str, first: bool, last: bool) -> list[Any]:
    """The count of runs listed, and the buttons to the previous and next pages (disabled
    on the ``first`` and ``last``)."""
    return [
        html.Span(count, id="runs-count", className="muted"),
        html.Button("‹ previous", id="runs-prev", n_clicks=0, disabled=first, className="small"),
        html.Button("next ›", id="runs-next", n_clicks=0, disabled=last, className="small"),
    ]


def _multi(id_: str, options: list[str], value: Sequence[str], placeholder: str) -> Any:
    return dcc.Dropdown(
        id=id_, options=options, value=list(value), multi=True, placeholder=placeholder
    )
