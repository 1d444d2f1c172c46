"""The runs list's chosen columns as the page draws them: the picker that adds a metric or
config column and picks the key to group by, each chosen column's header (a × to take it
off; a config column's title sorts by it), a run's cells in them, and a group's row. Pure:
it draws what it is given."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dash import dcc, html

from normwatch.server.services.analytics import MAX_COMPARED_RUNS

from .compare_view import compare_href
from .runs_columns import (
    STATS,
    Column,
    Group,
    MetricValues,
    cell_text,
    column_value,
    group_cell,
)

__all__ = ["column_headers", "column_picker", "group_href", "group_row", "run_cells"]


def column_picker(
    names: Sequence[str], keys: Sequence[str], group: str, columns: Sequence[Column]
) -> list[Any]:
    """Pick a metric (``names``: those the project's runs logged) and what of it to show,
    or a config key (``keys``), to add a column; pick a config key to group by. A chosen
    name no longer suggested stays offered."""
    chosen_names = [c.name for c in columns if c.metric]
    chosen_keys = [c.name for c in columns if not c.metric] + ([group] if group else [])
    metric_options = sorted({*names, *chosen_names})
    key_options = sorted({*keys, *chosen_keys})
    return [
        html.Label(
            [
                "metric column",
                html.Div(
                    [
                        dcc.Dropdown(
                            id="runs-col-metric",
                            options=metric_options,
                            placeholder="metric",
                            className="col-metric",
                        ),
                        dcc.Dropdown(
                            id="runs-col-stat",
                            options=[{"label": s, "value": s} for s in STATS],
                            value="last",
                            clearable=False,
                            searchable=False,
                            className="col-stat",
                        ),
                        html.Button("add", id="runs-col-add-metric", n_clicks=0, className="small"),
                    ],
                    className="inline",
                ),
            ],
            className="picker",
        ),
        html.Label(
            [
                "config column",
                html.Div(
                    [
                        dcc.Dropdown(
                            id="runs-col-config", options=key_options, placeholder="config key"
                        ),
                        html.Button("add", id="runs-col-add-config", n_clicks=0, className="small"),
                    ],
                    className="inline",
                ),
            ],
            className="picker",
        ),
        html.Label(
            [
                "group by",
                dcc.Dropdown(
                    id="runs-group",
                    options=key_options,
                    value=group or None,
                    placeholder="config key",
                ),
            ],
            className="picker",
        ),
    ]


def column_headers(columns: Sequence[Column], sort: str) -> list[html.Th]:
    """A header cell per chosen column: its title, which sorts by it (again: reversed),
    and a × that takes the column off."""
    cells = []
    for column in columns:
        remove = html.Button(
            "×",
            id={"type": "runs-col-remove", "col": column.text},
            n_clicks=0,
            className="col-remove",
            title=f"remove column {column.title}",
        )
        arrow = ""
        if sort.removeprefix("-") == column.text:
            arrow = " ↓" if sort.startswith("-") else " ↑"
        title = html.Button(
            column.title + arrow,
            id={"type": "runs-sort-col", "col": column.text},
            n_clicks=0,
            className="sort-header",
            title=f"sort by {column.title}; again to reverse",
        )
        cells.append(html.Th([title, remove], className="chosen-col"))
    return cells


def run_cells(run: Any, columns: Sequence[Column], values: MetricValues) -> list[html.Td]:
    """The run's cells in the chosen columns."""
    return [
        html.Td(cell_text(column_value(run, c, values), c), className="chosen-cell")
        for c in columns
    ]


def group_href(group: Group, columns: Sequence[Column]) -> str | None:
    """The compare page for the group's first `MAX_COMPARED_RUNS` runs, their mean drawn,
    on the first metric column's metric (the page's default without one); None for a group
    of one run."""
    if len(group.runs) < 2:
        return None
    metric = next((c.name for c in columns if c.metric), None)
    ids = [run.id for run in group.runs[:MAX_COMPARED_RUNS]]
    return compare_href(ids, metric) + "&group=mean"


def group_row(
    group: Group,
    key: str,
    columns: Sequence[Column],
    values: MetricValues,
    *,
    open_: bool,
    span: int,
) -> html.Tr:
    """The row standing for a group: a button that shows or hides its runs, the key's value
    and how many runs share it, a link comparing them, spanning the ``span`` fixed columns;
    then the group's cell in each chosen column (`group_cell`)."""
    count = len(group.runs)
    href = group_href(group, columns)
    compared = min(count, MAX_COMPARED_RUNS)
    link: Any = None
    if href is not None:
        words = f"compare {compared}" + ("" if compared == count else f" of {count}")
        link = dcc.Link(words, href=href, className="group-compare")
    head = html.Td(
        [
            html.Button(
                "▾" if open_ else "▸",
                id={"type": "runs-group-toggle", "group": group.id},
                n_clicks=0,
                className="group-toggle",
                title="hide its runs" if open_ else "show its runs",
            ),
            html.Span(f"{key} = {group.label}", className="group-label"),
            html.Span(f"{count} run{'' if count == 1 else 's'}", className="group-count"),
            link,
        ],
        colSpan=span,
    )
    cells = [html.Td(group_cell(group, c, values), className="chosen-cell") for c in columns]
    return html.Tr([head, *cells, html.Td()], className="group-row")
