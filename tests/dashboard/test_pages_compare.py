"""The compare page and the runs list's compare link: the view, its URL and its controls,
the chart and tables drawn from a comparison (called with a fake data object), and the
dashboard's real reads on Postgres, where another project's run is no run at all."""

from __future__ import annotations

import doctest
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard import compare_figure as compare_figure_module
from normwatch.dashboard.compare_figure import compare_figure
from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.figures import RUN_COLORS, empty_figure
from normwatch.dashboard.pages import compare_tables, compare_view, runs
from normwatch.dashboard.pages.compare import (
    NO_METRIC,
    NO_RUNS,
    TOO_MANY,
    draw,
    layout,
    match,
    nothing_drawn,
)
from normwatch.dashboard.pages.compare_tables import NO_DIFFERENCES, run_labels
from normwatch.dashboard.pages.compare_view import (
    CompareView,
    chart_options,
    compare_href,
    default_metric,
    metric_options,
    picker_state,
    update_view,
)
from normwatch.dashboard.pages.run_overlay import POINTS
from normwatch.dashboard.routing import query_of, route
from normwatch.server.auth import Principal
from normwatch.server.errors import Invalid, RunNotFound
from normwatch.server.schemas import MetricOut, RunOut
from normwatch.server.schemas.analytics import CompareOut
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, header, rows, text, tree
from .seed import Viewers, api, post_points, viewers

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
WHO = Principal(token_id=1, project_id=1, project="marin", scope="read")
TOTAL, LOSS, HEAD = "grad/norm/total", "train/loss", "grad/norm/lm_head"
SHARE = f"share({HEAD}, {TOTAL})"
MEAN = "mean of 2 runs (1 after step 2)"


def run_out(run_id: str, name: str) -> RunOut:
    return RunOut.model_validate(
        {
            "id": run_id,
            "project": "marin",
            "name": name,
            "status": "running",
            "segment": 1,
            "config": {},
            "tags": [],
            "last_step": None,
            "last_seen": NOW,
            "created_at": NOW,
        }
    )


def summary(**fields: Any) -> dict[str, Any]:
    base = {
        "points": 4,
        "max": 8.0,
        "final": 1.0,
        "final_step": 3,
        "slope_per_1k": -12.5,
        "spike_count": 1,
        "fraction_in_spikes": 0.5,
    }
    return {**base, **fields}


def comparison(
    config_diff: dict[str, list[Any]] | None = None,
    first: dict[str, Any] | None = None,
    second: dict[str, Any] | None = None,
) -> CompareOut:
    """Two runs' total grad norm as the service returns it: a NaN in the first, the second
    downsampled; ``first`` and ``second`` change their series and name."""
    series = {"metric": TOTAL, "downsampled": False, "total_points": 4}
    first = {"name": "qk-off", "steps": [0, 1, 2, 3], "values": [1.0, 8.0, "NaN", 1.0]} | (
        first or {}
    )
    second = {"name": "qk-on", "steps": [0, 2], "values": [0.5, 0.75]} | (second or {})
    if config_diff is None:
        config_diff = {"model.qk_norm": [False, True], "optimizer.lr": [3e-4, None]}
    return CompareOut.model_validate(
        {
            "metric": TOTAL,
            "runs": [
                {
                    "run": "r1",
                    "name": first["name"],
                    "series": {**series, "steps": first["steps"], "values": first["values"]},
                    "summary": summary(),
                },
                {
                    "run": "r2",
                    "name": second["name"],
                    "series": {
                        **series,
                        "steps": second["steps"],
                        "values": second["values"],
                        "downsampled": True,
                        "total_points": 40,
                    },
                    "summary": summary(
                        max=0.75,
                        final="Infinity",
                        slope_per_1k=None,
                        spike_count=0,
                        fraction_in_spikes=0.0,
                    ),
                },
            ],
            "config_diff": config_diff,
        }
    )


