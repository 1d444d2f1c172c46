"""The run page's layers section: its layout, the pinned step, and the heatmap, U-index and
depth profile callbacks, called with a fake data object; then with the dashboard's real data
on Postgres (the viewer's run drawn, another project's run not), and crafted requests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.figures import empty_figure, from_typed, plot_text
from normwatch.dashboard.pages.run_layers import (
    Refreshes,
    pin_store,
    pin_text,
    pinned_of,
    refreshes_due,
    section,
    step_of_click,
    update_pin,
)
from normwatch.dashboard.pages.run_layers_draw import (
    HEATMAP_COLUMNS,
    NO_LAYERS,
    PROFILE_RADIUS,
    draw_depth,
    draw_grid,
    grid_text,
    profile_text,
)
from normwatch.dashboard.pages.run_view import MAX_STEP, RunView
from normwatch.server.auth import Principal
from normwatch.server.errors import Invalid, RunNotFound
from normwatch.server.services.layers import LayerGrid, Profile
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .callbacks import CALLBACK, callback_request
from .components import find
from .seed import Viewers, create_run, post_points, viewers

WHO = Principal(token_id=1, project_id=1, project="p", scope="read")
RUN = "r1"
LINK = '<a href="javascript:alert(1)">x</a>'
NAMES = [
    "grad/norm/embed",
    *(f"grad/norm/layers.{i}" for i in range(4)),
    "grad/norm/lm_head",
    "grad/norm/total",
    "params/norm/layers.0",
    "train/loss",
]
LAYERS = ["embed", "layers.0", "layers.1", "layers.2", "layers.3", "lm_head"]


def grid_of(
    layers: Sequence[str] = tuple(LAYERS),
    steps: Sequence[int] = (0, 100, 200),
    *,
    bucketed: bool = True,
    profile: Profile | None = None,
) -> LayerGrid:
    """A grid whose cell (i, j) is (i + 1) · (j + 1), and a U-index of 7 per column."""
    values: list[list[float | None]] = [
        [float((i + 1) * (j + 1)) for j in range(len(steps))] for i in range(len(layers))
    ]
    return LayerGrid(
        "grad/norm", list(layers), list(steps), values, [7.0] * len(steps), bucketed, profile
    )


@dataclass
class FakeLayers:
    """The section's reads, recorded; runs other than ``RUN`` are not the viewer's."""

    names: list[str] = field(default_factory=lambda: list(NAMES))
    grid: LayerGrid = field(default_factory=grid_of)
    profile: LayerGrid | None = None
    refusal: str | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def metric_names(self, who: Principal, run_id: str) -> list[str]:
        self._own(run_id)
        return self.names

    def layer_grid(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
        at: int | None = None,
    ) -> LayerGrid:
        self._own(run_id)
        self.calls.append(
            ("grid", {"prefix": prefix, "start": start, "end": end, "points": points})
        )
        if self.refusal:
            raise Invalid(self.refusal)
        return self.grid

    def layer_profile(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        at: int | None,
        radius: int,
        relative: bool = False,
        baseline_end: int | None = None,
    ) -> LayerGrid | None:
        self._own(run_id)
        asked: dict[str, Any] = {"prefix": prefix, "at": at, "radius": radius}
        if relative:
            asked |= {"relative": True, "baseline_end": baseline_end}
        self.calls.append(("profile", asked))
        if self.refusal:
            raise Invalid(self.refusal)
        return self.profile

    @staticmethod
    def _own(run_id: str) -> None:
        if run_id != RUN:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)


def profile_grid(
    values: Sequence[float | None], steps: Sequence[int | None], at: int, u: float | None
) -> LayerGrid:
    layers = LAYERS[: len(values)]
    return grid_of(layers, [at], profile=Profile(at, list(steps), list(values), u))


# --- layout and the pin -------------------------------------------------------------------


def test_section_picks_the_first_family_and_follows_the_latest_step() -> None:
    drawn = section(NAMES)
    (family,) = find(drawn, "Dropdown")
    assert family["id"] == "depth-family" and family["value"] == "grad/norm"
    assert [o["value"] for o in family["options"]] == ["grad/norm", "params/norm"]
    assert find(drawn, "Store", id="layers-pin")[0]["data"] == {"step": None}
    assert find(drawn, "Checklist", id="depth-log")[0]["value"] == ["log"]
    assert {g["id"] for g in find(drawn, "Graph")} == {"layer-heatmap", "u-index", "depth"}
    assert find(drawn, "Span", id="pin-info")[0]["children"] == pin_text(None)


@pytest.mark.parametrize(
    ("at", "pinned"),
    [("1200", 1200), ("1.2e3", 1200), ("-5", None), ("x", None), ("inf", None), (None, None)],
)
def test_section_pins_the_urls_step(at: str | None, pinned: int | None) -> None:
    drawn = section([], at)
    assert find(drawn, "Store", id="layers-pin")[0]["data"] == {"step": pinned}
    assert find(drawn, "Dropdown")[0]["options"] == []


def test_pinned_of_a_crafted_store_follows_the_latest_step() -> None:
    assert pinned_of(pin_store(1208)) == 1208
    for store in ({"step": -1}, {"step": True}, {"step": 2**70}, {"step": 1.5}, [], "1", None):
        assert pinned_of(store) is None
    assert pinned_of({"step": MAX_STEP}) == MAX_STEP


@pytest.mark.parametrize(
    ("click", "step"),
    [
        ({"points": [{"x": 1207.6, "y": "layers.3"}]}, 1208),
        ({"points": [{"x": 40, "curveNumber": 0}, {"x": 50}]}, 40),
        ({"points": [{"x": -3}]}, None),
        ({"points": [{"x": True}]}, None),
        ({"points": [{"x": math.nan}]}, None),
        ({"points": [{"x": "2024-01-01"}]}, None),
        ({"points": []}, None),
        ({"points": "x"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_step_of_click(click: object, step: int | None) -> None:
    assert step_of_click(click) == step


def test_update_pin_from_clicks_and_the_follow_latest_button() -> None:
    clicks: dict[str, object] = {
        "layer-heatmap": {"points": [{"x": 300, "y": "embed"}]},
        "u-index": {"points": [{"x": 400}]},
        "overlay": {"points": [{"x": 500}]},
    }
    assert update_pin("layer-heatmap", clicks) == {"step": 300}
    assert update_pin("u-index", clicks) == {"step": 400}
    assert update_pin("overlay", clicks) == {"step": 500}
    assert update_pin("pin-latest", clicks) == {"step": None}
    assert update_pin("overlay", {"overlay": None}) is None
    assert update_pin("depth", clicks) is None
    assert update_pin({"type": "x"}, clicks) is None
    assert update_pin(None, clicks) is None


def test_pin_text() -> None:
    assert pin_text(1208) == "profile pinned to step 1,208"
    assert pin_text(None).startswith("profile at the latest step")


@pytest.mark.parametrize(
    ("view", "pinned", "n", "due"),
    [
        (RunView(RUN), None, 5, Refreshes(True, True)),
        (RunView(RUN), None, 4, Refreshes(False, False)),
        (RunView(RUN), 120, 5, Refreshes(True, False)),
        (RunView(RUN, start=10), None, 15, Refreshes(True, True)),
        (RunView(RUN, start=10, end=90), None, 15, Refreshes(False, True)),
        (RunView(RUN, start=10, end=90), 120, 20, Refreshes(False, True)),  # the options
        (RunView(RUN, start=10, end=90), 120, 15, Refreshes(False, False)),
        (None, None, 5, Refreshes(False, False)),
        (RunView(RUN), None, None, Refreshes(False, False)),
    ],
)
def test_refreshes_due(view: RunView | None, pinned: int | None, n: object, due: Refreshes) -> None:
    assert refreshes_due(view, pinned, n) == due


# --- the heatmap and the U-index, with a fake -----------------------------------------------


def test_draw_grid_reads_the_views_steps_of_the_picked_family() -> None:
    data = FakeLayers()
    view = RunView(RUN, start=0, end=299)
    heatmap, chart, info = draw_grid(data, WHO, view, "params/norm", 100)
    assert data.calls == [
        ("grid", {"prefix": "params/norm", "start": 0, "end": 299, "points": HEATMAP_COLUMNS})
    ]
    (cells,) = heatmap["data"]
    assert cells["y"] == LAYERS and cells["x"] == [0, 100, 200]
    assert from_typed(cells["customdata"])[5].tolist() == [6.0, 12.0, 18.0]
    assert from_typed(cells["z"])[0].tolist() == pytest.approx([0.0, 0.30103, 0.47712], abs=1e-5)
    assert heatmap["layout"]["xaxis"]["range"] == [0, 299]
    assert [s["x0"] for s in heatmap["layout"]["shapes"]] == [100]
    (line,) = chart["data"]
    assert (line["x"], line["y"]) == ([0, 100, 200], [7.0, 7.0, 7.0])
    assert chart["layout"]["xaxis"]["range"] == [0, 299]
    assert [s.get("x0") for s in chart["layout"]["shapes"]] == [0, 100]  # flat line, pin
    assert (
        info == "6 layers × 3 columns, steps 0–200; each cell the largest value in its ~100 steps"
    )


def test_draw_grid_of_an_unknown_family_takes_the_first_and_of_a_whole_run_no_range() -> None:
    data = FakeLayers()
    heatmap, _, _ = draw_grid(data, WHO, RunView(RUN), {"$ne": 1}, None)
    assert data.calls[0][1] == {
        "prefix": "grad/norm",
        "start": None,
        "end": None,
        "points": HEATMAP_COLUMNS,
    }
    assert "range" not in heatmap["layout"]["xaxis"] and heatmap["layout"]["shapes"] == []


def test_draw_grid_draws_layers_not_their_leaves_and_takes_their_u_index() -> None:
    layers = ["embed", "layers.0", "layers.0.mlp.w1", "layers.1", "lm_head"]
    data = FakeLayers(grid=grid_of(layers, [0, 1]))
    heatmap, chart, info = draw_grid(data, WHO, RunView(RUN), "grad/norm", None)
    assert heatmap["data"][0]["y"] == ["embed", "layers.0", "layers.1", "lm_head"]
    # Rows 1, 2, 4, 5 of the grid: (1 + 5) / 2 over the median of 2 and 4, per column.
    assert chart["data"][0]["y"] == [pytest.approx(1.0), pytest.approx(1.0)]
    assert info.startswith("4 layers × 2 columns")


def test_draw_grid_says_what_a_cell_is_and_escapes_layer_names() -> None:
    grid = grid_of(["embed", "lm_head." + LINK, "layers.0"], [7, 8], bucketed=False)
    heatmap, _, info = draw_grid(FakeLayers(grid=grid), WHO, RunView(RUN), None, None)
    assert heatmap["data"][0]["y"][1] == "lm_head." + plot_text(LINK)
    assert info == "3 layers × 2 columns, steps 7–8; each cell the value logged at its step"


def test_draw_grid_without_layers_values_or_run() -> None:
    no_family = draw_grid(FakeLayers(names=["train/loss"]), WHO, RunView(RUN), None, None)
    for drawn in (
        no_family,
        draw_grid(FakeLayers(), WHO, RunView("theirs"), "grad/norm", None),
        draw_grid(FakeLayers(), WHO, None, "grad/norm", None),
    ):
        heatmap, chart, info = drawn
        assert [a["text"] for a in heatmap["layout"]["annotations"]] == [plot_text(NO_LAYERS)]
        assert chart["data"] == [] and info == ""
    empty = FakeLayers(grid=grid_of(steps=[]))
    heatmap, _, info = draw_grid(empty, WHO, RunView(RUN, start=5, end=9), None, None)
    assert heatmap["layout"]["annotations"][0]["text"] == "No grad/norm values in these steps."
    refused = FakeLayers(refusal="2,100 metrics sit under 'grad/norm/': name a longer prefix")
    heatmap, _, _ = draw_grid(refused, WHO, RunView(RUN), None, None)
    assert heatmap["layout"]["annotations"][0]["text"] == refused.refusal


def test_grid_text_of_an_empty_grid() -> None:
    assert grid_text(grid_of(steps=[]), 6) == ""


# --- the depth profile, with a fake ---------------------------------------------------------


def test_draw_depth_at_the_latest_step_and_at_a_pinned_one() -> None:
    values: list[float | None] = [6.0, 1.0, 1.5, 2.0, 2.5, 9.0]
    data = FakeLayers(profile=profile_grid(values, [1999] * 6, 1999, 7.5 / 1.75))
    fig, info, options, value = draw_depth(data, WHO, RunView(RUN), "grad/norm", ["log"])
    assert data.calls == [
        ("profile", {"prefix": "grad/norm", "at": None, "radius": PROFILE_RADIUS})
    ]
    (bars,) = fig["data"]
    assert bars["x"] == LAYERS and bars["y"] == values
    assert fig["layout"]["title"]["text"] == "grad/norm by depth at step 1,999"
    # 1 to 9 is within a decade: round linear ticks, not plotly's first digits (5, 2, 1).
    assert fig["layout"]["yaxis"] == {"type": "log", "dtick": "L2", "tick0": 0, "tickformat": "~g"}
    assert info == "ends / middle: 4.3×"
    assert (options, value) == (
        [
            {"label": "grad/norm", "value": "grad/norm"},
            {"label": "params/norm", "value": "params/norm"},
        ],
        "grad/norm",
    )
    data.calls.clear()
    draw_depth(data, WHO, RunView(RUN, start=0, end=10), "params/norm", [], pinned=1208)
    assert data.calls == [
        ("profile", {"prefix": "params/norm", "at": 1208, "radius": PROFILE_RADIUS})
    ]


def test_draw_depth_says_where_the_values_were_logged() -> None:
    values: list[float | None] = [6.0, None, 1.5, 2.0, 2.5, 9.0]
    steps: list[int | None] = [1200, None, 1210, 1210, 1210, 1200]
    data = FakeLayers(profile=profile_grid(values, steps, 1208, None))
    fig, info, _, _ = draw_depth(data, WHO, RunView(RUN), "grad/norm", [], pinned=1208)
    assert list(fig["data"][0]["y"]) == [6.0, None, 1.5, 2.0, 2.5, 9.0]
    assert fig["layout"]["title"]["text"] == "grad/norm by depth at step 1,208"
    assert info == "values logged at steps 1,200–1,210"


def test_draw_depth_of_layers_and_leaves_draws_the_layers() -> None:
    layers = ["embed", "layers.0", "layers.0.w", "layers.1", "lm_head"]
    profile = Profile(5, [5] * 5, [6.0, 1.0, 50.0, 3.0, 10.0], 99.0)
    data = FakeLayers(profile=grid_of(layers, [5], profile=profile))
    fig, info, _, _ = draw_depth(data, WHO, RunView(RUN), None, [])
    assert list(fig["data"][0]["x"]) == ["embed", "layers.0", "layers.1", "lm_head"]
    assert info == "ends / middle: 4.0×"  # (6 + 10) / 2 over the median of 1 and 3


def test_draw_depth_without_layers_values_or_run() -> None:
    no_layers = (empty_figure(NO_LAYERS), "", [], None)
    assert draw_depth(FakeLayers(names=[]), WHO, RunView(RUN), None, []) == no_layers
    assert draw_depth(FakeLayers(), WHO, RunView("theirs"), None, []) == no_layers
    assert draw_depth(FakeLayers(), WHO, None, None, []) == no_layers
    options = [
        {"label": "grad/norm", "value": "grad/norm"},
        {"label": "params/norm", "value": "params/norm"},
    ]
    assert draw_depth(FakeLayers(profile=None), WHO, RunView(RUN), None, []) == (
        empty_figure(NO_LAYERS),
        "",
        options,
        None,
    )
    refused = FakeLayers(refusal="too many layers")
    fig, info, got, value = draw_depth(refused, WHO, RunView(RUN), "params/norm", [])
    assert fig == empty_figure("too many layers") and (info, got, value) == (
        "",
        options,
        "params/norm",
    )


def test_profile_text() -> None:
    assert profile_text(4.29, 7, [7, 7]) == "ends / middle: 4.3×"
    assert profile_text(None, 7, [None, None]) == "no values logged near step 7"
    assert profile_text(2.0, 7, [5, None]) == "ends / middle: 2.0× · values logged at step 5"


# --- the real data ----------------------------------------------------------------------


STEPS = range(0, 3000)
REAL_VALUES = {"embed": 6.0, "layers.0": 1.0, "layers.1": 1.5, "layers.2": 2.0, "lm_head": 9.0}


@dataclass(frozen=True)
class World:
    mine: Viewers
    theirs: Viewers
    run: str
    their_run: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    """Per-layer grad norms growing 1 in 1,000 a step; layers logged every 10th step, the
    loss every step."""
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    metrics: dict[str, list[Any]] = {
        f"grad/norm/{name}": [v * (1 + s / 1000) if s % 10 == 0 else None for s in STEPS]
        for name, v in REAL_VALUES.items()
    }
    metrics["train/loss"] = [3.0] * len(STEPS)
    run = create_run(pg_server, mine, "layers-run")
    their_run = create_run(pg_server, theirs, "their-run")
    for run_id, tenant in ((run, mine), (their_run, theirs)):
        post_points(pg_server, tenant, run_id, STEPS, metrics)
    return World(
        viewers(dashboard_sessions, mine), viewers(dashboard_sessions, theirs), run, their_run
    )


def test_the_real_grid_follows_the_views_steps(world: World, dashboard_data: DashboardData) -> None:
    view = RunView(world.run, start=1000, end=1099)
    heatmap, chart, info = draw_grid(dashboard_data, world.mine.read, view, "grad/norm", 1050)
    (cells,) = heatmap["data"]
    assert cells["y"] == list(REAL_VALUES) and cells["x"] == list(range(1000, 1100, 10))
    assert from_typed(cells["customdata"])[0][0] == pytest.approx(12.0)  # 6 · (1 + 1000 / 1000)
    # (6 + 9) / 2 over the median of 1, 1.5 and 2: the same at every step.
    assert chart["data"][0]["y"] == [pytest.approx(5.0)] * 10
    assert (
        info == "5 layers × 10 columns, steps 1,000–1,090; each cell the value logged at its step"
    )
    whole = draw_grid(dashboard_data, world.mine.read, RunView(world.run), "grad/norm", None)
    assert len(whole[0]["data"][0]["x"]) == 300 and "value logged at its step" in whole[2]


def test_the_real_profile_at_the_latest_and_at_a_pinned_step(
    world: World, dashboard_data: DashboardData
) -> None:
    view = RunView(world.run)
    fig, info, options, value = draw_depth(dashboard_data, world.mine.read, view, None, [])
    assert fig["layout"]["title"]["text"] == "grad/norm by depth at step 2,999"
    assert list(fig["data"][0]["y"]) == pytest.approx([v * 3.99 for v in REAL_VALUES.values()])
    assert info == "ends / middle: 5.0× · values logged at step 2,990"
    assert (options, value) == ([{"label": "grad/norm", "value": "grad/norm"}], "grad/norm")
    fig, info, _, _ = draw_depth(dashboard_data, world.mine.read, view, None, [], pinned=1204)
    assert fig["layout"]["title"]["text"] == "grad/norm by depth at step 1,204"
    assert list(fig["data"][0]["y"]) == pytest.approx([v * 2.2 for v in REAL_VALUES.values()])
    assert info == "ends / middle: 5.0× · values logged at step 1,200"


def test_another_projects_run_draws_no_layers(world: World, dashboard_data: DashboardData) -> None:
    view = RunView(world.their_run)
    assert draw_depth(dashboard_data, world.mine.read, view, None, []) == (
        empty_figure(NO_LAYERS),
        "",
        [],
        None,
    )
    heatmap, chart, info = draw_grid(dashboard_data, world.mine.read, view, "grad/norm", None)
    assert heatmap["layout"]["annotations"][0]["text"] == plot_text(NO_LAYERS)
    for read in (
        lambda: dashboard_data.metric_names(world.mine.read, world.their_run),
        lambda: dashboard_data.layer_profile(
            world.mine.read, world.their_run, "grad/norm", at=None, radius=5
        ),
    ):
        with pytest.raises(RunNotFound):
            read()


CRAFTED_PINS = [{"step": -1}, {"step": "1"}, ["x"], None, {"step": 2**70}]


@pytest.mark.parametrize("pin", CRAFTED_PINS)
def test_crafted_pins_and_clicks_fail_nothing(pg_server: ServerProcess, pin: Any) -> None:
    tenant = make_tenant(pg_server.database_url)
    with httpx.Client(base_url=pg_server.url, timeout=30) as browser:
        assert browser.get("/login", params={"token": tenant.read}).status_code == 303
        request = callback_request(
            ["pin-info.children", "layer-heatmap.figure", "u-index.figure"],
            {"layers-pin.data": pin},
            {"heatmap-info.children": "83 layers"},
            ["layers-pin.data"],
        )
        (request["output"],) = [  # the charts' figures again (allow_duplicate): `...@<hash>`
            d["output"]
            for d in browser.get("/_dash-dependencies").json()
            if "pin-info.children" in d["output"]
        ]
        info = browser.post(CALLBACK, json=request)
        assert info.status_code == 200, info.text
        answer = info.json()["response"]
        assert answer["pin-info"] == {"children": pin_text(None)}
        # No pin: the line goes, the U-index keeps its line at 1.
        assert answer["layer-heatmap"]["figure"]["operations"][0]["params"]["value"] == []
        (flat,) = answer["u-index"]["figure"]["operations"][0]["params"]["value"]
        assert flat["name"] == "flat"
        clicks = {
            "layer-heatmap.clickData": {"points": [{"x": pin}]},
            "u-index.clickData": None,
            "overlay.clickData": None,
            "pin-latest.n_clicks": 0,
        }
        clicked = browser.post(
            CALLBACK,
            json=callback_request(["layers-pin.data"], clicks, {}, ["layer-heatmap.clickData"]),
        )
        assert clicked.status_code == 204  # no step in the click: nothing changes
