"""The compare chart's builder against values worked out by hand: a line a run in run order,
in colours that are not the run page's axis red and blue, the x axis on the data's own ends,
smoothing with the raw line faint behind, a log axis, a y range without the extremes, the
runs' mean over buckets with a band that keeps every spike, groups by a config value, and a
panel a metric."""

from __future__ import annotations

import math
from typing import Any

import pytest

from normwatch.dashboard.compare_figure import (
    BAND_BUCKETS,
    MEAN_COLOR,
    band_fill,
    compare_figure,
    compare_panels,
)
from normwatch.dashboard.compare_legend import Group, legend_title
from normwatch.dashboard.figures import GRAD_RED, PARAM_BLUE, RAW_OPACITY, RUN_COLORS, Line

M = "grad/norm/total"
A = ("run-a", Line(M, [0, 10, 20], [1.0, 2.0, 3.0]))
B = ("run-b", Line(M, [5, 15], [4.0, 6.0]))
# On one-step buckets 0…20: A is a line through (0, 1), (10, 2), (20, 3); B through (5, 4),
# (15, 6), counting only from 5 to 15.
A_AT = [1 + s / 10 for s in range(21)]
B_AT = {s: 4 + (s - 5) / 5 for s in range(5, 16)}
MEAN = [(A_AT[s] + B_AT[s]) / 2 if s in B_AT else A_AT[s] for s in range(21)]
LOW = [min(A_AT[s], B_AT.get(s, math.inf)) for s in range(21)]
HIGH = [max(A_AT[s], B_AT.get(s, -math.inf)) for s in range(21)]
COUNT = [2 if s in B_AT else 1 for s in range(21)]
MEAN_NAME = "mean of 2 runs (1 before step 5; 1 after step 15)"


def smoothed(values: list[float], weight: float) -> list[float]:
    """TensorBoard's debiased EMA, for points evenly spaced."""
    out, last = [], 0.0
    for n, v in enumerate(values, start=1):
        last = weight * last + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


def by_name(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in fig["data"]}


def test_a_line_a_run_in_run_order_on_the_datas_own_steps() -> None:
    fig = compare_figure([A, B])
    first, second = fig["data"]
    assert (first["name"], first["line"]["color"], first["x"], first["y"]) == (
        "run-a",
        RUN_COLORS[0],
        [0, 10, 20],
        [1.0, 2.0, 3.0],
    )
    assert (second["name"], second["line"]["color"]) == ("run-b", RUN_COLORS[1])
    layout = fig["layout"]
    # No padding past the data: from the first run's first step to the last step of any.
    assert (layout["xaxis"]["range"], layout["xaxis"]["autorange"]) == ([0, 20], False)
    assert layout["legend"]["title"]["text"] == legend_title()
    assert "red and blue stay the run page’s axes" in legend_title()
    # No run is drawn in the red or blue that mean the left and right axis on a run's page.
    assert GRAD_RED not in RUN_COLORS and PARAM_BLUE not in RUN_COLORS
    assert len(set(RUN_COLORS)) == 8
    assert "type" not in layout["yaxis"] and "range" not in layout["yaxis"]
    assert layout["yaxis"]["title"]["text"] == M


def test_a_zoomed_range_is_kept_as_it_is() -> None:
    fig = compare_figure([A, B], x_range=(3, 12))
    assert fig["layout"]["xaxis"]["range"] == [3, 12]
    assert "autorange" not in fig["layout"]["xaxis"]


def test_smoothing_draws_the_raw_line_faint_behind_in_the_same_colour() -> None:
    fig = compare_figure([A, B], smooth=0.5)
    names = [t["name"] for t in fig["data"]]
    assert names == ["run-a (raw)", "run-a", "run-b (raw)", "run-b"]
    traces = by_name(fig)
    raw = traces["run-a (raw)"]
    assert (raw["y"], raw["opacity"], raw["line"]["color"]) == (
        [1.0, 2.0, 3.0],
        RAW_OPACITY,
        RUN_COLORS[0],
    )
    assert (raw["showlegend"], raw["hoverinfo"]) == (False, "skip")
    assert RAW_OPACITY == 0.25
    line = traces["run-a"]
    assert line["line"]["color"] == RUN_COLORS[0] and "showlegend" not in line
    # 1; (0.25 + 1) / 0.75; (0.625 + 1.5) / 0.875
    assert line["y"] == pytest.approx([1.0, 5 / 3, 17 / 7], rel=1e-12)
    assert traces["run-b"]["y"] == pytest.approx([4.0, (1 + 3) / 0.75], rel=1e-12)


