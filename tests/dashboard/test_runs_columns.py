"""The runs table's chosen columns and groups, pure: columns named in the URL, numbers as
the table writes them, config keys offered, runs folded by a config key and each group's
cells, the view's URL with columns, group and open groups, and the changes a click makes."""

from __future__ import annotations

import doctest
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from normwatch.dashboard.pages import runs_cells, runs_choices, runs_columns, runs_table
from normwatch.dashboard.pages.runs_choices import update_columns
from normwatch.dashboard.pages.runs_columns import (
    Column,
    config_keys,
    fold,
    group_cell,
    group_id,
    number_text,
)
from normwatch.dashboard.pages.runs_view import PAGE_SIZE, RunsView
from normwatch.dashboard.routing import query_of
from normwatch.server.schemas import RunOut
from normwatch.server.storage.run_stats import SeriesStats

from .components import find, text

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(name: str, config: dict[str, Any], age: int = 0) -> RunOut:
    return RunOut(
        id=name,
        project="p",
        name=name,
        status="running",
        segment=1,
        config=config,
        tags=[],
        last_step=None,
        last_seen=T0,
        created_at=T0 - timedelta(seconds=age),
    )


def test_doctests() -> None:
    for module in (runs_columns, runs_cells, runs_choices):
        assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize(
    ("text_", "column"),
    [
        ("last:train/loss", Column("last", "train/loss")),
        ("max:a:b", Column("max", "a:b")),
        ("config:optimizer.lr", Column("config", "optimizer.lr")),
        ("mean:loss", None),
        ("last:", None),
        ("loss", None),
        ("last:a\nb", None),
        ("last:" + "x" * 513, None),
        (5, None),
    ],
)
def test_a_column_from_its_text(text_: object, column: Column | None) -> None:
    assert Column.parse(text_) == column
    if column is not None:
        assert Column.parse(column.text) == column


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (0.123456, "0.1235"),
        (123456.0, "1.235e+05"),
        (1e-9, "1e-09"),
        (2.0, "2"),
        (-0.5, "-0.5"),
        (math.nan, "NaN"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (1024, "1024"),
    ],
)
def test_every_number_with_four_significant_digits(value: float, said: str) -> None:
    assert number_text(value) == said


def test_config_keys_are_the_leaves_of_every_config() -> None:
    runs = [
        run("a", {"optimizer": {"lr": 1e-3, "betas": [0.9, 0.95]}, "seed": 1}),
        run("b", {"optimizer.lr": 3e-4, "model": {}, "data": {"path": "x"}}),
    ]
    assert config_keys(runs) == ["data.path", "model", "optimizer.betas", "optimizer.lr", "seed"]


def test_runs_fold_by_a_config_value() -> None:
    runs = [
        run("a", {"lr": 1e-3}),
        run("b", {"lr": "warm"}),
        run("c", {"lr": 3e-4}),
        run("d", {}),
        run("e", {"lr": 0.001}),
        run("f", {"bs": 48.0}),
        run("g", {"lr": True}),
    ]
    groups = fold(runs, "lr")
    assert [(g.id, g.label, [r.name for r in g.runs]) for g in groups] == [
        ("0.0003", "0.0003", ["c"]),
        ("0.001", "0.001", ["a", "e"]),
        ('"warm"', "warm", ["b"]),
        ("true", "true", ["g"]),
        ("~", "(no value)", ["d", "f"]),
    ]
    assert group_id(48.0) == group_id(48) == "48"


def test_a_groups_cells_are_the_mean_and_range_of_its_runs() -> None:
    [group] = fold([run("a", {"lr": 1}), run("b", {"lr": 1}), run("c", {"lr": 1})], "lr")
    values = {
        "a": {"loss": SeriesStats(9, 1.0, 0.5, 4.0)},
        "b": {"loss": SeriesStats(9, 2.0, math.nan, 8.0)},
        "c": {"loss": SeriesStats(9, math.nan, None, None)},
    }
    assert group_cell(group, Column("last", "loss"), values) == "1.5 (1–2)"
    assert group_cell(group, Column("min", "loss"), values) == "0.5"
    assert group_cell(group, Column("max", "loss"), values) == "6 (4–8)"
    assert group_cell(group, Column("last", "acc"), values) == "—"
    nan_only = {"c": values["c"]}
    assert group_cell(group, Column("last", "loss"), nan_only) == "NaN"
    assert group_cell(group, Column("config", "lr"), values) == "1"
    [mixed] = fold([run("a", {"lr": 1, "s": 1}), run("b", {"lr": 1, "s": 2})], "lr")
    assert group_cell(mixed, Column("config", "s"), {}) == "2 values"
    assert group_cell(mixed, Column("config", "none"), {}) == "—"


def test_a_groups_row_links_the_compare_page_with_the_mean() -> None:
    members = [run(f"r{i}", {"lr": 1}) for i in range(10)]
    [group] = fold(members, "lr")
    columns = (Column("config", "lr"), Column("min", "loss"))
    href = runs_cells.group_href(group, columns)
    ids = "&".join(f"run=r{i}" for i in range(8))
    assert href == f"/compare?{ids}&metric=loss&group=mean"
    row = runs_cells.group_row(group, "lr", columns, {}, open_=False, span=7)
    assert [a["children"] for a in find(row, "Link")] == ["compare 8 of 10"]
    assert find(row, "Button")[0]["id"] == {"type": "runs-group-toggle", "group": "1"}
    [single] = fold(members[:1], "lr")
    assert runs_cells.group_href(single, columns) is None
    assert "1 run" in text(runs_cells.group_row(single, "lr", columns, {}, open_=True, span=7))


