"""The run page's view: its store and URL forms, and how zooms and event clicks change it."""

from __future__ import annotations

import doctest
from dataclasses import replace
from typing import Any

import pytest

from normwatch.dashboard.pages import run_view
from normwatch.dashboard.pages.run_view import (
    MAX_EXTRA,
    MAX_STEP,
    URL_SYNC_JS,
    RunView,
    default_metrics,
    event_window,
    expression_error,
    extra_series,
    is_step,
    view_from_relayout,
)

RUN = "0123456789abcdef0123456789abcdef"
VIEW = RunView(RUN, "grad/norm/total", "params/norm/final_norm.weight", 100, 300, True)
NAMES = ["grad/norm/layers.0", "grad/norm/total", "params/norm/a", "params/norm/final_norm.w"]


SHARE = "share(grad/norm/lm_head, grad/norm/total)"
AIDED = RunView(
    RUN, "grad/norm/total", "params/norm/final_norm.weight", 100, 300, False,
    extra=("train/loss", SHARE), one_axis=True, forecast=True, focus=200,
)  # fmt: skip


def test_to_store_is_json_in_a_fixed_order() -> None:
    store = VIEW.to_store()
    assert store == {
        "run": RUN,
        "left": "grad/norm/total",
        "right": "params/norm/final_norm.weight",
        "start": 100,
        "end": 300,
        "log": True,
        "extra": [],
        "one_axis": False,
        "forecast": False,
        "focus": None,
        "smooth": 0.0,
        "x": "step",
        "norm": None,
        "robust": False,
    }
    assert list(store) == [
        "run", "left", "right", "start", "end", "log", "extra", "one_axis", "forecast", "focus",
        "smooth", "x", "norm", "robust",
    ]  # fmt: skip
    assert RunView(RUN).to_store() == {
        "run": RUN,
        "left": None,
        "right": None,
        "start": None,
        "end": None,
        "log": False,
        "extra": [],
        "one_axis": False,
        "forecast": False,
        "focus": None,
        "smooth": 0.0,
        "x": "step",
        "norm": None,
        "robust": False,
    }
    assert AIDED.to_store() | {"extra": ["train/loss", SHARE], "focus": 200} == AIDED.to_store()


@pytest.mark.parametrize(
    "view",
    [
        VIEW,
        AIDED,
        RunView(RUN),
        RunView("a-b_C", "", None, 0, 0),
        RunView(RUN, start=MAX_STEP, focus=MAX_STEP),
    ],
)
def test_from_store_reads_what_to_store_wrote(view: RunView) -> None:
    assert RunView.from_store(view.to_store()) == view


def test_from_store_takes_defaults_for_missing_keys_and_ignores_others() -> None:
    assert RunView.from_store({"run": RUN}) == RunView(RUN)
    assert RunView.from_store({"run": RUN, "end": 5, "zoom": "x"}) == RunView(RUN, end=5)
    # A store written before the extra series and the chart aids existed.
    old = {"run": RUN, "left": "a", "right": "b", "start": 1, "end": 9, "log": True}
    assert RunView.from_store(old) == RunView(RUN, "a", "b", 1, 9, True)


@pytest.mark.parametrize(
    "store",
    [
        None,
        [],
        "view",
        {},
        {"run": None},
        {"run": 5},
        {"run": ""},
        {"run": "../alerts"},
        {"run": "a b"},
        {"run": "x" * 129},
        {"run": RUN, "left": 1},
        {"run": RUN, "right": ["grad/norm/total"]},
        {"run": RUN, "start": "100"},
        {"run": RUN, "start": 1.0},
        {"run": RUN, "start": True},
        {"run": RUN, "start": -1},
        {"run": RUN, "end": MAX_STEP + 1},
        {"run": RUN, "start": 300, "end": 100},
        {"run": RUN, "log": 1},
        {"run": RUN, "log": "1"},
        {"run": RUN, "log": None},
        {"run": RUN, "left": "x" * 513},
        {"run": RUN, "extra": "train/loss"},
        {"run": RUN, "extra": ["train/loss", None]},
        {"run": RUN, "extra": [""]},
        {"run": RUN, "extra": ["x" * 513]},
        {"run": RUN, "extra": [f"m{i}" for i in range(7)]},
        {"run": RUN, "one_axis": 1},
        {"run": RUN, "forecast": "yes"},
        {"run": RUN, "focus": -1},
        {"run": RUN, "focus": "200"},
        {"run": RUN, "focus": True},
    ],
)
def test_from_store_refuses_what_to_store_cannot_write(store: Any) -> None:
    assert RunView.from_store(store) is None


