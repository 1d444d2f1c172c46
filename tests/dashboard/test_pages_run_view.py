"""The run page's view: its store and URL forms, and how zooms and event clicks change it."""

from __future__ import annotations

from typing import Any

import pytest
from normwatch.dashboard.pages.run_view import (
    MAX_STEP,
    RunView,
    default_metrics,
    event_window,
    is_step,
    view_from_relayout,
)

RUN = "0123456789abcdef0123456789abcdef"
VIEW = RunView(RUN, "grad/norm/total", "params/norm/final_norm.weight", 100, 300, True)
NAMES = ["grad/norm/layers.0", "grad/norm/total", "params/norm/a", "params/norm/final_norm.w"]


def test_to_store_is_json_in_a_fixed_order() -> None:
    store = VIEW.to_store()
    assert store == {
        "run": RUN,
        "left": "grad/norm/total",
        "right": "params/norm/final_norm.weight",
        "start": 100,
        "end": 300,
        "log": True,
    }
    assert list(store) == ["run", "left", "right", "start", "end", "log"]
    assert RunView(RUN).to_store() == {
        "run": RUN,
        "left": None,
        "right": None,
        "start": None,
        "end": None,
        "log": False,
    }


@pytest.mark.parametrize(
    "view",
    [VIEW, RunView(RUN), RunView("a-b_C", "", None, 0, 0), RunView(RUN, start=MAX_STEP)],
)
def test_from_store_reads_what_to_store_wrote(view: RunView) -> None:
    assert RunView.from_store(view.to_store()) == view


def test_from_store_takes_defaults_for_missing_keys_and_ignores_others() -> None:
    assert RunView.from_store({"run": RUN}) == RunView(RUN)
    assert RunView.from_store({"run": RUN, "end": 5, "zoom": "x"}) == RunView(RUN, end=5)


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


def test_metrics_and_x_range() -> None:
    assert VIEW.metrics == ["grad/norm/total", "params/norm/final_norm.weight"]
    assert RunView(RUN, "", "params/norm/a").metrics == ["params/norm/a"]
    assert RunView(RUN).metrics == []
    assert VIEW.x_range == (100, 300)
    assert RunView(RUN, start=100).x_range is None


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