def test_the_url_keeps_columns_group_and_open_groups() -> None:
    url = (
        "?sort=-config%3Alr&col=min%3Aloss&col=config%3Alr&col=bad&col=min%3Aloss"
        "&group=lr&open=0.001&open=~"
    )
    view = RunsView.from_query(query_of(url))
    assert view.columns == (Column("min", "loss"), Column("config", "lr"))
    assert (view.sort, view.group, view.opened) == ("-config:lr", "lr", ("0.001", "~"))
    again = "?sort=-config%3Alr&col=min%3Aloss&col=config%3Alr&group=lr&open=0.001&open=~"
    assert view.to_url() == again
    assert RunsView.from_store(view.to_store()) == view
    # A sort by a column not chosen is the default; open groups without a group are nothing.
    assert RunsView.from_query(query_of("?col=min%3Aloss&sort=-min%3Aloss")).sort == "-min:loss"
    assert RunsView.from_query(query_of("?sort=config%3Alr")).sort == "-last_seen"
    assert RunsView.from_query(query_of("?open=0.001")).opened == ()


def test_a_config_column_sorts_numbers_then_text_and_runs_without_it_last() -> None:
    runs = [
        run("a", {"lr": 1e-3}),
        run("b", {"lr": "warm"}),
        run("c", {"lr": 3e-4}),
        run("d", {}),
        run("e", {"lr": 1e-2}),
    ]
    view = RunsView(columns=(Column("config", "lr"),), sort="config:lr")
    assert [r.name for r in view.select(runs).rows] == ["c", "a", "e", "b", "d"]
    backwards = RunsView(columns=(Column("config", "lr"),), sort="-config:lr")
    assert [r.name for r in backwards.select(runs).rows] == ["b", "e", "a", "c", "d"]


def test_a_grouped_view_pages_by_groups() -> None:
    runs = [run(f"r{i}", {"seed": i // 2}) for i in range(2 * PAGE_SIZE + 2)]
    listing = RunsView(group="seed", page=2).select(runs)
    assert (listing.page, listing.pages, listing.group_count) == (2, 2, PAGE_SIZE + 1)
    assert listing.groups is not None
    assert [g.id for g in listing.groups] == [str(PAGE_SIZE)]
    assert {r.name for r in listing.rows} == {f"r{2 * PAGE_SIZE}", f"r{2 * PAGE_SIZE + 1}"}


def test_clicks_on_the_column_and_group_controls() -> None:
    store = RunsView().to_store()
    added = update_columns(store, "runs-col-add-metric", metric="loss", stat="min")
    assert added is not None
    store, head, options, sort = added
    assert store["url"] == "?col=min%3Aloss"
    assert "loss (min)" in text(head)
    assert (len(options), sort) == (12, "-last_seen")
    assert update_columns(store, "runs-col-add-metric", metric="loss", stat="min") is None
    store = update_columns(store, "runs-col-add-config", config_key=" lr ")[0]  # type: ignore[index]
    by_lr = {"type": "runs-sort-col", "col": "config:lr"}
    store, _, options, sort = update_columns(store, by_lr)  # type: ignore[misc]
    assert sort == "config:lr"
    assert options[-2:] == [
        {"label": "lr ↑", "value": "config:lr"},
        {"label": "lr ↓", "value": "-config:lr"},
    ]
    assert update_columns(store, by_lr)[3] == "-config:lr"  # type: ignore[index]
    assert update_columns(store, by_lr, False) is None  # a header drawn anew
    store = update_columns(store, "runs-group", group="lr")[0]  # type: ignore[index]
    toggle = {"type": "runs-group-toggle", "group": "0.001"}
    store = update_columns(store, toggle)[0]  # type: ignore[index]
    assert RunsView.from_store(store).opened == ("0.001",)
    remove = {"type": "runs-col-remove", "col": "config:lr"}
    store = update_columns(store, remove)[0]  # type: ignore[index]
    assert store["url"] == "?col=min%3Aloss&group=lr&open=0.001"
    cleared = update_columns(store, "runs-group", False, group=None)
    assert cleared is not None and cleared[0]["url"] == "?col=min%3Aloss"


def test_the_sort_picker_offers_the_chosen_config_columns() -> None:
    view = RunsView.from_query(query_of("?col=min%3Aloss&col=config%3Alr&sort=-config%3Alr"))
    picker = find(runs_table.controls(view, [], []), "Dropdown", id="runs-sort")[0]
    assert picker["value"] == "-config:lr"
    assert [o["value"] for o in picker["options"]][-2:] == ["config:lr", "-config:lr"]


def test_a_metric_column_sorts_by_the_values_read_and_runs_without_one_last() -> None:
    runs = [run(name, {}, age) for age, name in enumerate("abcde")]
    values = {
        "a": {"loss": SeriesStats(3, 2.0, 0.5, 4.0)},
        "b": {"loss": SeriesStats(3, math.nan, -1.0, 9.0)},
        "c": {"loss": SeriesStats(3, 0.25, 0.25, 0.25)},
        "e": {"loss": SeriesStats(3, 2.0, 2.0, 2.0)},
    }
    columns = (Column("last", "loss"), Column("min", "loss"))
    ascending = RunsView(columns=columns, sort="last:loss").select(runs, values)
    assert [r.name for r in ascending.rows] == ["c", "a", "e", "b", "d"]
    descending = RunsView(columns=columns, sort="-min:loss").select(runs, values)
    assert [r.name for r in descending.rows] == ["e", "a", "c", "b", "d"]
    assert RunsView(columns=columns, sort="-min:loss").metric_sort == Column("min", "loss")
    assert RunsView(columns=columns).metric_sort is None
