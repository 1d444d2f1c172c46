"""What the run chart does to its lines before drawing them (smoothing with the raw line
faint behind, normalize mode on one axis, a y range without outliers), its x axis by tokens
or by wall time, and the CSV of what it shows."""

from __future__ import annotations

import math

import numpy as np

from normwatch.dashboard.figures import RAW_OPACITY, Line, Marker
from normwatch.dashboard.pages.run_axes import clock_axis, tokens_axis, tokens_metric
from normwatch.dashboard.pages.run_download import export_href
from normwatch.dashboard.pages.run_overlay import overlay_for, view_figure
from normwatch.dashboard.pages.run_shaping import NORMALIZE_OPTIONS
from normwatch.dashboard.pages.run_view import RunView, view_from_relayout
from normwatch.dashboard.transforms import ema

RUN = "r1"
GRAD = Line("grad/norm/total", [0, 10, 20, 30], [1.0, 3.0, 2.0, 4.0])
PARAM = Line("params/norm/final_norm.weight", [0, 10, 20, 30], [300.0, 303.0, 306.0, 309.0])
LINES = {GRAD.metric: GRAD, PARAM.metric: PARAM}


def test_smoothing_draws_the_ema_over_its_raw_line_drawn_faint() -> None:
    view = RunView(RUN, GRAD.metric, PARAM.metric, smooth=0.6)
    fig = view_figure(overlay_for(view, LINES, [], []))
    raw, smooth = fig["data"][0], fig["data"][1]
    assert (raw["name"], raw["opacity"], raw["showlegend"], raw["hoverinfo"]) == (
        "grad/norm/total (raw)",
        RAW_OPACITY,
        False,
        "skip",
    )
    assert raw["y"] == [1.0, 3.0, 2.0, 4.0] and raw["line"]["color"] == smooth["line"]["color"]
    assert smooth["name"] == "grad/norm/total"
    np.testing.assert_allclose(smooth["y"], ema(GRAD.steps, GRAD.values, 0.6))
    assert [t["yaxis"] for t in fig["data"]] == ["y", "y", "y2", "y2"]


def test_normalize_puts_every_series_on_one_axis_divided_by_its_start() -> None:
    view = RunView(RUN, GRAD.metric, PARAM.metric, norm="start")
    overlay = overlay_for(view, LINES, [], [])
    fig = view_figure(overlay)
    assert [t["y"] for t in fig["data"]] == [[1.0, 3.0, 2.0, 4.0], [1.0, 1.01, 1.02, 1.03]]
    assert [t["yaxis"] for t in fig["data"]] == ["y", "y"]
    assert fig["layout"]["yaxis"]["title"]["text"] == "each series ÷ its first value in the view"
    median = view_figure(overlay_for(RunView(RUN, GRAD.metric, norm="median"), LINES, [], []))
    assert median["data"][0]["y"] == [0.4, 1.2, 0.8, 1.6]
    assert median["layout"]["yaxis"]["title"]["text"] == "each series ÷ its median over the view"


def test_normalize_by_default_divides_by_the_median_so_a_warm_up_sets_no_scale() -> None:
    # A grad norm ten times its later level for the first two points of the view.
    warm = Line(GRAD.metric, [0, 1, 2, 3, 4, 5], [10.0, 8.0, 1.0, 1.0, 2.0, 1.0])
    for norm in ("1", "true", "yes", "median"):
        view = RunView.from_query(RUN, [GRAD.metric], left=GRAD.metric, right="", norm=norm)
        assert view.norm == "median"
        drawn = view_figure(overlay_for(view, {GRAD.metric: warm}, [], []))
        assert drawn["data"][0]["y"] == [6.666666666666667, 5.333333333333333] + [
            0.6666666666666666,
            0.6666666666666666,
            1.3333333333333333,
            0.6666666666666666,
        ]
    # Links made before the median became the default keep their mode.
    old = RunView.from_query(RUN, [GRAD.metric], left=GRAD.metric, right="", norm="start")
    assert old.norm == "start"
    started = view_figure(overlay_for(old, {GRAD.metric: warm}, [], []))
    assert started["data"][0]["y"] == [1.0, 0.8, 0.1, 0.1, 0.2, 0.1]
    for off in (None, "", "0", "max"):
        assert RunView.from_query(RUN, [GRAD.metric], norm=off).norm is None
    assert [o["value"] for o in NORMALIZE_OPTIONS] == ["median", "start"]
    assert [o["label"] for o in NORMALIZE_OPTIONS] == [
        "÷ median over the view",
        "÷ first value in the view",
    ]


def test_robust_range_leaves_a_spike_off_the_chart() -> None:
    spiky = Line(
        "grad/norm/total", list(range(100)), [1.0 + 0.01 * (i % 7) for i in range(99)] + [500.0]
    )
    fig = view_figure(
        overlay_for(RunView(RUN, spiky.metric, robust=True), {spiky.metric: spiky}, [], [])
    )
    low, high = fig["layout"]["yaxis"]["range"]
    assert fig["layout"]["yaxis"]["autorange"] is False and 0.9 < low < 1.0 and 1.06 < high < 1.2


def test_the_x_axis_runs_from_the_first_to_the_last_step_drawn() -> None:
    fig = view_figure(overlay_for(RunView(RUN, GRAD.metric), LINES, [Marker(15, "e")], []))
    assert fig["layout"]["xaxis"]["range"] == [0, 30]


