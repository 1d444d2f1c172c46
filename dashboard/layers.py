"""Per-layer views: which families have layers, which rows of a layer grid to draw, and the
figures of the layer × step heatmap and of the U-index over time. Pure functions.

The server orders a family's parts by depth and gives the grid and its U-index
(`normwatch.server.services.layers`); what is left here is what a chart needs of them. The
figures are plain dicts, as in `.figures`, and every name a trainer chose goes through
`.figures.plot_text`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from normwatch.server.analytics.hierarchy import outermost
from normwatch.server.analytics.layers import u_index

from .figures import (
    GRAD_RED,
    PARAM_BLUE,
    WHITE_TEMPLATE,
    Figure,
    empty_figure,
    log_ticks_of,
    plot_text,
    typed_array,
)

__all__ = [
    "FAMILIES",
    "LayerHeatmap",
    "colour_ticks",
    "depth_profile_figure",
    "families_with_layers",
    "family_of",
    "layer_heatmap_figure",
    "layer_rows",
    "cell_array",
    "pin_shapes",
    "rows_u_index",
    "small_empty",
    "u_index_figure",
    "u_index_shapes",
]

FAMILIES = ("grad/norm", "updates/norm", "params/norm")
_LAYER = re.compile(r"^(?P<family>.+)/layers\.(?P<index>\d+)$")


def families_with_layers(names: Iterable[str]) -> list[str]:
    """The families that have per-layer metrics (``<family>/layers.<i>``), the usual three
    first.

    >>> families_with_layers(["params/norm/layers.0", "grad/norm/layers.3", "opt/x/layers.1"])
    ['grad/norm', 'params/norm', 'opt/x']
    """
    present = {m.group("family") for n in names if (m := _LAYER.match(n))}
    return [f for f in FAMILIES if f in present] + sorted(present - set(FAMILIES))


def family_of(metric: str, families: Iterable[str]) -> str | None:
    """The family among ``families`` that ``metric`` belongs to, the longest that fits
    (``updates/norm/total`` → ``updates/norm``), or None.

    >>> family_of("updates/norm/total", ["grad/norm", "updates/norm"])
    'updates/norm'
    >>> family_of("train/loss", ["grad/norm"]) is None
    True
    """
    fitting = [f for f in families if metric.startswith(f + "/")]
    return max(fitting, key=len) if fitting else None


def layer_rows(parts: Sequence[str]) -> list[int]:
    """The indices of the rows of a layer grid that stand for a whole part: a part inside
    another part of the grid (``layers.3.mlp.w1`` beside ``layers.3``) is left out, by the
    server's hierarchy rule (`outermost`), so that the page and the API agree.

    Trainers that log every leaf and every layer (``stability_metrics`` by default) give
    the server a grid of both; the heatmap shows the layers, one row each.

    >>> layer_rows(["embed", "layers.0", "layers.0.mlp.w1", "layers.1", "lm_head"])
    [0, 1, 3, 4]
    >>> layer_rows(["embed.embedding", "layers.0.w", "lm_head.kernel"])
    [0, 1, 2]
    """
    kept = set(outermost(parts))
    return [i for i, part in enumerate(parts) if part in kept]


def rows_u_index(rows: Sequence[Sequence[float | None]]) -> list[float | None]:
    """The U-index of each column of ``rows`` (in depth order), as the server defines it:
    the mean of the two end rows over the median of the middle rows (None where undefined).

    >>> rows_u_index([[6.0], [1.0], [2.0], [3.0], [10.0]])
    [4.0]
    """
    if not rows:
        return []
    grid = np.array([[math.nan if v is None else v for v in row] for row in rows], dtype=float)
    return [v if math.isfinite(v) else None for v in u_index(grid).tolist()]


def cell_array(rows: Sequence[Sequence[float | None]]) -> npt.NDArray[np.float64]:
    """The grid's cells as a 2-D float array, NaN where a cell has no value.

    >>> cell_array([[1.0, None], [None, 2.5]]).tolist()
    [[1.0, nan], [nan, 2.5]]
    """
    return np.array(
        [[np.nan if v is None else v for v in row] for row in rows], dtype=np.float64
    ).reshape(len(rows), -1)


def colour_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Colourbar ticks for a scale of ``log10`` values from ``low`` to ``high``: the
    positions of 1, 2 and 5 times each power of ten in between, labelled in real values.

    Where the span holds fewer than two of those, the two ends are labelled instead.

    >>> colour_ticks(0.0, 1.0)
    ([0.0, 0.301, 0.699, 1.0], ['1', '2', '5', '10'])
    >>> colour_ticks(-2.5, 2.5)[1]
    ['0.01', '0.1', '1', '10', '100']
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        return [], []
    mantissas = (1.0, 2.0, 5.0)
    ticks = [
        math.log10(m) + exponent
        for exponent in range(math.floor(low), math.ceil(high) + 1)
        for m in mantissas
        if low - 1e-9 <= math.log10(m) + exponent <= high + 1e-9
    ]
    if len(ticks) > 8:  # a wide span: powers of ten only
        ticks = [t for t in ticks if abs(t - round(t)) < 1e-9]
    if len(ticks) < 2:
        ticks = [low, high] if high > low else [low]
    labels = [f"{10**t:.3g}" for t in ticks]
    # Each tick sits where its label's value is, rounded as the cells are.
    return [round(math.log10(float(label)), 3) for label in labels], labels


PIN_BLACK = "#111111"
U_INDEX_GREEN = "#2c7a4b"
HEATMAP_COLOURS = "Viridis"
RIGHT_MARGIN = 110
"""The heatmap's colourbar fits in this margin; the U-index chart has the same, so that the
two share their x axis pixel for pixel."""


@dataclass(frozen=True)
class LayerHeatmap:
    """One family's layer × step grid as the heatmap draws it.

    ``layers`` are in depth order (the embedding first, drawn at the bottom); ``values`` has
    a row per layer and a column per step of ``steps`` (None: nothing logged there). With
    ``bucketed`` each column stands for the steps up to the next column's, and its cells
    are the largest values logged in them.
    """

    family: str
    layers: Sequence[str]
    steps: Sequence[int]
    values: Sequence[Sequence[float | None]]
    bucketed: bool = False
    x_range: tuple[int, int] | None = None
    pinned: int | None = None
    height: int | None = None


def pin_shapes(step: int | None) -> list[dict[str, Any]]:
    """The dotted vertical line that marks the pinned step on the layer charts."""
    if step is None:
        return []
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": step,
            "x1": step,
            "y0": 0,
            "y1": 1,
            "line": {"color": PIN_BLACK, "width": 1.5, "dash": "dot"},
            "name": "pinned",
        }
    ]


def level_one(name: str) -> dict[str, Any]:
    """A dashed grey line across the chart at 1 (a flat U-index, a layer at its baseline)."""
    return {
        "type": "line",
        "xref": "paper",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": 1,
        "y1": 1,
        "line": {"color": "#999999", "width": 1, "dash": "dash"},
        "name": name,
    }


def u_index_shapes(pinned: int | None) -> list[dict[str, Any]]:
    """The U-index chart's lines: 1 (a flat profile), dashed, and the pinned step."""
    return [level_one("flat"), *pin_shapes(pinned)]