@dataclass
class FakeReads:
    """Runs by id (name, metric names), and what `compare` answers (or raises)."""

    runs: dict[str, tuple[str, list[str]]]
    answer: CompareOut | Exception = field(default_factory=comparison)
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def run(self, who: Principal, run_id: str) -> RunOut:
        if run_id not in self.runs:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)
        return run_out(run_id, self.runs[run_id][0])

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]:
        if run_id not in self.runs:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)
        return [MetricOut(name=n, last_step=1, last_value=1.0) for n in self.runs[run_id][1]]

    def compare(
        self,
        who: Principal,
        run_ids: Any,
        metric: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
    ) -> CompareOut:
        self.calls.append((tuple(run_ids), metric, start, end, points))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def fake() -> FakeReads:
    return FakeReads({"r1": ("qk-off", [HEAD, TOTAL, LOSS]), "r2": ("qk-on", [LOSS, TOTAL])})


def store_of(page: Any) -> Any:
    (store,) = find(page, "Store", id="compare-view")
    return store["data"]


def test_doctests() -> None:
    for module in (compare_view, compare_tables, compare_figure_module, runs):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 0) == (0, True), module.__name__


# --- the URL and the view -----------------------------------------------------------------


def test_match() -> None:
    assert match("/compare") == {} and match("/compare/") == {}
    assert match("/compare/x") is None and match("/") is None


def test_query_keeps_every_value_of_a_repeated_name() -> None:
    query = query_of("?run=a&metric=grad%2Fnorm%2Ftotal&run=b&run=c")
    assert query == {"run": "c", "metric": TOTAL}
    assert (query.every("run"), query.every("metric"), query.every("end")) == (
        ["a", "b", "c"],
        [TOTAL],
        [],
    )
    assert query_of(None).every("run") == []


def test_compare_href_round_trips_through_the_query() -> None:
    href = compare_href(["r1", "r2"], SHARE)
    assert (
        href
        == "/compare?run=r1&run=r2&metric=share%28grad%2Fnorm%2Flm_head%2C+grad%2Fnorm%2Ftotal%29"
    )
    query = query_of(href.partition("?")[2])
    assert (query.every("run"), query.get("metric")) == (["r1", "r2"], SHARE)
    assert compare_href(["r1", "r2"]) == "/compare?run=r1&run=r2"


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([[HEAD, TOTAL, LOSS], [LOSS, TOTAL]], TOTAL),
        ([[HEAD, LOSS, "z"], ["z", LOSS]], LOSS),  # the first run's order
        ([[HEAD], [LOSS]], None),
        ([[HEAD]], HEAD),
        ([], None),
    ],
)
def test_default_metric(names: list[list[str]], expected: str | None) -> None:
    assert default_metric(names) == expected


def test_metric_options_are_the_union_then_the_metric_drawn() -> None:
    names = [[HEAD, TOTAL], [LOSS, TOTAL]]
    assert [o["value"] for o in metric_options(names, TOTAL)] == [HEAD, TOTAL, LOSS]
    assert [o["value"] for o in metric_options(names, SHARE)] == [HEAD, TOTAL, LOSS, SHARE]
    assert metric_options([], None) == []


def test_view_from_query() -> None:
    names = [[HEAD, TOTAL], [TOTAL]]
    assert CompareView.from_query(["a", "b"], names) == CompareView(("a", "b"), TOTAL)
    view = CompareView.from_query(["a"], names, metric=SHARE, start="1e3", end="2000")
    assert view == CompareView(("a",), SHARE, 1000, 2000)
    assert view.x_range == (1000, 2000)
    reversed_range = CompareView.from_query(["a"], names, start="20", end="10")
    assert (reversed_range.start, reversed_range.end) == (None, None)
    one_end = CompareView.from_query(["a"], [[HEAD], [LOSS]], start="x", end="10")
    assert (one_end.metric, one_end.start, one_end.end, one_end.x_range) == (None, None, 10, None)
    assert CompareView.from_query(["a"], names, metric="m" * 600).metric == "m" * 512


def test_view_store_round_trip() -> None:
    view = CompareView(("r1", "r2"), SHARE, 5, 9)
    assert view.to_store() == {
        "runs": ["r1", "r2"],
        "metric": SHARE,
        "start": 5,
        "end": 9,
        "log": False,
        "smooth": 0.0,
        "robust": False,
        "group": None,
        "more_metrics": [],
        "group_by": None,
    }
    assert CompareView.from_store(view.to_store()) == view
    assert CompareView.from_store({"runs": ["r1"]}) == CompareView(("r1",))
    shaped = CompareView(("r1",), TOTAL, log=True, smooth=0.9, robust=True, group="mean")
    assert CompareView.from_store(shaped.to_store()) == shaped
    assert CompareView.from_store({"runs": ["r1"], "smooth": 0}) == CompareView(("r1",))