def test_smoothing_keeps_a_non_finite_value_a_gap_and_flags_it() -> None:
    nan = ("run-n", Line(M, [0, 1, 2], [1.0, math.nan, 3.0]))
    fig = compare_figure([nan], smooth=0.5)
    raw, line, flags = fig["data"]
    assert raw["y"][1] is None and line["y"][1] is None
    # The past decays across the gap (0.5² of the first point), which adds nothing to it.
    assert line["y"][2] == pytest.approx((0.125 * 1 + 0.5 * 3) / (0.125 + 0.5), rel=1e-12)
    assert (flags["x"], flags["text"]) == ([1], ["run-n: NaN"])


def held(values: list[float]) -> list[float]:
    """A band trace's values: each bucket's, and the last held to the grid's last step."""
    return [*values, values[-1]]


def test_the_mean_of_the_runs_with_a_min_max_band_on_one_step_buckets() -> None:
    fig = compare_figure([A, B], mean=True)
    names = [t["name"] for t in fig["data"]]
    assert names == ["run-a (raw)", "run-b (raw)", "min", "max", MEAN_NAME]
    traces = by_name(fig)
    for index, label in enumerate(("run-a", "run-b")):
        faint = traces[f"{label} (raw)"]
        assert (faint["opacity"], faint["line"]["color"]) == (RAW_OPACITY, RUN_COLORS[index])
        assert (faint["showlegend"], faint["hoverinfo"]) == (False, "skip")
    mean = traces[MEAN_NAME]
    assert mean["x"] == [*range(21), 20]
    assert mean["y"] == pytest.approx(held(MEAN), rel=1e-12)
    assert [c[0] for c in mean["customdata"]] == held(COUNT)
    assert [c[1] for c in mean["customdata"]] == pytest.approx(held(LOW), rel=1e-12)
    assert [c[2] for c in mean["customdata"]] == pytest.approx(held(HIGH), rel=1e-12)
    assert "of %{customdata[0]} runs" in mean["hovertemplate"]
    assert mean["line"] == {"color": MEAN_COLOR, "width": 2, "shape": "hv"}
    assert "showlegend" not in mean
    low, high = traces["min"], traces["max"]
    assert low["y"] == pytest.approx(held(LOW), rel=1e-12)
    assert high["y"] == pytest.approx(held(HIGH), rel=1e-12)
    assert (high["fill"], high["fillcolor"]) == ("tonexty", band_fill(MEAN_COLOR))
    assert band_fill(MEAN_COLOR) == "rgba(51, 51, 51, 0.15)"
    # The edges are drawn a pixel wide, so a spike in a bucket a pixel wide shows.
    assert high["line"] == {"width": 1, "color": "rgba(51, 51, 51, 0.5)", "shape": "hv"}
    assert len({t["legendgroup"] for t in (low, high, mean)}) == 1
    assert not low["showlegend"] and not high["showlegend"]
    assert fig["layout"]["xaxis"]["range"] == [0, 20]
    assert fig["layout"]["legend"]["title"]["text"] == legend_title(mean=True)


def spiky_runs() -> list[tuple[str, Line]]:
    """Two runs logged every 10 steps: the first, to step 49,999, spikes to 40 at step
    29,990 (it is 1 elsewhere), the second (2 throughout) ends at step 19,500."""
    steps = [*range(0, 50_000, 10), 49_999]
    first = [40.0 if s == 29_990 else 1.0 for s in steps]
    short = [s for s in steps if s <= 19_500]
    return [("spiky", Line(M, steps, first)), ("short", Line(M, short, [2.0] * len(short)))]


