"""Figure builders: traces, axes, markers and empty cases; trainer-chosen text reaches Plotly
escaped, templates stay constant."""

from __future__ import annotations

import doctest
import html
import math

import pytest

from normwatch.dashboard import figures
from normwatch.dashboard.figures import (
    EVENT_GREY,
    FIRING_RED,
    GRAD_RED,
    PARAM_BLUE,
    RESOLVED_GREEN,
    WHITE_TEMPLATE,
    AlertMark,
    Line,
    Marker,
    OverlayView,
    depth_figure,
    empty_figure,
    overlay_figure,
    plot_text,
)

LINK = '<a href="javascript:alert(1)">x</a>'
STYLED = '<span style="font-size:80px">big</span>'
TEMPLATE = "loss %{y}"
ENTITY = "a &amp; b"

LINE_TEMPLATE = "step %{x}<br>%{y:.6g}<extra>%{meta}</extra>"


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        (LINK, '&lt;a href="javascript:alert(1)"&gt;x&lt;/a&gt;'),
        (STYLED, '&lt;span style="font-size:80px"&gt;big&lt;/span&gt;'),
        (TEMPLATE, "loss &#37;{y}"),
        (ENTITY, "a &amp;amp; b"),
        ("<b>%{x}</b><br>&lt;", "&lt;b&gt;&#37;{x}&lt;/b&gt;&lt;br&gt;&amp;lt;"),
        ("%{%{", "&#37;{&#37;{"),
        ("100% {a} %", "100% {a} %"),
        ("grad/norm/layers.0.attn.wq", "grad/norm/layers.0.attn.wq"),
        ("", ""),
    ],
)
def test_plot_text_escapes_markup_entities_and_template_syntax(text: str, escaped: str) -> None:
    assert plot_text(text) == escaped
    # Plotly decodes named and numeric entities once when it draws, as html.unescape does.
    assert html.unescape(plot_text(text)) == text
    assert "<" not in plot_text(text) and ">" not in plot_text(text)
    assert "%{" not in plot_text(text)


def payload_view() -> OverlayView:
    return OverlayView(
        left=Line(LINK, [0, 1, 2], [1.0, math.nan, 3.0]),
        right=Line(STYLED + " " + TEMPLATE, [0, 1, 2], [4.0, 5.0, 6.0], downsampled=True),
        events=[Marker(1, LINK + " " + ENTITY, kind=STYLED)],
        alerts=[
            AlertMark(1, "firing", f"{TEMPLATE} · {LINK}"),
            AlertMark(2, "resolved", ENTITY),
        ],
    )


def test_overlay_figure_escapes_names_events_and_alerts() -> None:
    fig = overlay_figure(payload_view())
    left, right, non_finite, firing, resolved = fig["data"]
    right_name = plot_text(STYLED + " " + TEMPLATE)

    assert left["name"] == '&lt;a href="javascript:alert(1)"&gt;x&lt;/a&gt;'
    assert left["meta"] == left["name"]
    assert right["name"] == right_name + " (downsampled, spikes kept)"
    assert right["meta"] == right_name
    # The metric reaches the hover label through meta; the template itself never changes.
    assert left["hovertemplate"] == right["hovertemplate"] == LINE_TEMPLATE
    assert non_finite["text"] == [f"{plot_text(LINK)}: NaN"]
    assert non_finite["hovertemplate"] == "step %{x}<br>%{text}<extra></extra>"
    assert firing["text"] == [f"loss &#37;{{y}} · {plot_text(LINK)}"]
    assert firing["hovertemplate"] == "step %{x}<br>%{text}<extra>firing</extra>"
    assert resolved["text"] == ["a &amp;amp; b"]
    assert resolved["hovertemplate"] == "step %{x}<br>%{text}<extra>resolved</extra>"

    layout = fig["layout"]
    assert [a["text"] for a in layout["annotations"]] == [f"{plot_text(LINK)} a &amp;amp; b (1)"]
    assert [s["name"] for s in layout["shapes"]] == [f"event:{plot_text(STYLED)}"]
    assert layout["yaxis"]["title"]["text"] == plot_text(LINK)
    assert layout["yaxis2"]["title"]["text"] == right_name