def test_view_from_query_reads_the_charts_shape() -> None:
    names = [[TOTAL], [TOTAL]]
    view = CompareView.from_query(
        ["a", "b"], names, log="1", smooth="0.9", robust="true", group="mean"
    )
    assert view == CompareView(("a", "b"), TOTAL, log=True, smooth=0.9, robust=True, group="mean")
    assert CompareView.from_query(["a"], names, smooth="0.123").smooth == 0.12
    assert CompareView.from_query(["a"], names, smooth="5").smooth == 0.99


@pytest.mark.parametrize(
    "malformed",
    [
        {"log": "2", "smooth": "x", "robust": "no", "group": "median"},
        {"log": "", "smooth": "nan", "robust": "", "group": ""},
        {"smooth": "-0.5", "group": "MEAN"},
        {"smooth": "inf"},
    ],
)
def test_a_malformed_shape_in_the_query_is_ignored(malformed: dict[str, str]) -> None:
    view = CompareView.from_query(["a"], [[TOTAL]], start="5", **malformed)
    assert view == CompareView(("a",), TOTAL, start=5)


@pytest.mark.parametrize(
    "crafted",
    [
        None,
        ["r1"],
        {"runs": []},
        {"runs": "r1"},
        {"runs": ["r1", "r1"]},
        {"runs": ["../alerts"]},
        {"runs": [f"r{i}" for i in range(9)]},
        {"runs": ["r1"], "metric": ""},
        {"runs": ["r1"], "metric": {"$ne": 1}},
        {"runs": ["r1"], "metric": "m" * 513},
        {"runs": ["r1"], "start": -1},
        {"runs": ["r1"], "start": True},
        {"runs": ["r1"], "start": 2**70},
        {"runs": ["r1"], "start": 9, "end": 5},
        {"runs": ["r1"], "log": 1},
        {"runs": ["r1"], "robust": "yes"},
        {"runs": ["r1"], "smooth": 0.995},
        {"runs": ["r1"], "smooth": 0.123},
        {"runs": ["r1"], "smooth": True},
        {"runs": ["r1"], "smooth": "0.9"},
        {"runs": ["r1"], "smooth": float("nan")},
        {"runs": ["r1"], "group": "median"},
    ],
)
def test_a_crafted_store_holds_no_view(crafted: Any) -> None:
    assert CompareView.from_store(crafted) is None


# --- the controls ---------------------------------------------------------------------------

VIEW = CompareView(("r1", "r2"), TOTAL, 100, 300)


def changed(view: CompareView | None, **inputs: Any) -> CompareView | None:
    values: dict[str, Any] = {"picked": TOTAL, "expression": "", "relayout": None, "trigger": None}
    return update_view(view, **{**values, **inputs})


def test_update_view_follows_picker_expression_chart_and_full_range() -> None:
    assert changed(VIEW, picked=LOSS, trigger="compare-metric") == CompareView(
        ("r1", "r2"), LOSS, 100, 300
    )
    for trigger in ("compare-expression", "compare-apply"):
        typed = changed(VIEW, expression=f"  {SHARE} ", trigger=trigger)
        assert typed == CompareView(("r1", "r2"), SHARE, 100, 300)
    relayout = {"xaxis.range[0]": 900.2, "xaxis.range[1]": 1099.5}
    assert changed(VIEW, relayout=relayout, trigger="compare-zoom") == CompareView(
        ("r1", "r2"), TOTAL, 900, 1100
    )
    autorange = {"xaxis.autorange": True}
    assert changed(VIEW, relayout=autorange, trigger="compare-zoom") == CompareView(
        ("r1", "r2"), TOTAL
    )
    assert changed(VIEW, trigger="compare-reset") == CompareView(("r1", "r2"), TOTAL)