def test_tokens_metric_and_axis() -> None:
    assert tokens_metric(["train/loss", "throughput/total_tokens"]) == "throughput/total_tokens"
    assert tokens_metric(["data.tokens_seen"]) == "data.tokens_seen"
    axis = tokens_axis("throughput/total_tokens", [0, 10, 30], [1000.0, 11000.0, math.nan])
    assert axis is not None
    assert axis.to_x([0, 5, 20]).tolist() == [1000.0, 6000.0, 21000.0]  # at 1000 a step past 10
    assert tokens_axis("t", [5], [1.0]) is None


def test_an_x_axis_moves_lines_events_and_range_and_hovers_say_the_step() -> None:
    axis = tokens_axis("throughput/total_tokens", [0, 30], [0.0, 3000.0])
    assert axis is not None
    view = RunView(RUN, GRAD.metric, start=10, end=20)
    fig = axis.apply(view_figure(overlay_for(view, LINES, [Marker(15, "e")], [])))
    line = fig["data"][0]
    assert line["x"] == [0.0, 1000.0, 2000.0, 3000.0] and line["customdata"] == [0, 10, 20, 30]
    assert "step %{customdata}" in line["hovertemplate"]
    assert fig["layout"]["xaxis"]["range"] == [1000.0, 2000.0]
    assert fig["layout"]["shapes"][0]["x0"] == fig["layout"]["annotations"][0]["x"] == 1500.0
    assert fig["layout"]["xaxis"]["title"]["text"] == "tokens (throughput/total_tokens)"
    zoomed = view_from_relayout(
        view, {"xaxis.range[0]": 500.0, "xaxis.range[1]": 2500.0}, axis.to_step
    )
    assert zoomed.x_range == (5, 25)


def test_wall_time_counts_from_the_first_mark() -> None:
    axis = clock_axis([100, 200, 300], [1_700_000_000.0, 1_700_003_600.0, 1_700_009_000.0])
    assert axis is not None
    assert (axis.title, axis.unit) == ("wall time since the run's start (h)", " h")
    assert axis.to_x([100, 250, 300, 400]).tolist() == [0.0, 1.75, 2.5, 3.75]
    assert clock_axis([1], [5.0]) is None


def test_wall_time_is_never_negative_and_reads_in_the_unit_its_span_needs() -> None:
    # The first mark at step 10 (the first batch): step 0 is at the run's start, not before.
    seconds = clock_axis([10, 20, 30], [1000.0, 1030.0, 1090.0])
    assert seconds is not None
    assert (seconds.title, seconds.unit) == ("wall time since the run's start (s)", " s")
    assert seconds.to_x([0, 5, 10, 20, 30, 40]).tolist() == [0.0, 0.0, 0.0, 30.0, 90.0, 135.0]
    assert seconds.to_step(0.0) == 10.0 and seconds.to_step(90.0) == 30.0
    minutes = clock_axis([0, 100], [0.0, 3000.0])
    assert minutes is not None
    assert (minutes.title, minutes.to_x([-50, 50, 100]).tolist()) == (
        "wall time since the run's start (min)",
        [0.0, 25.0, 50.0],
    )
    edge = clock_axis([0, 100], [0.0, 7200.0])
    assert edge is not None and edge.unit == " h" and edge.to_x([100]).tolist() == [2.0]
    drawn = clock_axis([10, 20], [0.0, 60.0])
    assert drawn is not None
    fig = drawn.apply(view_figure(overlay_for(RunView(RUN, GRAD.metric, ""), LINES, [], [])))
    assert fig["data"][0]["x"] == [0.0, 0.0, 60.0, 120.0]
    assert fig["layout"]["xaxis"]["title"]["text"] == "wall time since the run's start (s)"
    assert fig["layout"]["xaxis"]["range"] == [0.0, 120.0]
    assert fig["data"][0]["hovertemplate"] == (
        "%{x:.4~g} s · step %{customdata}<br>%{y:.6g}<extra>%{meta}</extra>"
    )


def test_the_download_link_names_the_views_series_and_range() -> None:
    view = RunView(RUN, GRAD.metric, "rss(x)", 100, 250)
    assert export_href(view) == (
        f"/runs/{RUN}/export.csv?metric=grad%2Fnorm%2Ftotal&metric=rss%28x%29&start=100&end=250"
    )
    assert export_href(RunView(RUN, GRAD.metric)) == (
        f"/runs/{RUN}/export.csv?metric=grad%2Fnorm%2Ftotal"
    )
    assert export_href(None) is None


def test_a_log_axis_over_decades_labels_the_powers_of_ten() -> None:
    spiky = Line("grad/norm/total", [0, 1, 2], [1.0, 400.0, 1.0])
    fig = view_figure(
        overlay_for(
            RunView(RUN, spiky.metric, PARAM.metric, log=True),
            {spiky.metric: spiky, PARAM.metric: PARAM},
            [],
            [],
        )
    )
    left, right = fig["layout"]["yaxis"], fig["layout"]["yaxis2"]
    assert (left["dtick"], left["tickformat"], left["minor"]["dtick"]) == (1, "~g", "D1")
    # 300-309, within a decade: round values a linear step apart.
    assert (right["dtick"], right["tick0"], right["tickformat"]) == ("L2", 0, "~g")
