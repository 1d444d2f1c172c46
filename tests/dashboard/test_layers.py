"""Per-layer views: families, the rows a heatmap draws, the U-index, the log colour scale and
the heatmap and U-index figures."""

from __future__ import annotations

import doctest
import math
import statistics

import numpy as np
import pytest

from normwatch.dashboard import layers
from normwatch.dashboard.figures import from_typed, plot_text
from normwatch.dashboard.layers import (
    LayerHeatmap,
    cell_array,
    colour_ticks,
    families_with_layers,
    family_of,
    layer_heatmap_figure,
    layer_rows,
    pin_shapes,
    rows_u_index,
    small_empty,
    u_index_figure,
)
from normwatch.dashboard.pages import run_layers, run_layers_draw, run_spikes

LINK = '<a href="javascript:alert(1)">x</a>'


def test_doctests() -> None:
    for module in (layers, run_layers, run_layers_draw, run_spikes):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 0) == (0, True), module.__name__


def test_families_with_layers_the_usual_three_first() -> None:
    names = [
        "params/norm/layers.2",
        "grad/norm/layers.10",
        "grad/norm/total",
        "optim/mu/norm/layers.0",
        "updates/norm/layers.0",
        "grad/norm/layers.2.attn.wq",  # a leaf: not what makes a family
        "params/norm/final_norm.weight",
        "train/loss",
    ]
    assert families_with_layers(names) == [
        "grad/norm",
        "updates/norm",
        "params/norm",
        "optim/mu/norm",
    ]
    assert families_with_layers(["grad/norm/total", "grad/norm/layers.0.w"]) == []


@pytest.mark.parametrize(
    ("metric", "family"),
    [
        ("updates/norm/total", "updates/norm"),
        ("grad/norm/layers.3", "grad/norm"),
        ("optim/mu/norm/total", "optim/mu/norm"),
        ("train/loss", None),
        ("grad/normal/x", None),
        ("grad/norm", None),
    ],
)
def test_family_of(metric: str, family: str | None) -> None:
    families = ["grad/norm", "updates/norm", "norm", "optim/mu/norm", "mu/norm"]
    assert family_of(metric, families) == family


def test_layer_rows_leave_out_parts_inside_other_parts() -> None:
    parts = [
        "embed",
        "layers.0",
        "layers.0.attn.wq",
        "layers.0.mlp.w1",
        "layers.1",
        "layers.1.mlp.w1",
        "layers.10",  # not inside layers.1
        "final_norm.weight",
        "lm_head",
        "lm_head.kernel",
    ]
    assert [parts[i] for i in layer_rows(parts)] == [
        "embed",
        "layers.0",
        "layers.1",
        "layers.10",
        "final_norm.weight",
        "lm_head",
    ]
    leaves_only = ["embed.embedding", "layers.0.w", "layers.1.w", "lm_head.kernel"]
    assert layer_rows(leaves_only) == [0, 1, 2, 3]
    assert layer_rows([]) == []


def test_rows_u_index_is_the_ends_over_the_median_of_the_middle() -> None:
    rng = np.random.default_rng(5)
    rows: list[list[float | None]] = rng.lognormal(0.0, 0.5, (9, 6)).tolist()
    rows[4][2] = None  # a middle layer without a value there: left out of the median
    rows[0][5] = None  # an end without a value: no U-index
    got = rows_u_index(rows)
    for column in range(5):
        middle = [r[column] for r in rows[1:-1] if r[column] is not None]
        ends = (rows[0][column] or 0.0) + (rows[-1][column] or 0.0)
        assert got[column] == pytest.approx(ends / 2 / statistics.median(middle), rel=1e-12)
    assert got[5] is None
    assert rows_u_index([[1.0], [2.0]]) == [None]  # no middle
    assert rows_u_index([[1.0], [0.0], [2.0]]) == [None]  # a zero middle
    assert rows_u_index([]) == []


def test_cell_array() -> None:
    cells = cell_array([[1000.0, 0.5, None], [-1.0, math.inf, math.nan]])
    assert cells.shape == (2, 3) and cells[0, :2].tolist() == [1000.0, 0.5]
    assert np.isnan(cells[0, 2]) and np.isnan(cells[1, 2]) and cells[1, 1] == math.inf


def test_colour_ticks_of_one_to_a_hundred_and_of_nothing() -> None:
    assert colour_ticks(0.0, 2.0) == (
        [0.0, 0.301, 0.699, 1.0, 1.301, 1.699, 2.0],
        ["1", "2", "5", "10", "20", "50", "100"],
    )
    assert colour_ticks(math.nan, 1.0) == ([], [])
    assert colour_ticks(2.0, 1.0) == ([], [])


