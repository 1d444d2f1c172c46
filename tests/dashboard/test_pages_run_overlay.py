"""The run page's overlay chart: what it draws for a view, its shape and data patch, and the
texts beside it."""

from __future__ import annotations

import math

from normwatch.dashboard.figures import AlertMark, Line, Marker, OverlayView, plot_text
from normwatch.dashboard.pages.run_overlay import (
    NO_EVENTS,
    NO_METRICS,
    chart_shape,
    data_patch,
    event_list,
    overlay_for,
    range_text,
    view_figure,
)
from normwatch.dashboard.pages.run_view import RunView

from .components import find, text, tree

RUN = "r1"
GRAD = Line("grad/norm/total", [0, 1, 2], [1.0, 2.0, 3.0])
PARAM = Line("params/norm/final_norm.weight", [0, 2], [5.0, 6.0], downsampled=True)
EVENTS = [Marker(1, "lr warmup ends", "config")]
ALERTS = [AlertMark(2, "firing", "grad-high")]

LINK = '<a href="javascript:alert(1)">x</a>'
STYLED = '<span style="font-size:80px">big</span>'
TEMPLATE = "loss %{y}"


def test_overlay_for_draws_the_views_lines_events_and_alerts() -> None:
    view = RunView(RUN, GRAD.metric, PARAM.metric, 0, 2, log=True)
    lines = {GRAD.metric: GRAD, PARAM.metric: PARAM}
    assert overlay_for(view, lines, EVENTS, ALERTS) == OverlayView(
        left=GRAD,
        right=PARAM,
        events=EVENTS,
        log_y=True,
        x_range=(0, 2),
        uirevision=f"{RUN}|grad/norm/total|params/norm/final_norm.weight|True",
        alerts=ALERTS,
    )


def test_overlay_for_leaves_an_axis_empty_without_its_line() -> None:
    view = RunView(RUN, GRAD.metric, "", start=5)
    overlay = overlay_for(view, {GRAD.metric: GRAD, "": PARAM}, [], [])
    assert overlay is not None
    assert (overlay.left, overlay.right, overlay.x_range) == (GRAD, None, None)
    assert overlay.uirevision == f"{RUN}|grad/norm/total||False"
    missing = overlay_for(RunView(RUN, "train/loss"), {}, [], [])
    assert missing is not None and (missing.left, missing.right) == (None, None)


def test_overlay_for_a_view_without_metrics_is_none() -> None:
    assert overlay_for(RunView(RUN), {GRAD.metric: GRAD}, EVENTS, ALERTS) is None
    assert overlay_for(RunView(RUN, "", ""), {}, [], []) is None


def test_view_figure() -> None:
    empty = view_figure(None)
    assert empty["data"] == []
    assert [a["text"] for a in empty["layout"]["annotations"]] == [NO_METRICS]
    drawn = view_figure(OverlayView(left=GRAD, right=None))
    assert [(t["name"], t["yaxis"]) for t in drawn["data"]] == [("grad/norm/total", "y")]


def test_chart_shape_names_traces_events_and_alerts() -> None:
    overlay = OverlayView(left=GRAD, right=PARAM, events=EVENTS, alerts=ALERTS)
    fig = view_figure(overlay)
    assert chart_shape(fig, EVENTS, ALERTS) == [
        "grad/norm/total|y",
        "params/norm/final_norm.weight (downsampled, spikes kept)|y2",
        "alert firing|y3",
        "event@1",
        "alert:firing@2",
        "layout:overlay|step",
    ]
    assert chart_shape(view_figure(None), [], []) == []


def test_data_patch_assigns_points_shapes_and_annotations() -> None:
    nan_line = Line("grad/norm/total", [0, 1], [1.0, math.nan])
    fig = view_figure(OverlayView(left=nan_line, right=None, events=EVENTS))
    shapes, annotations = fig["layout"]["shapes"], fig["layout"]["annotations"]
    assert data_patch(fig).to_plotly_json() == {
        "__dash_patch_update": "__dash_patch_update",
        "operations": [
            {"operation": "Assign", "location": ["data", 0, "x"], "params": {"value": [0, 1]}},
            {"operation": "Assign", "location": ["data", 0, "y"], "params": {"value": [1.0, None]}},
            {"operation": "Assign", "location": ["data", 1, "x"], "params": {"value": [1]}},
            {"operation": "Assign", "location": ["data", 1, "y"], "params": {"value": [1.0]}},
            # The chart shows every step: its x range follows the run as it grows.
            {
                "operation": "Assign",
                "location": ["layout", "xaxis", "range"],
                "params": {"value": [0, 1]},
            },
            {"operation": "Assign", "location": ["layout", "shapes"], "params": {"value": shapes}},
            {
                "operation": "Assign",
                "location": ["layout", "annotations"],
                "params": {"value": annotations},
            },
        ],
    }
    assert len(shapes) == len(annotations) == 1


def test_range_text_names_metrics_as_written() -> None:
    view = OverlayView(
        left=Line(LINK, [0, 1, 2], [1.0, math.nan, 3.0]),
        right=Line(STYLED + " " + TEMPLATE, [0, 1, 2], [4.0, 5.0, 6.0], downsampled=True),
    )
    assert range_text(view) == (
        f"{LINK}: 3 points, steps 0–2 · {STYLED} {TEMPLATE} (downsampled, spikes kept): "
        "3 points, steps 0–2"
    )


def test_range_text_counts_and_skips_empty_lines() -> None:
    many = Line("grad/norm/total", list(range(0, 200_000, 50)), [1.0] * 4000, downsampled=True)
    assert range_text(OverlayView(left=many, right=Line("params/norm/a", [], []))) == (
        "grad/norm/total (downsampled, spikes kept): 4,000 points, steps 0–199,950"
    )
    assert range_text(OverlayView(left=None, right=None)) == ""
    assert range_text(None) == ""


def test_event_list_has_a_zoom_button_per_event() -> None:
    markers = [Marker(1000, "lr warmup ends", "config"), Marker(12_345, LINK, "restart")]
    listed = event_list(markers)
    assert tree(listed)["props"]["className"] == "events"
    assert [(b["id"], b["children"], b["n_clicks"]) for b in find(listed, "Button")] == [
        ({"type": "event-zoom", "step": 1000}, "zoom", 0),
        ({"type": "event-zoom", "step": 12_345}, "zoom", 0),
    ]
    # The event's own text, as written: Dash renders it as text, not markup.
    assert [s["children"] for s in find(listed, "Span")] == [
        " step 1,000 · config · lr warmup ends",
        f" step 12,345 · restart · {LINK}",
    ]
    assert plot_text(LINK) not in text(listed)


def test_event_list_without_events_says_how_to_post_one() -> None:
    empty = tree(event_list([]))
    assert (empty["type"], empty["props"]) == ("P", {"children": NO_EVENTS, "className": "muted"})