def test_overlay_figure_leaves_plain_names_as_they_are() -> None:
    view = OverlayView(
        left=Line("grad/norm/total", [0], [1.0]),
        right=Line("params/norm/final_norm.weight", [0], [2.0]),
        events=[Marker(0, "near-dropless EP routing", "config")],
    )
    fig = overlay_figure(view)
    assert [t["name"] for t in fig["data"]] == ["grad/norm/total", "params/norm/final_norm.weight"]
    assert fig["layout"]["annotations"][0]["text"] == "near-dropless EP routing (0)"


def test_depth_figure_escapes_labels_family_and_title() -> None:
    family = "grad/norm/" + STYLED
    fig = depth_figure(["layers.0", "lm_head." + LINK], [1.0, 2.0], family=family, step=1200)
    bar = fig.data[0]
    assert list(bar.x) == ["layers.0", "lm_head." + plot_text(LINK)]
    assert bar.name == plot_text(family)
    assert bar.hovertemplate == "%{x}<br>%{y:.6g}<extra></extra>"
    assert fig.layout.title.text == f"{plot_text(family)} by depth at step 1,200"


def test_empty_figure_escapes_its_message() -> None:
    fig = empty_figure(f"nothing for {LINK}")
    assert fig["layout"]["annotations"][0]["text"] == f"nothing for {plot_text(LINK)}"


# --- structure: traces, axes, markers -----------------------------------------------------


def test_overlay_figure_draws_left_red_and_right_blue_on_twin_axes() -> None:
    view = OverlayView(
        left=Line("grad/norm/total", [0, 1, 2], [0.5, 0.6, 0.7]),
        right=Line("params/norm/final_norm.weight", [0, 2], [78.0, 79.0], downsampled=True),
    )
    fig = overlay_figure(view)
    assert fig["data"] == [
        {
            "type": "scatter",
            "x": [0, 1, 2],
            "y": [0.5, 0.6, 0.7],
            "name": "grad/norm/total",
            "meta": "grad/norm/total",
            "mode": "lines",
            "line": {"color": GRAD_RED, "width": 1.5},
            "yaxis": "y",
            "connectgaps": False,
            "hovertemplate": LINE_TEMPLATE,
        },
        {
            "type": "scatter",
            "x": [0, 2],
            "y": [78.0, 79.0],
            "name": "params/norm/final_norm.weight (downsampled, spikes kept)",
            "meta": "params/norm/final_norm.weight",
            "mode": "lines",
            "line": {"color": PARAM_BLUE, "width": 1.5},
            "yaxis": "y2",
            "connectgaps": False,
            "hovertemplate": LINE_TEMPLATE,
        },
    ]
    layout = fig["layout"]
    assert layout["template"] is WHITE_TEMPLATE
    assert (layout["uirevision"], layout["height"], layout["hovermode"]) == (
        "overlay",
        480,
        "x unified",
    )
    # The data's own ends, not padded past them.
    assert layout["xaxis"] == {
        "title": {"text": "step"},
        "showgrid": True,
        "range": [0, 2],
        "autorange": False,
    }
    assert layout["yaxis"] == {
        "title": {"text": "grad/norm/total", "font": {"color": GRAD_RED}},
        "tickfont": {"color": GRAD_RED},
        "type": "linear",
    }
    assert layout["yaxis2"] == {
        "title": {"text": "params/norm/final_norm.weight", "font": {"color": PARAM_BLUE}},
        "tickfont": {"color": PARAM_BLUE},
        "overlaying": "y",
        "side": "right",
        "type": "linear",
        "tickmode": "auto",
        "showgrid": False,
    }
    assert layout["yaxis3"] == {
        "overlaying": "y",
        "range": [0, 1.05],
        "visible": False,
        "fixedrange": True,
    }
    assert (layout["shapes"], layout["annotations"]) == ([], [])


