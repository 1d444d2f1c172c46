"""The overlay chart's extra series, its one-axis form, and the aids drawn over its lines:
threshold lines, fitted lines around a transition, the forecast."""

from __future__ import annotations

import doctest

import pytest

from normwatch.dashboard import overlay_aids
from normwatch.dashboard.figures import (
    EXTRA_COLORS,
    GRAD_RED,
    PARAM_BLUE,
    Line,
    OverlayView,
    overlay_figure,
    series_styles,
)
from normwatch.dashboard.forecast import forecast
from normwatch.dashboard.numbers import number_text
from normwatch.dashboard.overlay_aids import (
    CHAR_PX,
    LABEL_GAP,
    PAST_RIGHT_AXIS,
    Aids,
    FitLines,
    Threshold,
    continued,
    slope_text,
    with_aids,
)

GRAD = Line("grad/norm/total", [0, 100, 200], [1.0, 2.0, 3.0])
PARAM = Line("params/norm/final_norm.weight", [0, 200], [78.0, 80.0])
LOSS = Line("train/loss", [0, 200], [3.0, float("nan")])
RATIO = Line("ratio(grad/norm/total, params/norm/total)", [0, 200], [0.1, 0.2])
VIEW = OverlayView(left=GRAD, right=PARAM)
FIT = FitLines(PARAM.metric, 100, ((0, 78.0), (100, 79.0)), ((100, 79.0), (200, 81.5)), 10, 25, 2.5)


def test_doctests() -> None:
    failed, tried = doctest.testmod(overlay_aids)
    assert (failed, tried > 0) == (0, True)


def names(fig: dict[str, object]) -> list[object]:
    return [t["name"] for t in fig["data"]]  # type: ignore[index, union-attr, attr-defined]


# --- more series, one axis ----------------------------------------------------------------


def test_extra_series_on_the_left_axis_in_their_own_colours() -> None:
    view = OverlayView(left=GRAD, right=PARAM, extra=(LOSS, RATIO))
    fig = overlay_figure(view)
    traces = {t["name"]: t for t in fig["data"]}
    assert [s.line.metric for s in series_styles(view)] == [
        GRAD.metric,
        PARAM.metric,
        LOSS.metric,
        RATIO.metric,
    ]
    assert [(traces[m]["line"]["color"], traces[m]["yaxis"]) for m in traces if "norm" in m] == [
        (GRAD_RED, "y"),
        (PARAM_BLUE, "y2"),
        (EXTRA_COLORS[1], "y"),
    ]
    assert (traces[LOSS.metric]["line"]["color"], traces[LOSS.metric]["yaxis"]) == (
        EXTRA_COLORS[0],
        "y",
    )
    # The extra line's NaN is flagged like the others'.
    assert traces["non-finite"]["text"] == ["train/loss: NaN"]
    assert "visible" not in fig["layout"]["yaxis2"]


def test_one_axis_puts_the_right_metric_on_the_left_axis() -> None:
    fig = overlay_figure(OverlayView(left=GRAD, right=PARAM, one_axis=True))
    assert [(t["name"], t["yaxis"], t["line"]["color"]) for t in fig["data"]] == [
        (GRAD.metric, "y", GRAD_RED),
        (PARAM.metric, "y", PARAM_BLUE),
    ]
    assert fig["layout"]["yaxis"]["title"]["text"] == f"{GRAD.metric} · {PARAM.metric}"
    assert fig["layout"]["yaxis"]["title"]["font"]["color"] not in (GRAD_RED, PARAM_BLUE)
    assert fig["layout"]["yaxis2"]["visible"] is False
    alone = overlay_figure(OverlayView(left=GRAD, right=None, one_axis=True))
    assert alone["layout"]["yaxis"]["title"]["text"] == GRAD.metric


# --- thresholds ---------------------------------------------------------------------------


