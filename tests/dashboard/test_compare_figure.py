"""The compare chart's builder against values worked out by hand: a line a run in run order,
the x axis on the data's own ends, smoothing with the raw line faint behind, a log axis, a
y range without the extremes, and the runs' mean with its min–max band."""

from __future__ import annotations

import math
from typing import Any

import pytest

from normwatch.dashboard.compare_figure import (
    BAND_FILL,
    MEAN_COLOR,
    compare_figure,
    legend_title,
    mean_name,
)
from normwatch.dashboard.figures import RAW_OPACITY, RUN_COLORS, Line

M = "grad/norm/total"
A = ("run-a", Line(M, [0, 10, 20], [1.0, 2.0, 3.0]))
B = ("run-b", Line(M, [5, 15], [4.0, 6.0]))
# A and B on the union of their steps (0, 5, 10, 15, 20): A is 1.5 at 5 and 2.5 at 15, B is 5
# at 10 and counts nowhere outside 5-15.
MEAN = [1.0, (1.5 + 4.0) / 2, (2.0 + 5.0) / 2, (2.5 + 6.0) / 2, 3.0]
LOW = [1.0, 1.5, 2.0, 2.5, 3.0]
HIGH = [1.0, 4.0, 5.0, 6.0, 3.0]
COUNT = [1, 2, 2, 2, 1]


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
    assert layout["legend"]["title"]["text"] == "colours in run order, blue first:"
    assert RUN_COLORS[0] == "#1f77b4"  # the blue the legend names
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


def test_the_mean_of_the_runs_with_a_min_max_band_on_the_union_of_their_steps() -> None:
    fig = compare_figure([A, B], mean=True)
    names = [t["name"] for t in fig["data"]]
    assert names == ["run-a (raw)", "run-b (raw)", "min", "max", "mean of 2 runs (band: min–max)"]
    traces = by_name(fig)
    for index, label in enumerate(("run-a", "run-b")):
        faint = traces[f"{label} (raw)"]
        assert (faint["opacity"], faint["line"]["color"]) == (RAW_OPACITY, RUN_COLORS[index])
        assert (faint["showlegend"], faint["hoverinfo"]) == (False, "skip")
    mean = traces["mean of 2 runs (band: min–max)"]
    assert mean["x"] == [0, 5, 10, 15, 20]
    assert mean["y"] == MEAN
    assert mean["customdata"] == [[n, lo, hi] for n, lo, hi in zip(COUNT, LOW, HIGH, strict=True)]
    assert "of %{customdata[0]} runs" in mean["hovertemplate"]
    assert mean["line"]["color"] == MEAN_COLOR and "showlegend" not in mean
    low, high = traces["min"], traces["max"]
    assert (low["y"], high["y"]) == (LOW, HIGH)
    assert (high["fill"], high["fillcolor"]) == ("tonexty", BAND_FILL)
    assert {t["legendgroup"] for t in (low, high, mean)} == {"mean"}
    assert not low["showlegend"] and not high["showlegend"]
    assert fig["layout"]["xaxis"]["range"] == [0, 20]
    assert fig["layout"]["legend"]["title"]["text"] == legend_title(mean=True)


def test_the_smoothed_mean_is_the_mean_smoothed_and_its_band_too() -> None:
    fig = compare_figure([A, B], mean=True, smooth=0.5)
    traces = by_name(fig)
    assert traces["mean of 2 runs (band: min–max)"]["y"] == pytest.approx(
        smoothed(MEAN, 0.5), rel=1e-12
    )
    assert traces["min"]["y"] == pytest.approx(smoothed(LOW, 0.5), rel=1e-12)
    assert traces["max"]["y"] == pytest.approx(smoothed(HIGH, 0.5), rel=1e-12)
    assert traces["run-a (raw)"]["y"] == [1.0, 2.0, 3.0]  # the runs stay raw


def test_the_mean_counts_only_runs_with_a_value() -> None:
    empty = ("run-e", Line(M, [], []))
    fig = compare_figure([A, empty, B], mean=True)
    assert by_name(fig)["mean of 2 runs (band: min–max)"]["y"] == MEAN
    assert mean_name(1) == "mean of 1 run (band: min–max)"


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


def test_a_markup_label_is_escaped_on_the_faint_line_too() -> None:
    fig = compare_figure([("<b>x</b>", Line(M, [0, 1], [1.0, 2.0]))], smooth=0.5)
    assert [t["name"] for t in fig["data"]] == [
        "&lt;b&gt;x&lt;/b&gt; (raw)",
        "&lt;b&gt;x&lt;/b&gt;",
    ]