def test_overlay_figure_log_scale_range_height_and_revision() -> None:
    view = OverlayView(
        left=None,
        right=Line("params/norm/a", [5], [2.0]),
        log_y=True,
        x_range=(100, 300),
        uirevision="r|a",
        height=320,
    )
    fig = overlay_figure(view)
    assert [(t["name"], t["yaxis"], t["line"]["color"]) for t in fig["data"]] == [
        ("params/norm/a", "y2", PARAM_BLUE)
    ]
    layout = fig["layout"]
    assert (layout["yaxis"]["type"], layout["yaxis2"]["type"]) == ("log", "log")
    assert layout["yaxis"]["title"]["text"] == ""
    assert layout["xaxis"]["range"] == [100, 300]
    assert (layout["uirevision"], layout["height"]) == ("r|a", 320)


def test_overlay_figure_without_lines_has_no_traces() -> None:
    fig = overlay_figure(OverlayView(left=None, right=None))
    assert fig["data"] == []
    assert fig["layout"]["yaxis"]["title"]["text"] == fig["layout"]["yaxis2"]["title"]["text"] == ""


def test_overlay_figure_breaks_lines_at_non_finite_values_and_flags_them() -> None:
    view = OverlayView(
        left=Line("grad/norm/total", [0, 1, 2, 3], [1.0, math.nan, math.inf, 2.0]),
        right=Line("params/norm/a", [0, 3], [-math.inf, 4.0]),
    )
    left, right, flagged = overlay_figure(view)["data"]
    assert (left["y"], right["y"]) == ([1.0, None, None, 2.0], [None, 4.0])
    assert flagged == {
        "type": "scatter",
        "x": [1, 2, 0],
        "y": [1.0, 1.0, 1.0],
        "yaxis": "y3",
        "mode": "markers",
        "marker": {"symbol": "x", "color": "black", "size": 9},
        "name": "non-finite",
        "text": ["grad/norm/total: NaN", "grad/norm/total: +Inf", "params/norm/a: -Inf"],
        "hovertemplate": "step %{x}<br>%{text}<extra></extra>",
    }


def test_overlay_figure_marks_firing_and_resolved_alerts_on_the_top_edge() -> None:
    alerts = [
        AlertMark(10, "firing", "a"),
        AlertMark(20, "resolved", "b"),
        AlertMark(30, "firing", "c"),
        AlertMark(40, "pending", "not drawn"),
    ]
    fig = overlay_figure(OverlayView(left=None, right=None, alerts=alerts))
    firing, resolved = fig["data"]
    assert firing == {
        "type": "scatter",
        "x": [10, 30],
        "y": [1.0, 1.0],
        "yaxis": "y3",
        "mode": "markers",
        "marker": {"symbol": "triangle-down", "color": FIRING_RED, "size": 12},
        "name": "alert firing",
        "text": ["a", "c"],
        "hovertemplate": "step %{x}<br>%{text}<extra>firing</extra>",
    }
    assert (resolved["x"], resolved["y"], resolved["text"]) == ([20], [0.97], ["b"])
    assert resolved["marker"]["color"] == RESOLVED_GREEN
    assert resolved["name"] == "alert resolved"


