"""The runs list's changes of its chosen columns and groups: a column added, taken off or
sorted by, the key to group by, a group opened or closed. Pure: the view in, the view out,
with the header and sort choices that go with it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..wiring import TriggerId
from .runs_columns import STATS, Column
from .runs_table import SORT_OPTIONS, header, sort_choices
from .runs_view import RunsView, toggled_sort

__all__ = ["ColumnsChange", "update_columns"]

ColumnsChange = tuple[Any, Any, Any, Any]
"""The view's store, the table's header, the sort picker's options and its value."""


def update_columns(
    store: object,
    trigger: TriggerId,
    click: bool = True,
    *,
    metric: object = None,
    stat: object = None,
    config_key: object = None,
    group: object = None,
) -> ColumnsChange | None:
    """The view after a change of its columns or groups (``trigger``: the control's id):
    *add* beside the metric picker adds ``metric``'s ``stat`` column, *add* beside the
    config picker the ``config_key`` column, a column's × takes it off, a config column's
    title sorts by it (again: reversed), the group picker groups by ``group`` (cleared: not
    grouped), a group's ▸ shows its runs (▾ hides them). None for a button that appeared
    rather than was clicked (``click``), or nothing changed."""
    view = RunsView.from_store(store)
    kind = trigger.get("type") if isinstance(trigger, Mapping) else trigger
    if kind != "runs-group" and not click:
        return None
    new = view
    if kind == "runs-col-add-metric" and isinstance(metric, str):
        new = view.with_column(Column.parse(f"{stat if stat in STATS else 'last'}:{metric}"))
    elif kind == "runs-col-add-config" and isinstance(config_key, str):
        new = view.with_column(Column.parse(f"config:{config_key.strip()}"))
    elif kind == "runs-group":
        new = view.grouped_by(group)
    elif isinstance(trigger, Mapping) and isinstance(trigger.get("col"), str):
        column = trigger["col"]
        if kind == "runs-col-remove":
            new = view.without_column(column)
        elif kind == "runs-sort-col":
            new = replace(view, sort=toggled_sort(view.sort, column), page=1)
    elif kind == "runs-group-toggle" and isinstance(trigger, Mapping):
        gid = trigger.get("group")
        new = view.toggled(gid) if isinstance(gid, str) else view
    if new == view:
        return None
    options = [*SORT_OPTIONS, *sort_choices(new.columns)]
    return new.to_store(), header(new.sort, new.columns), options, new.sort
