"""The run page's panels, pure: grouping by name prefix, ordering, the layout's checks and
its changes (pin, hide, move, expressions), and a panel's figure of one run or several."""

from __future__ import annotations

import doctest

import pytest
from pydantic import ValidationError

from normwatch.dashboard import panel_figure, panels
from normwatch.dashboard.figures import Line
from normwatch.dashboard.pages.run_panels import groups_view
from normwatch.dashboard.panel_figure import PanelSeries, smoothed_series
from normwatch.dashboard.panels import (
    PAGE,
    Layout,
    arrange,
    group_of,
    layout_of,
    moved,
    page_of,
    pinned,
    with_expression,
    with_hidden,
)

from .components import find

NAMES = [
    "optim/lr",
    "grad/norm/layers.10",
    "grad/norm/layers.2",
    "grad/norm/total",
    "train/loss",
    "lr",
    "throughput/total_tokens",
    "params/norm/final_norm.weight",
    "updates/ratio",
    "grad/clip_frac",
]
SHARE = "share(grad/norm/lm_head*, grad/norm/total)"


def test_doctests() -> None:
    for module in (panels, panel_figure):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 0) == (0, True), module.__name__


@pytest.mark.parametrize(
    ("key", "group"),
    [
        ("train/loss", "train"),
        ("grad/norm/layers.0.attn", "grad/norm"),
        ("params/norm/x", "params/norm"),
        ("updates/ratio", "updates"),
        ("optim/lr", "optim"),
        ("grad/clip_frac", "grad"),
        ("throughput/total_tokens", "throughput"),
        ("lr", "other"),
        ("/leading", "other"),
        (SHARE, "expressions"),
    ],
)
def test_a_panel_is_grouped_by_its_name_prefix(key: str, group: str) -> None:
    assert group_of(key) == group


def test_groups_come_in_a_fixed_order_and_panels_in_natural_order() -> None:
    groups, hidden = arrange(NAMES, Layout(expressions=[SHARE]))
    assert [(g.name, g.keys) for g in groups] == [
        ("expressions", (SHARE,)),
        ("train", ("train/loss",)),
        ("grad/norm", ("grad/norm/layers.2", "grad/norm/layers.10", "grad/norm/total")),
        ("params/norm", ("params/norm/final_norm.weight",)),
        ("updates", ("updates/ratio",)),
        ("optim", ("optim/lr",)),
        ("grad", ("grad/clip_frac",)),
        ("throughput", ("throughput/total_tokens",)),
        ("other", ("lr",)),
    ]
    assert hidden == []


def test_pinned_come_first_hidden_leave_their_group_and_order_holds() -> None:
    layout = Layout(
        pinned=["grad/norm/total", "never/logged", "train/loss"],
        hidden=["optim/lr", "gone"],
        order=["grad/norm/layers.10"],
    )
    groups, hidden = arrange(NAMES, layout)
    assert groups[0].name == "pinned"
    assert groups[0].keys == ("grad/norm/total", "train/loss")
    assert [g.name for g in groups[1:]] == ["grad/norm", "params/norm", "updates", "grad"] + [
        "throughput",
        "other",
    ]
    assert groups[1].keys == ("grad/norm/layers.10", "grad/norm/layers.2")
    assert hidden == ["optim/lr"]


def test_moving_swaps_within_the_group_and_stops_at_its_ends() -> None:
    layout = Layout()
    groups, _ = arrange(NAMES, layout)
    down = moved(layout, groups, "grad/norm/layers.2", 1)
    assert down.order == ["grad/norm/layers.10", "grad/norm/layers.2", "grad/norm/total"]
    regrouped, _ = arrange(NAMES, down)
    assert regrouped[1].keys == ("grad/norm/layers.10", "grad/norm/layers.2", "grad/norm/total")
    assert moved(layout, groups, "grad/norm/layers.2", -1) == layout  # first already
    assert moved(layout, groups, "grad/norm/total", 1) == layout  # last already
    assert moved(layout, groups, "not/shown", 1) == layout


def test_moving_a_pinned_panel_reorders_the_pins() -> None:
    layout = Layout(pinned=["train/loss", "optim/lr"])
    groups, _ = arrange(NAMES, layout)
    assert moved(layout, groups, "optim/lr", -1).pinned == ["optim/lr", "train/loss"]