def test_update_view_follows_the_charts_toggles_and_smoothing() -> None:
    ticked = changed(VIEW, flags=["log", "mean", "robust"], trigger="compare-options")
    assert ticked == replace(VIEW, log=True, robust=True, group="mean")
    assert changed(ticked, flags=[], trigger="compare-options") == VIEW
    assert changed(VIEW, smooth=0.9, trigger="compare-smoothing") == replace(VIEW, smooth=0.9)
    smoothed = replace(VIEW, smooth=0.9)
    assert changed(smoothed, smooth=0, trigger="compare-smoothing") == VIEW
    assert changed(VIEW, smooth=1.5, trigger="compare-smoothing") == replace(VIEW, smooth=0.99)
    assert chart_options(ticked) == ["log", "robust", "mean"]


@pytest.mark.parametrize(
    "inputs",
    [
        {"picked": TOTAL, "trigger": "compare-metric"},  # the metric drawn already
        {"picked": None, "trigger": "compare-metric"},
        {"picked": ["x"], "trigger": "compare-metric"},
        {"expression": "   ", "trigger": "compare-expression"},
        {"expression": None, "trigger": "compare-apply"},
        {"expression": TOTAL, "trigger": "compare-apply"},
        {"relayout": {"yaxis.range[0]": 0, "yaxis.range[1]": 2}, "trigger": "compare-zoom"},
        {"relayout": "zoom", "trigger": "compare-zoom"},
        {"trigger": "something-else"},
        {"trigger": None},
        {"flags": [], "trigger": "compare-options"},  # none ticked already
        {"flags": "log", "trigger": "compare-options"},
        {"flags": [{"x": 1}, "other"], "trigger": "compare-options"},
        {"smooth": 0, "trigger": "compare-smoothing"},
        {"smooth": "0.9", "trigger": "compare-smoothing"},
        {"smooth": None, "trigger": "compare-smoothing"},
    ],
)
def test_update_view_changes_nothing(inputs: dict[str, Any]) -> None:
    assert changed(VIEW, **inputs) is None


def test_update_view_of_a_store_without_a_view_changes_nothing() -> None:
    assert changed(None, picked=LOSS, trigger="compare-metric") is None


def test_picker_state_adds_a_typed_expression() -> None:
    options = [{"label": TOTAL, "value": TOTAL}]
    assert picker_state(VIEW, options) == (options, TOTAL)
    shared = CompareView(("r1",), SHARE)
    assert picker_state(shared, options) == (options + [{"label": SHARE, "value": SHARE}], SHARE)
    assert picker_state(shared, "crafted") == ([{"label": SHARE, "value": SHARE}], SHARE)
    assert picker_state(CompareView(("r1",)), options) == (options, None)


# --- layout ---------------------------------------------------------------------------------


def test_layout_compares_the_runs_of_the_url() -> None:
    page = layout(fake(), WHO, query_of("?run=r1&run=r2&run=r1&start=100&end=300"))
    assert store_of(page) == CompareView(("r1", "r2"), TOTAL, 100, 300).to_store()
    assert [h["children"] for h in find(page, "H1")] == ["Compare runs"]
    assert [text(s["children"]) for s in find(page, "Span", className="compared-run")] == [
        "qk-off",
        "qk-on",
    ]
    (picker,) = find(page, "Dropdown", id="compare-metric")
    assert picker["value"] == TOTAL
    assert [o["value"] for o in picker["options"]] == [HEAD, TOTAL, LOSS]
    (expression,) = find(page, "Input", id="compare-expression")
    assert expression["value"] == ""
    assert find(page, "Graph", id="compare-chart")[0]["config"]["scrollZoom"] is True
    (toggles,) = find(page, "Checklist", id="compare-options")
    assert ([o["value"] for o in toggles["options"]], toggles["value"]) == (
        ["log", "robust", "mean"],
        [],
    )
    assert find(page, "Slider", id="compare-smoothing")[0]["value"] == 0.0


def test_layout_of_a_shaped_chart_sets_its_controls() -> None:
    page = layout(fake(), WHO, query_of("?run=r1&run=r2&log=1&smooth=0.6&group=mean&robust=x"))
    assert (
        store_of(page)
        == CompareView(("r1", "r2"), TOTAL, log=True, smooth=0.6, group="mean").to_store()
    )
    assert find(page, "Checklist", id="compare-options")[0]["value"] == ["log", "mean"]
    assert find(page, "Slider", id="compare-smoothing")[0]["value"] == 0.6