def test_overlay_figure_draws_events_as_dashed_lines_with_labels() -> None:
    events = [Marker(1000, "near-dropless EP routing", "config"), Marker(25_000, "resumed")]
    layout = overlay_figure(OverlayView(left=None, right=None, events=events))["layout"]
    assert layout["shapes"] == [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": step,
            "x1": step,
            "y0": 0,
            "y1": 1,
            "line": {"color": EVENT_GREY, "width": 1.2, "dash": "dash"},
            "name": f"event:{kind}",
        }
        for step, kind in ((1000, "config"), (25_000, "note"))
    ]
    assert layout["annotations"] == [
        {
            "x": step,
            "y": 1.0,
            "xref": "x",
            "yref": "paper",
            "yanchor": "bottom",
            # No range to lean inward from: each label starts at its line.
            "xanchor": "left",
            "text": label,
            "showarrow": False,
            "font": {"size": 11, "color": EVENT_GREY},
        }
        for step, label in (
            (1000, "near-dropless EP routing (1,000)"),
            (25_000, "resumed (25,000)"),
        )
    ]


def test_event_labels_near_the_charts_ends_lean_inward_and_stay_whole() -> None:
    line = Line("grad/norm/total", [0, 50_000, 100_000], [1.0, 2.0, 3.0])
    events = [Marker(s, f"e{s}") for s in (0, 11_000, 13_000, 50_000, 87_000, 89_000, 100_000)]
    layout = overlay_figure(OverlayView(left=line, right=None, events=events))["layout"]
    assert [(a["x"], a["xanchor"]) for a in layout["annotations"]] == [
        (0, "left"),  # the label of step 0 starts at the chart's left edge, not before it
        (11_000, "left"),
        (13_000, "center"),
        (50_000, "center"),
        (87_000, "center"),
        (89_000, "right"),
        (100_000, "right"),
    ]
    # Zoomed, the ends are the range shown.
    zoomed = OverlayView(left=line, right=None, events=events, x_range=(50_000, 60_000))
    anchors = [a["xanchor"] for a in overlay_figure(zoomed)["layout"]["annotations"]]
    assert anchors[3] == "left" and anchors[4] == "right"


def test_empty_figure_is_a_centred_message_without_axes() -> None:
    fig = empty_figure("No such run in your project")
    assert fig == {
        "data": [],
        "layout": {
            "template": WHITE_TEMPLATE,
            "height": 480,
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [
                {
                    "text": "No such run in your project",
                    "showarrow": False,
                    "font": {"size": 16},
                    "x": 0.5,
                    "y": 0.5,
                    "xref": "paper",
                    "yref": "paper",
                }
            ],
        },
    }


def test_depth_figure_bars_by_depth() -> None:
    fig = depth_figure(
        ["embed", "layers.0", "layers.1", "lm_head"],
        [6.0, math.nan, 1.5, math.inf],
        family="grad/norm",
        step=12_000,
    )
    (bar,) = fig.data
    assert bar.type == "bar"
    assert list(bar.x) == ["embed", "layers.0", "layers.1", "lm_head"]
    assert list(bar.y) == [6.0, None, 1.5, None]
    assert (bar.marker.color, bar.name) == (GRAD_RED, "grad/norm")
    layout = fig.layout
    assert layout.title.text == "grad/norm by depth at step 12,000"
    assert layout.xaxis.title.text == "depth (embedding → lm_head)"
    assert (layout.xaxis.tickangle, layout.yaxis.type) == (-45, "linear")
    assert (layout.height, layout.uirevision) == (320, "grad/norm")


def test_depth_figure_of_parameter_norms_on_a_log_axis_without_a_step() -> None:
    fig = depth_figure(["layers.0"], [2.0], family="params/norm", step=None, log_y=True)
    assert fig.data[0].marker.color == PARAM_BLUE
    assert fig.layout.title.text == "params/norm by depth"
    assert fig.layout.yaxis.type == "log"


def test_depth_figure_without_layers_has_one_empty_bar_trace() -> None:
    fig = depth_figure([], [], family="updates/norm", step=None)
    assert [(list(t.x), list(t.y)) for t in fig.data] == [([], [])]


def test_doctests() -> None:
    failed, tried = doctest.testmod(figures)
    assert (failed, tried > 0) == (0, True)