GRID = LayerHeatmap(
    family="grad/norm",
    layers=["embed", "layers.0", "lm_head." + LINK],
    steps=[0, 10, 20],
    values=[[10.0, 20.0, None], [1.0, 1.0, 2.0], [100.0, 0.0, 50.0]],
    bucketed=True,
    x_range=(0, 29),
    pinned=10,
)


def test_layer_heatmap_figure() -> None:
    fig = layer_heatmap_figure(GRID)
    (trace,) = fig["data"]
    assert trace["type"] == "heatmap"
    assert trace["x"] == [0, 10, 20]
    assert trace["y"] == ["embed", "layers.0", "lm_head." + plot_text(LINK)]
    z, real = from_typed(trace["z"]), from_typed(trace["customdata"])
    expected = [[1.0, 1.301, None], [0.0, 0.0, 0.301], [2.0, None, 1.699]]
    assert z.shape == (3, 3) and trace["z"]["shape"] == "3, 3"
    for got, want in zip(z.ravel().tolist(), sum(expected, []), strict=True):
        assert (got != got) if want is None else got == pytest.approx(want, abs=1e-3)
    assert np.array_equal(real, [[10, 20, np.nan], [1, 1, 2], [100, 0, 50]], equal_nan=True)
    assert (trace["zmin"], trace["zmax"]) == (0.0, 2.0)
    assert trace["colorbar"]["ticktext"] == ["1", "2", "5", "10", "20", "50", "100"]
    assert "largest in its steps" in trace["hovertemplate"]
    layout = fig["layout"]
    assert layout["xaxis"]["range"] == [0, 29]
    assert layout["yaxis"]["type"] == "category"
    assert [s["x0"] for s in layout["shapes"]] == [10]
    assert layout["title"]["text"] == "grad/norm by layer and step (log colour)"
    assert 320 <= layout["height"] <= 720


def test_layer_heatmap_figure_of_one_value_and_many_layers() -> None:
    flat = LayerHeatmap("updates/norm", ["a", "b"], [5], [[3.0], [3.0]])
    trace = layer_heatmap_figure(flat)["data"][0]
    assert trace["zmin"] < trace["zmax"]  # a colourbar of some width
    assert "at that step" in trace["hovertemplate"]
    assert "range" not in layer_heatmap_figure(flat)["layout"]["xaxis"]
    assert layer_heatmap_figure(flat)["layout"]["shapes"] == []
    tall = LayerHeatmap("grad/norm", [f"l{i}" for i in range(2000)], [0], [[1.0]] * 2000)
    assert layer_heatmap_figure(tall)["layout"]["height"] == 720
    labelled = layer_heatmap_figure(tall)["layout"]["yaxis"]["tickvals"]
    assert labelled[0] == "l0" and labelled[-1] == "l1999" and len(labelled) <= 58
    none = LayerHeatmap("grad/norm", ["a"], [0], [[None]])
    assert layer_heatmap_figure(none)["data"][0]["colorbar"]["ticktext"] == ["1", "2", "5", "10"]


def test_u_index_figure() -> None:
    fig = u_index_figure([0, 10, 20], [3.0, None, math.inf], x_range=(0, 20), pinned=10)
    (trace,) = fig["data"]
    assert (trace["x"], trace["y"]) == ([0, 10, 20], [3.0, None, None])
    layout = fig["layout"]
    assert layout["title"]["text"] == "U-index (ends / middle)"
    assert layout["xaxis"]["range"] == [0, 20]
    flat, pin = layout["shapes"]
    assert (flat["y0"], flat["y1"], flat["yref"]) == (1, 1, "y")
    assert pin == pin_shapes(10)[0]
    # The same plot area as the heatmap's, so that the two x axes line up.
    assert layout["margin"]["l"] == layer_heatmap_figure(GRID)["layout"]["margin"]["l"]
    assert layout["margin"]["r"] == layer_heatmap_figure(GRID)["layout"]["margin"]["r"]


def test_pin_shapes_and_small_empty() -> None:
    assert pin_shapes(None) == []
    (line,) = pin_shapes(1208)
    assert (line["x0"], line["x1"], line["yref"]) == (1208, 1208, "paper")
    empty = small_empty("nothing " + LINK, 210)
    assert empty["layout"]["height"] == 210
    assert empty["layout"]["annotations"][0]["text"] == plot_text("nothing " + LINK)