def test_pin_hide_and_show() -> None:
    layout = pinned(Layout(), "train/loss", True)
    assert layout.pinned == ["train/loss"]
    hidden = with_hidden(layout, "train/loss", True)
    assert (hidden.pinned, hidden.hidden) == ([], ["train/loss"])
    shown = with_hidden(hidden, "train/loss", False)
    assert (shown.pinned, shown.hidden) == ([], [])
    assert pinned(hidden, "train/loss", True).model_dump() == {
        "pinned": ["train/loss"],
        "hidden": [],
        "order": [],
        "expressions": [],
        "collapsed": [],
    }
    assert pinned(layout, "train/loss", False).pinned == []


def test_an_expression_is_checked_as_the_api_checks_it() -> None:
    added = with_expression(Layout(), SHARE)
    assert added.expressions == [SHARE]
    assert with_expression(added, SHARE) is added
    with pytest.raises(ValidationError, match="share takes 2 arguments, got 1"):
        with_expression(Layout(), "share(a)")
    with pytest.raises(ValidationError, match="is a metric name, not an expression"):
        with_expression(Layout(), "train/loss")


@pytest.mark.parametrize(
    "store",
    [None, [], "x", {"pinned": "a"}, {"pinned": ["a", "a"]}, {"extra": []}, {"hidden": [1]}],
)
def test_a_store_the_api_would_refuse_is_the_empty_layout(store: object) -> None:
    assert layout_of(store) == Layout()


def test_a_store_the_api_takes_is_read_as_is() -> None:
    store = {"pinned": ["a"], "hidden": ["b"], "order": ["c"], "expressions": [SHARE]}
    assert layout_of(store) == Layout(pinned=["a"], hidden=["b"], order=["c"], expressions=[SHARE])


def test_a_panel_of_several_runs_draws_a_line_each_with_a_legend() -> None:
    a = PanelSeries(Line("train/loss", [0, 5, 10], [3.0, 2.0, 1.0], downsampled=True), "run a")
    b = PanelSeries(Line("train/loss", [2, 12], [4.0, float("inf")]), "run b", "#1f77b4")
    fig = panel_figure.panel_figure("train/loss", [a, b], log_y=True, x_range=(1, 9))
    assert [t["name"] for t in fig["data"]] == ["run a (downsampled, spikes kept)", "run b"]
    assert [t["line"]["color"] for t in fig["data"]] == [panel_figure.PANEL_INK, "#1f77b4"]
    assert fig["data"][1]["y"] == [4.0, None]
    layout = fig["layout"]
    assert (layout["showlegend"], layout["xaxis"]["range"], layout["yaxis"]["type"]) == (
        True,
        [1, 9],
        "log",
    )
    assert layout["title"]["text"] == "train/loss" and layout["height"] == 220


def test_a_smoothed_panel_draws_its_raw_line_faint_behind() -> None:
    series = smoothed_series(PanelSeries(Line("g", [0, 1, 2], [1.0, 1.0, 4.0])), 0.5)
    fig = panel_figure.panel_figure("g", [series])
    raw, line = fig["data"]
    assert (raw["name"], raw["opacity"], raw["y"]) == ("g (raw)", 0.25, [1.0, 1.0, 4.0])
    assert line["y"][2] < 4.0 and line["y"][0] == 1.0
    assert fig["layout"]["xaxis"]["range"] == [0, 2]


def test_a_panel_without_points_says_so() -> None:
    fig = panel_figure.panel_figure("g", [PanelSeries(Line("g", [], []))])
    assert fig["layout"]["annotations"][0]["text"] == "no points in this range"
    assert fig["layout"]["xaxis"]["autorange"] is True


def test_a_group_shows_a_page_of_panels_and_says_how_many_more() -> None:
    names = [f"grad/norm/layers.{i}" for i in range(30)]
    first = groups_view(names, Layout())
    assert len(find(first, "Div", className="panel")) == PAGE
    second = groups_view(names, Layout(), {"grad/norm": 2})
    shown = [p["data-key"] for p in find(second, "Div", className="panel")]
    assert shown == [f"grad/norm/layers.{i}" for i in range(24)]
    (more,) = find(second, "Button", className="small panel-more")
    assert (more["children"], more["data-act"], more["data-key"]) == (
        "show 6 more (24 of 30 shown)",
        "more",
        "grad/norm",
    )
    assert (
        find(groups_view(names, Layout(), {"grad/norm": 3}), "Button", className="small panel-more")
        == []
    )


@pytest.mark.parametrize(
    ("pages", "count"),
    [
        (None, 1),
        ({"g": 0}, 1),
        ({"g": True}, 1),
        ({"g": "2"}, 1),
        ({"g": 3}, 3),
        ({"g": 10**9}, 1000),
    ],
)
def test_the_pages_a_group_shows_come_from_the_browser_bounded(pages: object, count: int) -> None:
    assert page_of(pages, "g") == count