def test_a_threshold_is_a_dotted_line_on_its_metrics_axis_across_the_steps_shown() -> None:
    aids = Aids(
        thresholds=[
            Threshold(GRAD.metric, 5.0, "grad norm 5+"),
            Threshold(PARAM.metric, 360.0, "gain <b>360</b>", "forecast"),
            Threshold("train/loss", 9.0, "not charted"),
        ]
    )
    fig = with_aids(overlay_figure(VIEW), VIEW, aids)
    grad, param = fig["data"][2:]
    assert grad["name"] == "threshold grad norm 5+ (5.0)"
    assert (grad["x"], grad["y"], grad["yaxis"]) == ([0, 200], [5.0, 5.0], "y")
    assert (grad["line"]["dash"], grad["line"]["color"], grad["mode"]) == ("dot", GRAD_RED, "lines")
    assert (param["yaxis"], param["line"]["color"]) == ("y2", PARAM_BLUE)
    assert "text" not in grad and "text" not in param  # no label over the data
    assert "<b>" not in param["meta"] and "<b>" not in param["name"]
    # The rules' names sit in the right margin, past the right axis, at each line's height.
    labels = fig["layout"]["annotations"]
    assert [(a["text"], a["yref"], a["y"]) for a in labels] == [
        ("grad norm 5+", "y", 5.0),
        ("gain &lt;b&gt;360&lt;/b&gt;", "y2", 360.0),
    ]
    for label in labels:
        assert (label["xref"], label["x"], label["xanchor"], label["xshift"]) == (
            "paper",
            1.0,
            "left",
            PAST_RIGHT_AXIS,
        )
    assert [a["font"]["color"] for a in labels] == [GRAD_RED, PARAM_BLUE]
    # The margin holds the longest name: 'gain <b>360</b>', 15 characters.
    assert fig["layout"]["margin"]["r"] == PAST_RIGHT_AXIS + LABEL_GAP + round(CHAR_PX * 15)
    # Over a range shown, the line spans it.
    zoomed = OverlayView(left=GRAD, right=None, x_range=(50, 150))
    fig = with_aids(overlay_figure(zoomed), zoomed, aids)
    assert fig["data"][-1]["x"] == [50, 150]
    assert fig["layout"]["xaxis"]["range"] == [50, 150]


def test_a_threshold_label_without_a_right_axis_hugs_the_plot_and_long_names_are_cut() -> None:
    alone = OverlayView(left=GRAD, right=None)
    name = "grad norm over its 30-day p99 by far"
    fig = with_aids(overlay_figure(alone), alone, Aids([Threshold(GRAD.metric, 5.0, name)]))
    (label,) = fig["layout"]["annotations"]
    assert (label["text"], label["xshift"], label["x"]) == (
        "grad norm over its 30-d…",
        LABEL_GAP,
        1.0,
    )
    assert fig["layout"]["margin"]["r"] == max(80, LABEL_GAP * 2 + round(CHAR_PX * 24))
    # On a log axis the label's height is the power of ten; no line below 0, no label.
    logged = OverlayView(left=GRAD, right=None, log_y=True)
    fig = with_aids(
        overlay_figure(logged),
        logged,
        Aids([Threshold(GRAD.metric, 100.0, "high"), Threshold(GRAD.metric, -1.0, "never")]),
    )
    assert [(a["text"], a["y"]) for a in fig["layout"]["annotations"]] == [("high", 2.0)]


def test_no_threshold_line_without_points_or_a_range() -> None:
    empty = OverlayView(left=Line(GRAD.metric, [], []), right=None)
    fig = with_aids(overlay_figure(empty), empty, Aids([Threshold(GRAD.metric, 5.0, "r")]))
    assert names(fig) == [GRAD.metric]


# --- fitted lines -------------------------------------------------------------------------


