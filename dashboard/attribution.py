"""The attribution chart: each parameter group's share of a global norm's square over
time, stacked, with the steps where the parts do not add up to the total marked. Pure.

A global norm is the root of its parts' summed squares, so the shares stack to one where
the parts logged are the parts of that total; the server computes them from exact values at
sampled steps (`normwatch.server.services.attribution`). The figure is a plain dict, as in
`.figures`, and every name a trainer chose goes through `.figures.plot_text`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .figures import WHITE_TEMPLATE, Figure, plot_text, run_color

__all__ = [
    "MISMATCH_RED",
    "attribution_families",
    "attribution_figure",
    "sum_check_text",
]

FAMILIES = ("grad/norm", "updates/norm", "params/norm")
MISMATCH_RED = "#c0392b"


def attribution_families(names: Iterable[str]) -> list[str]:
    """The families whose ``<family>/total`` and at least one part are logged, the usual
    three first, in that order.

    >>> attribution_families(["grad/norm/total", "grad/norm/lm_head", "params/norm/total"])
    ['grad/norm']
    """
    present = set(names)
    found = []
    for family in FAMILIES:
        stem = family + "/"
        if stem + "total" in present and any(
            n.startswith(stem) and n != stem + "total" for n in present
        ):
            found.append(family)
    return found


def sum_check_text(steps: Sequence[int], mismatched: Sequence[int], tolerance: float) -> str:
    """Whether the parts add up to the total at the steps drawn.

    >>> sum_check_text([0, 10, 20], [], 0.01)
    'parts add up to the total (±1 %) at all 3 steps drawn'
    >>> sum_check_text([0, 10, 20], [10, 20], 0.01)
    'parts do not add up to the total (±1 %) at 2 of 3 steps drawn, first at 10'
    """
    within = f"(±{100 * tolerance:g} %)"
    if not steps:
        return ""
    if not mismatched:
        return f"parts add up to the total {within} at all {len(steps):,} steps drawn"
    return (
        f"parts do not add up to the total {within} at {len(mismatched):,} of "
        f"{len(steps):,} steps drawn, first at {min(mismatched):,}"
    )


def attribution_figure(
    prefix: str,
    groups: Sequence[str],
    steps: Sequence[int],
    shares: Sequence[Sequence[float | None]],
    sums: Sequence[float | None],
    mismatched: Sequence[int],
    *,
    x_range: tuple[int, int] | None = None,
    uirevision: str = "attribution",
    height: int = 340,
) -> Figure:
    """The groups' shares of ``<prefix>/total``² stacked as areas (the first group at the
    bottom), and at each step of ``mismatched`` a red ✕ on the top edge with the sum there
    and a dotted line of the sum, so a gap or an overshoot shows."""
    traces: list[dict[str, Any]] = []
    for i, (group, row) in enumerate(zip(groups, shares, strict=True)):
        name = plot_text(group)
        traces.append(
            {
                "type": "scatter",
                "x": list(steps),
                "y": list(row),
                "name": name,
                "meta": name,
                "mode": "lines",
                "stackgroup": "shares",
                "line": {"width": 0.5, "color": run_color(i)},
                "hovertemplate": "step %{x}<br>%{y:.1%}<extra>%{meta}</extra>",
            }
        )
    bad = set(mismatched)
    if bad:
        traces.append(
            {
                "type": "scatter",
                "x": list(steps),
                "y": list(sums),
                "name": "sum of the shares",
                "mode": "lines",
                "line": {"color": MISMATCH_RED, "width": 1, "dash": "dot"},
                "hovertemplate": "step %{x}<br>sum %{y:.1%}<extra></extra>",
            }
        )
        marked = [(s, v) for s, v in zip(steps, sums, strict=True) if s in bad]
        traces.append(
            {
                "type": "scatter",
                "x": [s for s, _ in marked],
                "y": [1.0] * len(marked),
                "yaxis": "y2",
                "mode": "markers",
                "marker": {"symbol": "x", "color": MISMATCH_RED, "size": 8},
                "name": "parts ≠ total",
                "text": ["—" if v is None else f"sum {v:.1%}" for _, v in marked],
                "hovertemplate": "step %{x}<br>%{text}<extra>parts ≠ total</extra>",
            }
        )
    xaxis: dict[str, object] = {"title": {"text": "step"}, "showgrid": True}
    if x_range is None:
        # Said outright: with the same uirevision, Plotly keeps a range drawn before.
        xaxis["autorange"] = True
    else:
        xaxis["range"] = list(x_range)
    layout = {
        "uirevision": uirevision,
        "template": WHITE_TEMPLATE,
        "height": height,
        "margin": {"l": 70, "r": 30, "t": 40, "b": 50},
        "title": {"text": f"share of {plot_text(prefix)}/total²", "font": {"size": 14}},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "x": 0, "y": -0.25},
        "xaxis": xaxis,
        "yaxis": {"tickformat": ".0%", "rangemode": "tozero"},
        "yaxis2": {"overlaying": "y", "range": [0, 1.05], "visible": False, "fixedrange": True},
    }
    return {"data": traces, "layout": layout}