def test_from_query_defaults_to_total_grad_norm_and_final_norm() -> None:
    assert RunView.from_query(RUN, NAMES) == RunView(
        RUN, "grad/norm/total", "params/norm/final_norm.w"
    )
    assert RunView.from_query(RUN, []) == RunView(RUN)


def test_from_query_reads_every_parameter() -> None:
    view = RunView.from_query(
        RUN, NAMES, left="train/loss", right="params/norm/a", start="100", end="300", log="1"
    )
    assert view == RunView(RUN, "train/loss", "params/norm/a", 100, 300, True)


def test_from_query_keeps_an_empty_right_axis_and_defaults_an_empty_left_one() -> None:
    view = RunView.from_query(RUN, NAMES, left="", right="")
    assert (view.left, view.right) == ("grad/norm/total", "")


@pytest.mark.parametrize(
    ("log", "on"),
    [("1", True), ("true", True), ("yes", True), ("0", False), ("on", False), (None, False)],
)
def test_from_query_log_scale(log: str | None, on: bool) -> None:
    assert RunView.from_query(RUN, NAMES, log=log).log is on


@pytest.mark.parametrize(
    ("start", "end", "steps"),
    [
        ("1e3", "2000.9", (1000, 2000)),
        ("abc", "300", (None, 300)),
        ("inf", "nan", (None, None)),
        ("-5", "", (None, None)),
        (str(2**64), "7", (None, 7)),
        ("300", "100", (None, None)),  # a range that ends before it starts
        ("100", "100", (100, 100)),
    ],
)
def test_from_query_steps(start: str, end: str, steps: tuple[int | None, int | None]) -> None:
    view = RunView.from_query(RUN, NAMES, start=start, end=end)
    assert (view.start, view.end) == steps


def test_from_query_reads_the_series_axes_forecast_and_focus() -> None:
    view = RunView.from_query(
        RUN,
        NAMES,
        start="100",
        end="300",
        series=["train/loss", SHARE, "share(a)", "train/loss", "grad/norm/total"],
        axes="one",
        forecast="1",
        focus="2e2",
    )
    assert view == replace(AIDED, left="grad/norm/total", right="params/norm/final_norm.w")
    plain = RunView.from_query(RUN, NAMES, axes="two", forecast="0", focus="-3")
    assert (plain.one_axis, plain.forecast, plain.focus, plain.extra) == (False, False, None, ())
    many = RunView.from_query(RUN, NAMES, series=[f"m{i}" for i in range(10)])
    assert many.extra == tuple(f"m{i}" for i in range(MAX_EXTRA))


def test_metrics_and_x_range() -> None:
    assert VIEW.metrics == ["grad/norm/total", "params/norm/final_norm.weight"]
    assert RunView(RUN, "", "params/norm/a").metrics == ["params/norm/a"]
    assert RunView(RUN).metrics == []
    assert AIDED.metrics == [
        "grad/norm/total", "params/norm/final_norm.weight", "train/loss", SHARE
    ]  # fmt: skip
    assert VIEW.x_range == (100, 300)
    assert RunView(RUN, start=100).x_range is None


@pytest.mark.parametrize(
    ("view", "focused"),
    [
        (AIDED, 200),
        (replace(AIDED, focus=100), 100),
        (replace(AIDED, focus=301), None),
        (replace(AIDED, end=None), None),
        (replace(AIDED, focus=None), None),
    ],
)
def test_focused_only_while_the_range_shows_the_focus(view: RunView, focused: int | None) -> None:
    assert view.focused == focused


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("grad/norm/total", None),
        (SHARE, None),
        ("rss(grad/norm/layers.*)", None),
        ("share(a)", "share takes 2 arguments, got 1 in 'share(a)'"),
        ("x" * 513, "at most 512 characters, got 513"),
    ],
)
def test_expression_error(text: str, error: str | None) -> None:
    assert expression_error(text) == error


