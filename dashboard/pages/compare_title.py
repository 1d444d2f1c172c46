"""The compared runs grouped by a config key (`.compare_legend.group_runs`), and their names
at the top of the compare page, each after a square of the colour its line is drawn in:
its own, or its group's while the runs are grouped, so the squares never say another
colour than the chart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dash import html

from normwatch.server.schemas.analytics import CompareOut

from ..compare_legend import Group, group_runs
from ..figures import run_color
from .compare_view import CompareView

__all__ = ["groups_of", "run_colours", "title_runs", "titles_of"]


def groups_of(key: str, compared: CompareOut) -> list[Group]:
    """The compared runs grouped by their value of config key ``key``: the values of a key
    whose values differ come with the comparison; any other key has one value (or none) in
    every run, and the runs are one group."""
    values = compared.config_diff.get(key)
    if values is None:
        return [Group(f"{key}: one value in every run", tuple(range(len(compared.runs))))]
    return group_runs(key, values)


def run_colours(count: int, group_by: str | None, diff: Mapping[str, Sequence[Any]]) -> list[str]:
    """The colour of each of ``count`` runs' lines: `run_color` in run order, or with
    ``group_by`` the colour of each run's group (``diff``: the config keys whose values
    differ, each with every run's value; a key that does not differ makes one group).

    >>> run_colours(3, "lr", {"lr": [1, 2, 1]}) == [run_color(0), run_color(1), run_color(0)]
    True
    >>> run_colours(2, "seed", {"lr": [1, 2]}) == [run_color(0)] * 2
    True
    """
    if group_by is None:
        return [run_color(i) for i in range(count)]
    values = diff.get(group_by)
    if values is None or len(values) != count:
        return [run_color(0)] * count
    colours = [run_color(0)] * count
    for number, group in enumerate(group_runs(group_by, values)):
        for index in group.runs:
            colours[index] = run_color(number)
    return colours


def title_runs(labels: Sequence[str], colours: Sequence[str]) -> list[html.Span]:
    """Each run's label after a square of its line's colour."""
    return [
        html.Span(
            [html.Span(className="swatch", style={"background": colour}), label],
            className="compared-run",
        )
        for label, colour in zip(labels, colours, strict=True)
    ]


def titles_of(store: object, configs: object) -> list[html.Span] | None:
    """The names for the view in ``store`` with the runs' ``configs`` as the page stored
    them (``{"labels": [...], "diff": {key: [values]}}``); None for a store that holds no
    view or configs that the page cannot have written (both come back from the browser)."""
    view = CompareView.from_store(store)
    if view is None or not isinstance(configs, dict):
        return None
    labels, diff = configs.get("labels"), configs.get("diff")
    if not (isinstance(labels, list) and all(isinstance(label, str) for label in labels)):
        return None
    if not (isinstance(diff, dict) and all(isinstance(v, list) for v in diff.values())):
        return None
    if len(labels) != len(view.runs):
        return None
    return title_runs(labels, run_colours(len(labels), view.group_by, diff))