def test_the_band_keeps_a_spike_that_buckets_of_fifty_steps_hold_among_others() -> None:
    fig = compare_figure(spiky_runs(), mean=True)
    name = "mean of 2 runs (1 after step 19,500)"
    traces = by_name(fig)
    mean, high, low = traces[name], traces["max"], traces["min"]
    # 1,000 buckets of 50 steps: the spike's is 29,950-29,999, where the spiky run has 5
    # points (1, 1, 1, 1, 40), their mean 8.8, and the short run has ended.
    assert len(mean["x"]) == BAND_BUCKETS + 1 and mean["x"][:3] == [0, 50, 100]
    bucket = mean["x"].index(29_950)
    assert (high["y"][bucket], low["y"][bucket], mean["y"][bucket]) == (40.0, 1.0, 8.8)
    assert mean["customdata"][bucket][0] == 1
    assert high["y"][bucket - 1] == 1.0 and high["y"][bucket + 1] == 1.0
    # Before step 19,500 both runs count: the band spans 1 to 2 and the mean is 1.5.
    assert (low["y"][0], high["y"][0], mean["y"][0], mean["customdata"][0][0]) == (1, 2, 1.5, 2)
    # The bucket 19,500-19,549 still holds the short run's last point.
    ending = mean["x"].index(19_500)
    assert [mean["customdata"][i][0] for i in (ending, ending + 1)] == [2, 1]


def test_a_downsampled_line_counts_in_the_mean_by_its_first_and_last_point() -> None:
    spiky, short = spiky_runs()
    thin = (spiky[0], Line(M, spiky[1].steps, spiky[1].values, downsampled=True))
    traces = by_name(compare_figure([thin, short], mean=True))
    mean = traces["mean of 2 runs (1 after step 19,500)"]
    bucket = mean["x"].index(29_950)
    assert (mean["y"][bucket], traces["max"]["y"][bucket]) == ((1.0 + 40.0) / 2, 40.0)


def test_the_smoothed_mean_is_the_mean_smoothed_and_its_band_stays_raw() -> None:
    fig = compare_figure([A, B], mean=True, smooth=0.5)
    traces = by_name(fig)
    assert traces[MEAN_NAME]["y"][:-1] == pytest.approx(smoothed(MEAN, 0.5), rel=1e-12)
    # The band is what the runs reach: smoothing it would pull a spike out of it.
    assert traces["min"]["y"] == pytest.approx(held(LOW), rel=1e-12)
    assert traces["max"]["y"] == pytest.approx(held(HIGH), rel=1e-12)
    assert traces["run-a (raw)"]["y"] == [1.0, 2.0, 3.0]  # the runs stay raw


def test_the_mean_counts_only_runs_with_a_value() -> None:
    empty = ("run-e", Line(M, [], []))
    fig = compare_figure([A, empty, B], mean=True)
    assert by_name(fig)[MEAN_NAME]["y"] == pytest.approx(held(MEAN), rel=1e-12)


def test_groups_fold_runs_that_share_a_value_each_in_its_colour() -> None:
    other = ("run-c", Line(M, [0, 20], [5.0, 5.0]))
    groups = [Group("lr = 0.001", (0, 2)), Group("lr = 0.0003", (1,))]
    fig = compare_figure([A, B, other], groups=groups, group_by="lr")
    names = [t["name"] for t in fig["data"]]
    assert names == [
        "run-a (raw)",
        "run-b (raw)",
        "run-c (raw)",
        "min",
        "max",
        "lr = 0.001: mean of 2 runs",
        "min",
        "max",
        "lr = 0.0003: mean of 1 run",
    ]
    faint = [t["line"]["color"] for t in fig["data"][:3]]
    assert faint == [RUN_COLORS[0], RUN_COLORS[1], RUN_COLORS[0]]
    first, second = fig["data"][5], fig["data"][8]
    assert (first["line"]["color"], second["line"]["color"]) == (RUN_COLORS[0], RUN_COLORS[1])
    assert fig["data"][4]["fillcolor"] == band_fill(RUN_COLORS[0])
    # Group 0 is A and C: at step 10, (2 + 5) / 2 with the band 2 to 5.
    assert (first["y"][10], fig["data"][3]["y"][10], fig["data"][4]["y"][10]) == (3.5, 2, 5)
    # Group 1 is B alone, from step 5 to 15: a gap elsewhere.
    assert second["y"][4] is None and second["y"][5] == 4.0
    assert fig["layout"]["legend"]["title"]["text"] == legend_title(group_by="lr")