def test_fitted_lines_dashed_in_the_metrics_colour_with_their_numbers() -> None:
    fig = with_aids(overlay_figure(VIEW), VIEW, Aids(fits=[FIT]))
    before, after, carried = fig["data"][2:]
    assert [t["name"] for t in (before, after, carried)] == [
        f"fit before: {PARAM.metric}",
        f"fit after: {PARAM.metric}",
        f"fit before, continued: {PARAM.metric}",
    ]
    assert (before["x"], before["y"]) == ([0, 100], [78.0, 79.0])
    assert (after["x"], after["y"]) == ([100, 200], [79.0, 81.5])
    assert (carried["x"], carried["y"]) == ([100, 200], [79.0, 80.0])
    assert {t["yaxis"] for t in (before, after, carried)} == {"y2"}
    assert {t["line"]["color"] for t in (before, after, carried)} == {PARAM_BLUE}
    assert [t["line"]["dash"] for t in (before, after, carried)] == ["dash", "dash", "dot"]
    (note,) = fig["layout"]["annotations"]
    assert note["text"] == f"{PARAM.metric}: 10 → 25 per 1k steps, ×2.5"
    assert (note["font"]["color"], note["xref"], note["yref"]) == (PARAM_BLUE, "paper", "paper")
    assert continued(FIT) == ((100, 79.0), (200, 80.0))


def test_a_fit_over_a_gap_is_drawn_where_its_points_are_with_its_level_change() -> None:
    """The server's segments span each side's points; the chart draws them as they come,
    carries the line before on from its last point, and notes the level change."""
    gapped = FitLines(
        PARAM.metric, 100, ((0, 78.0), (60, 78.6)), ((140, 80.0), (200, 81.5)), 10, 25, 2.5, -0.004
    )
    fig = with_aids(overlay_figure(VIEW), VIEW, Aids(fits=[gapped]))
    before, after, carried = fig["data"][2:]
    assert (before["x"], after["x"]) == ([0, 60], [140, 200])
    assert carried["x"] == [60, 200] and carried["y"] == [78.6, pytest.approx(80.0)]
    (note,) = fig["layout"]["annotations"]
    assert note["text"] == f"{PARAM.metric}: 10 → 25 per 1k steps, ×2.5, level change -0.004"


def test_a_fit_of_a_metric_not_charted_is_not_drawn() -> None:
    other = FitLines("train/loss", 100, ((0, 1), (100, 2)), ((100, 2), (200, 3)), 1, 1, 1)
    fig = with_aids(overlay_figure(VIEW), VIEW, Aids(fits=[other]))
    assert names(fig) == [GRAD.metric, PARAM.metric]
    assert fig["layout"]["annotations"] == []


def test_slope_and_number_texts() -> None:
    assert slope_text(FIT) == "10 → 25 per 1k steps, ×2.5"
    flat = FitLines("m", 5, ((0, 0), (5, 0)), ((5, 0), (9, 1)), 0.0031, 1.2, None)
    assert slope_text(flat) == "0.0031 → 1.2 per 1k steps"
    assert [number_text(v) for v in (0.0, 0.25, -0.5, 0.96, 1.04, 300.3, 1234.0, -2e-5)] == [
        "0",
        "0.25",
        "-0.5",
        "0.96",
        "1.04",
        "300.3",
        "1,234",
        "-2e-5",
    ]


# --- the forecast -------------------------------------------------------------------------


def test_the_forecast_line_and_its_eta_note() -> None:
    found = forecast(GRAD.metric, GRAD.steps, GRAD.values, fraction=1.0, thresholds=[5.0])
    assert found is not None and found.end == 400
    aids = Aids([Threshold(GRAD.metric, 5.0, "grad norm 5+")], forecast=found)
    fig = with_aids(overlay_figure(VIEW), VIEW, aids)
    threshold, line = fig["data"][2:]
    assert threshold["x"] == [0, 400]  # the threshold reaches as far as the forecast
    assert line["name"] == f"forecast: {GRAD.metric}"
    assert (line["x"], line["y"], line["yaxis"], line["line"]["dash"]) == (
        [0, 400],
        [1.0, 5.0],
        "y",
        "dashdot",
    )
    label, note = fig["layout"]["annotations"]
    assert label["text"] == "grad norm 5+"
    assert note["text"].endswith("reaches 5.0 in ~200 steps")
    # The chart, drawn to its data's ends (0-200), stretches to take the forecast in.
    assert fig["layout"]["xaxis"]["range"] == [0, 400]
    # A range shown that ends at the last point is stretched to show the forecast.
    zoomed = OverlayView(left=GRAD, right=PARAM, x_range=(0, 200))
    fig = with_aids(overlay_figure(zoomed), zoomed, aids)
    assert fig["layout"]["xaxis"]["range"] == [0, 400]