def test_layout_of_an_expression_shows_it_in_both_fields() -> None:
    page = layout(fake(), WHO, query_of(f"?run=r1&run=r2&metric={SHARE}"))
    assert store_of(page)["metric"] == SHARE
    (picker,) = find(page, "Dropdown", id="compare-metric")
    assert (picker["value"], picker["options"][-1]["value"]) == (SHARE, SHARE)
    assert find(page, "Input", id="compare-expression")[0]["value"] == SHARE


def test_layout_of_runs_that_share_no_metric() -> None:
    data = FakeReads({"r1": ("a", [HEAD]), "r2": ("b", [LOSS])})
    page = layout(data, WHO, query_of("?run=r1&run=r2"))
    assert store_of(page)["metric"] is None
    assert draw(data, WHO, CompareView.from_store(store_of(page))) == nothing_drawn(NO_METRIC)


@pytest.mark.parametrize(
    ("search", "said"),
    [
        ("", NO_RUNS),
        ("?metric=x", NO_RUNS),
        ("?" + "&".join(f"run=r{i}" for i in range(9)), TOO_MANY),
        ("?run=r1&run=theirs&run=../x", "No run theirs, ../x in your project."),
    ],
)
def test_layout_says_why_it_cannot_compare(search: str, said: str) -> None:
    page = layout(fake(), WHO, query_of(search))
    assert text(page) == f"Cannot compare{said}All runs"
    assert find(page, "Store") == []


def test_run_labels_tell_runs_of_one_name_apart() -> None:
    same = [run_out("aaaaaaaa1111", "exp"), run_out("bbbbbbbb2222", "exp"), run_out("c", "x")]
    assert run_labels(same) == ["exp (aaaaaaaa)", "exp (bbbbbbbb)", "x"]


# --- draw -----------------------------------------------------------------------------------


def test_draw_a_line_a_run_and_the_tables() -> None:
    data = fake()
    fig, info, summary_table, diff_table = draw(data, WHO, VIEW)
    assert data.calls == [(("r1", "r2"), TOTAL, 100, 300, POINTS)]
    first, second, flags = fig["data"]
    assert (first["name"], first["line"]["color"]) == ("qk-off", RUN_COLORS[0])
    assert (second["name"], second["line"]["color"]) == ("qk-on", RUN_COLORS[1])
    assert (first["x"], first["y"]) == ([0, 1, 2, 3], [1.0, 8.0, None, 1.0])
    assert (second["x"], second["y"]) == ([0, 2], [0.5, 0.75])
    assert (flags["x"], flags["text"], flags["yaxis"]) == ([2], ["qk-off: NaN"], "y2")
    assert fig["layout"]["xaxis"]["range"] == [100, 300]
    assert fig["layout"]["yaxis"]["title"]["text"] == TOTAL
    assert fig["layout"]["uirevision"] == f"r1|r2|{TOTAL}"
    assert (
        info == "qk-off: 4 points, steps 0–3 · qk-on (downsampled, spikes kept): 2 of 40 points, "
        "steps 0–2"
    )
    assert header(summary_table) == [
        "run",
        "max",
        "final",
        "slope / 1k steps",
        "spikes",
        "steps in spikes",
    ]
    assert rows(summary_table) == [
        ["qk-off", "8", "1", "-12.5", "1", "50.00 %"],
        ["qk-on", "0.75", "inf", "—", "0", "0.00 %"],
    ]
    assert [link["href"] for link in find(summary_table, "Link")] == ["/runs/r1", "/runs/r2"]
    assert header(diff_table) == ["key", "qk-off", "qk-on"]
    assert rows(diff_table) == [["model.qk_norm", "false", "true"], ["optimizer.lr", "0.0003", "—"]]


def test_draw_of_a_shaped_view_draws_the_mean_smoothed_on_a_log_axis() -> None:
    view = replace(VIEW, start=None, end=None, log=True, smooth=0.5, robust=True, group="mean")
    fig, info, *_ = draw(fake(), WHO, view)
    names = [t["name"] for t in fig["data"]]
    assert names == ["qk-off (raw)", "qk-on (raw)", "min", "max", MEAN, "non-finite"]
    assert fig["layout"]["uirevision"] == f"r1|r2|{TOTAL}|log|robust|mean"
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert fig["layout"]["yaxis"]["autorange"] is False
    # One-step buckets over steps 0-3 (the last held to step 3); qk-off's NaN at 2 counts
    # as not logged, and qk-on ends at step 2.
    mean = fig["data"][4]
    assert mean["x"] == [0, 1, 2, 3, 3]
    assert [c[0] for c in mean["customdata"]] == [2, 2, 2, 1, 1]
    assert "qk-off: 4 points" in info


