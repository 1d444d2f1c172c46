"""Figure builders: trainer-chosen text reaches Plotly escaped, templates stay constant."""

from __future__ import annotations

import html
import math

import pytest
from normwatch.dashboard.figures import (
    AlertMark,
    Line,
    Marker,
    OverlayView,
    depth_figure,
    empty_figure,
    overlay_figure,
    plot_text,
)
from normwatch.dashboard.pages.run import range_text, view_figure

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
    assert right["name"] == right_name + " (M4)"
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


def test_run_page_range_text_names_metrics_as_written() -> None:
    view = payload_view()
    assert range_text(view) == (
        f"{LINK}: 3 points, steps 0–2 · {STYLED} {TEMPLATE} (M4): 3 points, steps 0–2"
    )
    assert range_text(None) == ""
    assert view_figure(None)["layout"]["annotations"][0]["text"] == "This run has no metrics yet."
