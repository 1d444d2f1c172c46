"""The run page's series controls (the "add series" picker and the expression field) and its
config section."""

from __future__ import annotations

import doctest
from typing import Any

import dash
import pytest
from dash.exceptions import PreventUpdate

from normwatch.dashboard.pages import run_config, run_series
from normwatch.dashboard.pages.run_config import (
    NO_CONFIG,
    config_section,
    flatten_config,
    value_text,
)
from normwatch.dashboard.pages.run_series import (
    add_expression,
    controls,
    options_with,
    place_expression,
)
from normwatch.dashboard.pages.run_view import MAX_EXTRA, RunView

from .components import find, rows, text, tree

SHARE = "share(grad/norm/lm_head, grad/norm/total)"
NAMES = ["grad/norm/total", "params/norm/final_norm.weight", "train/loss"]
RATIO = "ratio(train/loss, grad/norm/total)"


def test_doctests() -> None:
    for module in (run_series, run_config):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 0) == (0, True), module.__name__


def options(*names: str) -> list[dict[str, str]]:
    return [{"label": n, "value": n} for n in names]


# --- the series controls ------------------------------------------------------------------


def test_options_add_the_views_expressions_to_the_runs_names() -> None:
    view = RunView("r", "grad/norm/total", SHARE, extra=("train/loss", "never/logged"))
    assert options_with(NAMES, view) == options(*NAMES, SHARE, "never/logged")
    assert options_with([], RunView("r")) == []


def test_controls_show_the_views_extra_series() -> None:
    view = RunView("r", "grad/norm/total", extra=(SHARE,))
    (picker,) = find(controls(NAMES, view), "Dropdown", id="add-series")
    assert (picker["value"], picker["multi"]) == ([SHARE], True)
    assert picker["options"] == options(*NAMES, SHARE)
    assert find(controls(NAMES, view), "Input", id="expression")[0]["value"] == ""
    assert f"up to {MAX_EXTRA}" in text(controls(NAMES, view))


def test_an_expression_joins_the_picker_and_the_field_empties() -> None:
    value, new_options, message, field = add_expression(
        f"  {SHARE} ", ["train/loss"], options(*NAMES)
    )
    assert value == ["train/loss", SHARE]
    assert new_options == options(*NAMES, SHARE)
    assert (message, field) == ("", "")
    # A metric name typed is added like an expression, its option kept once.
    value, new_options, _, _ = add_expression("train/loss", None, options(*NAMES))
    assert (value, new_options) == (["train/loss"], options(*NAMES))


def test_an_expression_drawn_already_is_not_added_twice() -> None:
    answer = add_expression(SHARE, [SHARE], options(SHARE))
    assert answer == (dash.no_update, dash.no_update, f"{SHARE} is drawn already.", "")


@pytest.mark.parametrize(
    ("typed", "picked", "reason"),
    [
        ("share(a)", [], "Cannot draw share(a): share takes 2 arguments, got 1 in 'share(a)'"),
        ("x" * 513, [], "at most 512 characters, got 513"),
        ("train/loss", [f"m{i}" for i in range(MAX_EXTRA)], f"At most {MAX_EXTRA} added series"),
    ],
)
def test_an_expression_that_cannot_be_added_says_why(
    typed: str, picked: list[str], reason: str
) -> None:
    value, new_options, message, field = add_expression(typed, picked, options(*NAMES))
    assert (value, new_options, field) == (dash.no_update, dash.no_update, dash.no_update)
    found = tree(message)
    assert found["props"]["className"] == "error" and reason in found["props"]["children"]


@pytest.mark.parametrize("typed", [None, "", "   ", 5, ["share(a, b)"]])
def test_a_blank_field_changes_nothing(typed: Any) -> None:
    with pytest.raises(PreventUpdate):
        add_expression(typed, [], [])


def test_crafted_picker_state_is_read_safely() -> None:
    value, new_options, _, _ = add_expression("train/loss", "not a list", {"a": 1})
    assert (value, new_options) == (["train/loss"], options("train/loss"))
    value, _, _, _ = add_expression("a", ["share(a)", 5, "b"], [])
    assert value == ["b", "a"]


# --- the config ---------------------------------------------------------------------------


def test_flatten_config_joins_nested_keys_with_dots() -> None:
    config = {"lr": 3e-4, "model": {"layers": 48, "moe": {"experts": 64}}, "tags": {}, "x": [1]}
    assert flatten_config(config) == [
        ("lr", 3e-4),
        ("model.layers", 48),
        ("model.moe.experts", 64),
        ("tags", {}),
        ("x", [1]),
    ]


def test_value_text_is_json_but_for_text() -> None:
    assert [value_text(v) for v in (True, None, 3e-4, "near-dropless", [1, "a"], {"a": 1})] == [
        "true",
        "null",
        "0.0003",
        "near-dropless",
        '[1, "a"]',
        '{"a": 1}',
    ]


def test_config_section_is_a_folded_table_sorted_by_key() -> None:
    section = config_section({"z_loss": 1e-4, "model": {"qk_norm": False, "layers": 48}})
    drawn = tree(section)
    assert (drawn["type"], drawn["props"]["id"]) == ("Details", "run-config")
    assert text(section).startswith("Config (3 keys)")
    assert rows(section) == [
        ["model.layers", "48"],
        ["model.qk_norm", "false"],
        ["z_loss", "0.0001"],
    ]
    assert text(config_section({"a": 1})).startswith("Config (1 key)")
    assert text(config_section({})) == "Config (0 keys)" + NO_CONFIG


def test_an_expression_goes_to_the_right_axis_when_asked() -> None:
    skip = dash.no_update
    right = options(*NAMES)
    placed = place_expression(f" {RATIO} ", "right", ["train/loss"], options(*NAMES), right)
    assert placed == (skip, skip, "", "", RATIO, options(*NAMES, RATIO))
    # The left axis as before: the added series' picker takes it.
    left = place_expression(RATIO, "left", [], options(*NAMES), right)
    assert left == ([RATIO], options(*NAMES, RATIO), "", "", skip, skip)


@pytest.mark.parametrize(
    ("typed", "reason"),
    [
        ("grad/norm/totl", "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total')"),
        (
            "ratio(train/loss, grad/norm/totl)",
            "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total')",
        ),
        ("rss(grad/nrom/*)", "'grad/nrom/*' matches no metric of this run (closest: 'grad/norm/*'"),
        ("share(a)", "share takes 2 arguments"),
    ],
)
def test_a_mistyped_metric_or_expression_says_so(typed: str, reason: str) -> None:
    for axis in ("left", "right"):
        placed = place_expression(typed, axis, [], options(*NAMES), options(*NAMES))
        skip = dash.no_update
        assert placed[:2] == (skip, skip) and placed[3:] == (skip, skip, skip)
        found = tree(placed[2])
        assert found["props"]["className"] == "error"
        assert f"Cannot draw {typed}: {reason}" in found["props"]["children"]


def test_the_names_checked_are_the_runs_own() -> None:
    """With the run's names given, the page's options do not count: a name only they hold
    (stale, or sent by hand) is refused, one the run has logged is taken."""
    placed = place_expression("x/y", "left", [], options("x/y"), [], names=NAMES)
    assert "no metric 'x/y' in this run" in tree(placed[2])["props"]["children"]
    placed = place_expression("train/loss", "left", [], [], [], names=NAMES)
    assert placed[0] == ["train/loss"]