def test_draw_without_config_differences() -> None:
    data = FakeReads(fake().runs, comparison(config_diff={}))
    *_, diff_table = draw(data, WHO, CompareView(("r1", "r2"), TOTAL))
    assert tree(diff_table)["props"] == {"children": NO_DIFFERENCES, "className": "empty"}


def test_draw_of_runs_of_one_name_and_a_markup_name() -> None:
    data = FakeReads(fake().runs, comparison(second={"name": "qk-off"}))
    fig, info, *_ = draw(data, WHO, VIEW)
    assert [t["name"] for t in fig["data"][:2]] == ["qk-off (r1)", "qk-off (r2)"]
    markup = FakeReads(fake().runs, comparison(second={"name": "<b>x</b>"}))
    fig, *_ = draw(markup, WHO, VIEW)
    assert fig["data"][1]["name"] == "&lt;b&gt;x&lt;/b&gt;"


def test_draw_of_a_metric_none_of_the_runs_logged() -> None:
    nothing = {"steps": [], "values": []}
    data = FakeReads(fake().runs, comparison(first=nothing, second=nothing))
    fig, info, summary_table, _ = draw(data, WHO, VIEW)
    assert fig == empty_figure(f"None of these runs logged {TOTAL} in this range.")
    assert info == "qk-off: no points · qk-on: no points"
    assert len(rows(summary_table)) == 2


def test_draw_says_why_there_is_nothing_to_draw() -> None:
    assert draw(fake(), WHO, None) == nothing_drawn(NO_RUNS)
    assert draw(fake(), WHO, CompareView(("r1",))) == nothing_drawn(NO_METRIC)
    gone = FakeReads(fake().runs, RunNotFound("no run with id 'r2'", "r2"))
    assert draw(gone, WHO, VIEW) == nothing_drawn("No run r2 in your project.")
    refused = FakeReads(fake().runs, Invalid("unbalanced parentheses"))
    view = CompareView(("r1", "r2"), "share(")
    assert draw(refused, WHO, view) == nothing_drawn("Cannot draw share(: unbalanced parentheses")
    figure, *_ = nothing_drawn("x")
    assert figure == empty_figure("x")


def test_compare_figure_without_range_or_runs() -> None:
    assert "range" not in compare_figure([])["layout"]["xaxis"]
    assert compare_figure([])["data"] == []


# --- the runs list's compare link -------------------------------------------------------------


def test_runs_table_has_a_box_to_tick_a_run() -> None:
    table = runs.runs_table([run_out("r1", "qk-off")], NOW)
    (box,) = find(table, "Checklist")
    assert box["id"] == {"type": "compare-pick", "run": "r1"}
    assert (box["options"], box["value"], box["persistence"]) == (
        [{"label": "", "value": "r1"}],
        [],
        True,
    )
    assert rows(table)[0][0] == "qk-off"


@pytest.mark.parametrize(
    ("picked", "href"),
    [
        ([["r1"], ["r2"]], f"/compare?run=r1&run=r2&metric={TOTAL.replace('/', '%2F')}"),
        (
            [["r2"], [], ["r1"], ["r2"]],
            f"/compare?run=r2&run=r1&metric={TOTAL.replace('/', '%2F')}",
        ),
        ([["r1"], ["gone"], ["r3"]], f"/compare?run=r1&run=r3&metric={HEAD.replace('/', '%2F')}"),
        ([["r2"], ["r4"]], "/compare?run=r2&run=r4"),  # no metric in common
    ],
)
def test_compare_action_links_the_ticked_runs(picked: list[list[str]], href: str) -> None:
    data = FakeReads({**fake().runs, "r3": ("c", [HEAD]), "r4": ("d", [HEAD])})
    action = runs.compare_action(data, WHO, picked, [])
    assert action is not None
    shown, ticked = action
    (link,) = find(shown, "Link")
    assert (link["href"], link["id"]) == (href, "compare-link")
    assert link["children"] == "compare 2 runs"
    assert ticked == runs.ticked_runs(picked)
    # The table's refresh redraws the same ticks: nothing to read again.
    assert runs.compare_action(data, WHO, picked, ticked) is None