def test_a_panel_a_metric_on_one_shared_step_axis() -> None:
    loss = "train/loss"
    panels = [[A, B], [("run-a", Line(loss, [0, 20], [4.0, 3.0])), ("run-b", Line(loss, [], []))]]
    fig = compare_panels(panels, log_y=True, height=480)
    layout = fig["layout"]
    assert [(t["name"], t.get("xaxis", "x"), t.get("yaxis", "y")) for t in fig["data"]] == [
        ("run-a", "x", "y"),
        ("run-b", "x", "y"),
        ("run-a", "x2", "y3"),
        ("run-b", "x2", "y3"),
    ]
    # A run is named in the legend once: its lines in every panel show and hide together.
    assert [t.get("showlegend", True) for t in fig["data"]] == [True, True, False, False]
    assert fig["data"][0]["legendgroup"] == fig["data"][2]["legendgroup"] == "run-a"
    assert (layout["yaxis"]["title"]["text"], layout["yaxis3"]["title"]["text"]) == (M, loss)
    assert layout["xaxis2"]["matches"] == "x" and layout["xaxis"]["range"] == [0, 20]
    assert layout["yaxis"]["domain"] == [0.53, 1.0] and layout["yaxis3"]["domain"] == [0.0, 0.47]
    assert (layout["yaxis"]["type"], layout["yaxis3"]["type"]) == ("log", "log")
    assert layout["yaxis4"]["overlaying"] == "y3"
    assert layout["height"] == 720


def test_each_panel_has_its_own_mean_named_with_its_metric() -> None:
    loss = "train/loss"
    panels = [[A, B], [("run-a", Line(loss, [0, 20], [4.0, 3.0])), ("run-b", Line(loss, [], []))]]
    fig = compare_panels(panels, mean=True)
    means = [t["name"] for t in fig["data"] if t["name"].startswith(("grad", "train"))]
    assert means == [f"{M} · {MEAN_NAME}", f"{loss} · mean of 1 run"]


def test_log_scale_labels_its_ticks_in_full() -> None:
    """Within a decade, round values a linear step apart; across decades, the powers of ten
    labelled and the 2-9 times them as unlabelled grid lines (not 0.6 0.7 0.8 0.9 crowded)."""
    yaxis = compare_figure([A, B], log_y=True)["layout"]["yaxis"]
    assert (yaxis["type"], yaxis["tickformat"]) == ("log", "~g")
    assert yaxis["dtick"] == "L1" and "range" not in yaxis  # 1 to 6: 1, 2, 3 ...
    wide = ("wide", Line(M, [0, 1, 2], [0.2, 1.0, 12.0]))
    yaxis = compare_figure([A, wide], log_y=True)["layout"]["yaxis"]
    assert (yaxis["dtick"], yaxis["minor"]["dtick"]) == (1, "D1")


def test_ignoring_outliers_fits_the_y_axis_to_all_but_the_extremes() -> None:
    spiky = ("spiky", Line(M, list(range(50)), [1.0] * 49 + [100.0]))
    flat = ("flat", Line(M, list(range(50)), [2.0] * 50))
    yaxis = compare_figure([spiky, flat], robust=True)["layout"]["yaxis"]
    assert (yaxis["range"], yaxis["autorange"]) == ([0.9, 2.1], False)
    # On a log axis the range is in log10: the 2 % and 98 % quantiles are 1 and 10.
    tens = ("tens", Line(M, list(range(50)), [10.0] * 50))
    yaxis = compare_figure([spiky, tens], robust=True, log_y=True)["layout"]["yaxis"]
    assert yaxis["range"] == [-0.1, 1.1] and yaxis["type"] == "log"


def test_ignoring_outliers_counts_the_faint_lines_and_the_band() -> None:
    fig = compare_figure([A, B], robust=True, mean=True)
    # Every drawn value: A and B raw, the mean, the low and the high edge.
    low, high = fig["layout"]["yaxis"]["range"]
    assert low < 1.0 and 6.0 < high < 6.6


def test_no_runs_draw_nothing_and_set_no_range() -> None:
    for fig in (compare_figure([]), compare_figure([], mean=True, robust=True, log_y=True)):
        assert fig["data"] == []
        assert "range" not in fig["layout"]["xaxis"]
        assert "range" not in fig["layout"]["yaxis"]
    assert compare_panels([])["data"] == []


def test_a_markup_label_is_escaped_on_the_faint_line_too() -> None:
    fig = compare_figure([("<b>x</b>", Line(M, [0, 1], [1.0, 2.0]))], smooth=0.5)
    assert [t["name"] for t in fig["data"]] == [
        "&lt;b&gt;x&lt;/b&gt; (raw)",
        "&lt;b&gt;x&lt;/b&gt;",
    ]