def _xaxis(x_range: tuple[int, int] | None) -> dict[str, Any]:
    axis: dict[str, Any] = {"title": {"text": "step"}, "showgrid": False}
    if x_range is not None:
        axis["range"] = list(x_range)
    return axis


ROW_PIXELS = 14
"""The least height a labelled row needs (11 px text and a gap)."""
_NUMBERED = re.compile(r"(^|[./])(layers?|blocks?|h)\.?\d+($|[./])")


def row_ticks(layers: Sequence[str], height: int) -> dict[str, Any]:
    """The rows the heatmap labels: all when they fit, else every k-th numbered layer and
    every part that is no numbered layer (the embedding, ``final_norm``, the head), which
    plotly.js's own thinning would skip as readily as any other. Hover names every row.

    >>> row_ticks(["embed", "layers.0", "layers.1", "final_norm", "lm_head"], 400)
    {}
    >>> names = ["embed", *[f"layers.{i}" for i in range(80)], "final_norm", "lm_head"]
    >>> shown = row_ticks(names, 720)["tickvals"]
    >>> shown[:3], shown[-3:], len(shown) <= (720 - 85) // ROW_PIXELS
    (['embed', 'layers.0', 'layers.2'], ['layers.78', 'final_norm', 'lm_head'], True)
    """
    fits = max(1, (height - 85) // ROW_PIXELS)
    if len(layers) <= fits:
        return {}
    named = [i for i, layer in enumerate(layers) if not _NUMBERED.search(layer)]
    if len(named) >= fits:  # no depth numbering to thin by: every k-th row, and the last
        every = -(-len(layers) // fits)
        kept = sorted({*range(0, len(layers), every), len(layers) - 1})
    else:
        numbered = [i for i in range(len(layers)) if i not in set(named)]
        every = -(-len(numbered) // (fits - len(named)))
        kept = sorted({*named, *numbered[::every]})
    labels = [plot_text(layers[i]) for i in kept]
    return {"tickmode": "array", "tickvals": labels, "ticktext": labels}


def layer_heatmap_figure(grid: LayerHeatmap) -> Figure:
    """Layers (rows, the embedding at the bottom) × steps (columns), coloured by ``log10`` of
    the value, with a colourbar labelled in real values; hover gives the real value.

    A log scale because the U spans an order of magnitude and more: on a linear one the
    middle layers would all share one colour.
    """
    values = cell_array(grid.values)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(np.isfinite(values) & (values > 0), np.log10(values), np.nan)
    known = z[np.isfinite(z)]
    low, high = (float(known.min()), float(known.max())) if known.size else (0.0, 1.0)
    if high == low:
        low, high = low - 0.5, high + 0.5
    tickvals, ticktext = colour_ticks(low, high)
    what = "largest in its steps" if grid.bucketed else "at that step"
    trace = {
        "type": "heatmap",
        "x": list(grid.steps),
        "y": [plot_text(layer) for layer in grid.layers],
        # Both as float32 typed arrays (`typed_array`): 50,000 cells, where JSON numbers
        # were 750 KB that the server wrote and the browser parsed one by one. Hover shows
        # the real values to 4 digits, the colour their log.
        "z": typed_array(z),
        "customdata": typed_array(values),
        "zmin": low,
        "zmax": high,
        "colorscale": HEATMAP_COLOURS,
        "hoverongaps": False,
        "colorbar": {
            "title": {"text": plot_text(grid.family), "side": "right"},
            "tickvals": tickvals,
            "ticktext": ticktext,
            "thickness": 14,
            "x": 1.01,
            "xanchor": "left",
        },
        "hovertemplate": f"%{{y}} · step %{{x}}<br>%{{customdata:.4g}} ({what})<extra></extra>",
        "name": plot_text(grid.family),
    }
    height = grid.height or max(320, min(720, 110 + 12 * len(grid.layers)))
    layout = {
        "template": WHITE_TEMPLATE,
        "height": height,
        "margin": {"l": 110, "r": RIGHT_MARGIN, "t": 40, "b": 45},
        "title": {
            "text": f"{plot_text(grid.family)} by layer and step (log colour)",
            "font": {"size": 14},
        },
        "xaxis": _xaxis(grid.x_range),
        "yaxis": {
            "type": "category",
            "title": {"text": "embedding → lm_head"},
            "tickfont": {"size": 11},
            "automargin": True,
            **row_ticks(grid.layers, height),
        },
        "shapes": pin_shapes(grid.pinned),
        "uirevision": f"{grid.family}|{grid.x_range}",
    }
    return {"data": [trace], "layout": layout}


def u_index_figure(
    steps: Sequence[int],
    values: Sequence[float | None],
    *,
    x_range: tuple[int, int] | None = None,
    pinned: int | None = None,
    uirevision: str = "u-index",
) -> Figure:
    """The U-index (mean of the two ends over the median of the middle) over steps, with a
    dashed line at 1 (a flat profile): a steepening U is this line climbing."""
    trace = {
        "type": "scatter",
        "mode": "lines",
        "x": list(steps),
        "y": [v if v is not None and math.isfinite(v) else None for v in values],
        "name": "U-index",
        "line": {"color": U_INDEX_GREEN, "width": 1.5},
        "connectgaps": False,
        "hovertemplate": "step %{x}<br>ends / middle %{y:.2f}×<extra></extra>",
    }
    layout = {
        "template": WHITE_TEMPLATE,
        "height": 210,
        "margin": {"l": 110, "r": RIGHT_MARGIN, "t": 36, "b": 40},
        "title": {"text": "U-index (ends / middle)", "font": {"size": 13}},
        "showlegend": False,
        "xaxis": _xaxis(x_range),
        "yaxis": {"title": {"text": "ends / middle"}, "rangemode": "tozero"},
        "shapes": u_index_shapes(pinned),
        "uirevision": uirevision,
    }
    return {"data": [trace], "layout": layout}


def depth_profile_figure(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    family: str,
    step: int | None,
    log_y: bool = False,
    baseline_end: int | None = None,
) -> Figure:
    """One family's per-layer values against depth at one step: the U across depth at a
    glance. With ``baseline_end``, the values are each layer's over its own baseline (the
    median of its values before that step): the bars say how many times its usual size each
    layer is, with a dashed line at 1. A plain dict, as `layer_heatmap_figure`: built
    through plotly's figure objects it took 30-80 ms of validating its template on each
    draw."""
    heights = [v if math.isfinite(v) else None for v in values]
    relative = baseline_end is not None
    trace = {
        "type": "bar",
        "x": [plot_text(label) for label in labels],
        "y": heights,
        "marker": {"color": GRAD_RED if family.startswith("grad") else PARAM_BLUE},
        "hovertemplate": (
            "%{x}<br>×%{y:.3g} its baseline<extra></extra>"
            if relative
            else "%{x}<br>%{y:.6g}<extra></extra>"
        ),
        "name": plot_text(family),
    }
    at = f" at step {step:,}" if step is not None else ""
    over = f", × each layer's median before step {baseline_end:,}" if relative else ""
    layout = {
        "template": WHITE_TEMPLATE,
        "height": 320,
        "margin": {"l": 70, "r": 30, "t": 40, "b": 80},
        "title": {"text": f"{plot_text(family)} by depth{at}{over}", "font": {"size": 14}},
        "xaxis": {"title": {"text": "depth (embedding → lm_head)"}, "tickangle": -45},
        "shapes": [level_one("baseline")] if relative else [],
        "yaxis": {"type": "log", **log_ticks_of(heights)} if log_y else {"type": "linear"},
        "uirevision": family,
    }
    return {"data": [trace], "layout": layout}


def small_empty(message: str, height: int) -> Figure:
    """`.figures.empty_figure` at ``height`` pixels."""
    figure = empty_figure(message)
    figure["layout"] = {**figure["layout"], "height": height}
    return figure