@pytest.mark.parametrize(
    ("picked", "said"),
    [
        ([], runs.PICK_HINT),
        ([["r1"], []], runs.PICK_HINT),
        ([["r1"], ["gone"]], runs.PICK_HINT),
        ([["r1"], ["r1"]], runs.PICK_HINT),
        ("crafted", runs.PICK_HINT),
        ([[5], {"x": 1}, ["r1"]], runs.PICK_HINT),
        ([[f"r{i}"] for i in range(9)], "Compare at most 8 runs at once."),
    ],
)
def test_compare_action_hints_without_two_to_eight_runs(picked: Any, said: str) -> None:
    data = FakeReads({f"r{i}": (f"run {i}", [TOTAL]) for i in range(9)})
    action = runs.compare_action(data, WHO, picked, ["r0"])
    assert action is not None
    shown, ticked = action
    assert text(shown) == said
    assert find(shown, "Link") == []
    assert ticked == runs.ticked_runs(picked)


def test_ticked_runs() -> None:
    assert runs.ticked_runs([["b"], [], ["a", "b"], [3], "x", None]) == ["b", "a"]
    assert runs.ticked_runs({"crafted": 1}) == []


# --- on Postgres ------------------------------------------------------------------------------

STEPS = list(range(2000))
SPIKES = {400: 8.0, 900: 6.0, 1500: 9.5}


@dataclass(frozen=True)
class World:
    mine: Viewers
    off: str
    on: str
    their_run: str


def create_run(server: ServerProcess, tenant: Any, name: str, config: dict[str, Any]) -> str:
    with api(server, tenant) as client:
        made = client.post("/api/v1/runs", json={"name": name, "start_step": 0, "config": config})
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    config = {"lr": 3e-4, "model": {"qk_norm": False}}
    off = create_run(pg_server, mine, "qk-off", config)
    post_points(
        pg_server,
        mine,
        off,
        STEPS,
        {
            TOTAL: [SPIKES.get(s, 1.0) for s in STEPS],
            HEAD: [0.5] * len(STEPS),
            LOSS: [4.0] * len(STEPS),
        },
    )
    on = create_run(pg_server, mine, "qk-on", {"lr": 3e-4, "model": {"qk_norm": True}})
    # 0.5 + s / 4096: exact in float32, so the summary's numbers are exact too.
    post_points(pg_server, mine, on, STEPS, {TOTAL: [0.5 + s / 4096 for s in STEPS]})
    their_run = create_run(pg_server, theirs, "their-run", config)
    post_points(pg_server, theirs, their_run, STEPS, {TOTAL: [1.0] * len(STEPS)})
    return World(viewers(dashboard_sessions, mine), off, on, their_run)


def test_data_compare_reads_the_viewers_runs(world: World, dashboard_data: DashboardData) -> None:
    got = dashboard_data.compare(
        world.mine.read, [world.off, world.on], TOTAL, start=None, end=None, points=POINTS
    )
    assert [(r.run, r.name) for r in got.runs] == [(world.off, "qk-off"), (world.on, "qk-on")]
    off, on = (r.summary for r in got.runs)
    assert (off.max, off.final, off.spike_count, off.fraction_in_spikes) == (9.5, 1.0, 3, 0.003)
    assert (on.max, on.final, on.spike_count, on.slope_per_1k) == (
        0.5 + 1999 / 4096,
        0.5 + 1999 / 4096,
        0,
        pytest.approx(1000 / 4096, rel=1e-12),
    )
    assert got.config_diff == {"model.qk_norm": [False, True]}
    ranged = dashboard_data.compare(
        world.mine.read, [world.off, world.on], TOTAL, start=1000, end=1499, points=POINTS
    )
    assert [r.series.steps[0] for r in ranged.runs] == [1000, 1000]
    assert [r.summary.max for r in ranged.runs] == [1.0, 0.5 + 1499 / 4096]
    assert ranged.runs[0].summary.spike_count == 3  # spikes count over the whole run