def test_extra_series_keeps_what_can_be_drawn_once() -> None:
    picked = ["a", SHARE, "a", "", None, 5, "share(a)", "b", "left"]
    assert extra_series(picked, exclude=["left", None]) == ("a", SHARE, "b")
    assert extra_series(None) == extra_series("a") == extra_series({"a": 1}) == ()
    assert extra_series([f"m{i}" for i in range(9)]) == tuple(f"m{i}" for i in range(MAX_EXTRA))


def test_url_sync_writes_every_parameter_from_query_reads() -> None:
    for key in ("left", "right", "start", "end", "focus", "log", "series", "axes", "forecast"):
        assert f'"{key}"' in URL_SYNC_JS


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (NAMES, ("grad/norm/total", "params/norm/final_norm.w")),
        (
            ["grad/norm/layers.3", "params/norm/b", "params/norm/a"],
            ("grad/norm/layers.3", "params/norm/b"),
        ),
        (["train/loss", "lr"], ("train/loss", None)),
        (
            ["params/norm/final_norm.scale"],
            ("params/norm/final_norm.scale", "params/norm/final_norm.scale"),
        ),
        ([], (None, None)),
    ],
)
def test_default_metrics(names: list[str], expected: tuple[str | None, str | None]) -> None:
    assert default_metrics(names) == expected


@pytest.mark.parametrize(
    ("relayout", "steps"),
    [
        ({"xaxis.range[0]": 900.4, "xaxis.range[1]": 1100.2}, (900, 1101)),
        ({"xaxis.range": [10, 20]}, (10, 20)),
        ({"xaxis.range[0]": -50.5, "xaxis.range[1]": 20}, (0, 20)),
        ({"xaxis.range[0]": 500, "xaxis.range[1]": 400}, (400, 500)),
        ({"xaxis.range[0]": "12.5", "xaxis.range[1]": "30"}, (12, 30)),
        ({"xaxis.range[0]": 1e30, "xaxis.range[1]": 1e31}, (MAX_STEP, MAX_STEP)),
        ({"xaxis.autorange": True}, (None, None)),
    ],
)
def test_view_from_relayout_zooms(
    relayout: dict[str, Any], steps: tuple[int | None, int | None]
) -> None:
    assert view_from_relayout(VIEW, relayout) == RunView(
        RUN, VIEW.left, VIEW.right, steps[0], steps[1], True
    )


@pytest.mark.parametrize(
    "relayout",
    [
        None,
        {},
        [],
        "xaxis.autorange",
        {"yaxis.range[0]": 1, "yaxis.range[1]": 2},
        {"xaxis.range[0]": 5},
        {"xaxis.range": [1, 2, 3]},
        {"xaxis.range[0]": "2024-01-01", "xaxis.range[1]": 9},
        {"xaxis.range[0]": float("nan"), "xaxis.range[1]": 9},
        {"xaxis.range[0]": True, "xaxis.range[1]": 9},
        {"xaxis.range[0]": {"x": 1}, "xaxis.range[1]": 9},
    ],
)
def test_view_from_relayout_leaves_the_view_on_anything_else(relayout: Any) -> None:
    assert view_from_relayout(VIEW, relayout) is VIEW


@pytest.mark.parametrize(
    ("step", "last_step", "window"),
    [
        (1000, 2000, (800, 1200)),
        (100_000, 400_000, (90_000, 110_000)),
        (50, None, (0, 250)),
        (40_000, None, (39_000, 41_000)),
        (0, 0, (0, 200)),
        (MAX_STEP - 1, MAX_STEP, (MAX_STEP - 1 - MAX_STEP // 40, MAX_STEP)),
    ],
)
def test_event_window(step: int, last_step: int | None, window: tuple[int, int]) -> None:
    assert event_window(step, last_step) == window


@pytest.mark.parametrize(
    ("value", "step"),
    [(0, True), (MAX_STEP, True), (-1, False), (MAX_STEP + 1, False), (True, False), (1.0, False)],
)
def test_is_step(value: object, step: bool) -> None:
    assert is_step(value) is step


def test_doctests() -> None:
    failed, tried = doctest.testmod(run_view)
    assert (failed, tried > 0) == (0, True)