def test_data_compare_takes_a_derived_expression(
    world: World, dashboard_data: DashboardData
) -> None:
    got = dashboard_data.compare(
        world.mine.admin, [world.off, world.on], SHARE, start=0, end=9, points=POINTS
    )
    off, on = (r.series for r in got.runs)
    assert (off.metric, off.steps, off.values) == (SHARE, list(range(10)), [0.25] * 10)
    assert (on.steps, on.values) == ([], [])
    assert [r.missing for r in got.runs] == [[], [HEAD]]  # qk-on logged no lm_head


def test_the_page_names_what_a_run_never_logged(
    world: World, dashboard_data: DashboardData
) -> None:
    """A metric one run logged is drawn, the other run named as never having logged it; a
    name no run logged is refused with the closest names they have, on the chart."""
    who = world.mine.read
    fig, info, summary_table, _ = draw(
        dashboard_data, who, CompareView((world.off, world.on), LOSS)
    )
    assert [t["name"] for t in fig["data"]] == ["qk-off", "qk-on"]
    assert info == "qk-off: 2,000 points, steps 0–1,999 · qk-on: never logged 'train/loss'"
    assert rows(summary_table)[1][1:] == ["—", "—", "—", "0", "0.00 %"]
    typo = CompareView((world.off, world.on), "train/los")
    assert draw(dashboard_data, who, typo) == nothing_drawn(
        f"Cannot draw train/los: no metric 'train/los' in runs {world.off}, {world.on} "
        "(closest: 'train/loss')"
    )


def test_data_compare_refuses_runs_outside_the_project_and_bad_expressions(
    world: World, dashboard_data: DashboardData
) -> None:
    who = world.mine.read
    for run_ids in ([world.off, world.their_run], [world.off, "f" * 32]):
        with pytest.raises(RunNotFound):
            dashboard_data.compare(who, run_ids, TOTAL, start=None, end=None, points=POINTS)
    with pytest.raises(Invalid):
        dashboard_data.compare(who, [world.off], "share(", start=None, end=None, points=POINTS)


def test_the_page_on_real_data(world: World, dashboard_data: DashboardData) -> None:
    who = world.mine.read
    search = f"?run={world.off}&run={world.on}"
    page, _ = route(dashboard_data, who, "/compare", search)
    assert store_of(page) == CompareView((world.off, world.on), TOTAL).to_store()
    view = CompareView.from_store(store_of(page))
    fig, info, summary_table, diff_table = draw(dashboard_data, who, view)
    assert [t["name"] for t in fig["data"]] == ["qk-off", "qk-on"]
    assert info == "qk-off: 2,000 points, steps 0–1,999 · qk-on: 2,000 points, steps 0–1,999"
    assert rows(summary_table) == [
        ["qk-off", "9.5", "1", "-0.0006596", "3", "0.30 %"],
        ["qk-on", "0.988", "0.988", "+0.2441", "0", "0.00 %"],
    ]
    assert rows(diff_table) == [["model.qk_norm", "false", "true"]]
    theirs, _ = route(dashboard_data, who, "/compare", f"{search}&run={world.their_run}")
    assert text(theirs) == f"Cannot compareNo run {world.their_run} in your project.All runs"
    their_view = CompareView((world.off, world.their_run), TOTAL)
    gone = nothing_drawn(f"No run {world.their_run} in your project.")
    assert draw(dashboard_data, who, their_view) == gone
    listed = runs.layout(dashboard_data, who, {})
    assert text(find(listed, "Div", id="compare-action")[0]["children"]) == runs.PICK_HINT
    assert find(listed, "Store", id="compare-ticked")[0]["data"] == []
    assert {b["id"]["run"] for b in find(listed, "Checklist")} == {world.off, world.on}
    ticked = [[world.off], [world.their_run], [world.on]]
    action = runs.compare_action(dashboard_data, who, ticked)
    assert action is not None
    (link,) = find(action[0], "Link")
    assert link["href"] == compare_href([world.off, world.on], TOTAL)
    alone = runs.compare_action(dashboard_data, who, [[world.off], [world.their_run]])
    assert alone is not None and text(alone[0]) == runs.PICK_HINT
