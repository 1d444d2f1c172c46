"""The run page's layout and callbacks, called directly with the dashboard's real data on
Postgres: the viewer's own run is drawn, another project's run looks like no run at all."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import dash
import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.figures import empty_figure
from normwatch.dashboard.pages.run import (
    RUN_NOT_FOUND,
    draw,
    layout,
    not_found_drawn,
    update_view,
)
from normwatch.dashboard.pages.run_config import NO_CONFIG
from normwatch.dashboard.pages.run_header import restarts_text
from normwatch.dashboard.pages.run_layers_draw import NO_LAYERS, draw_depth
from normwatch.dashboard.pages.run_live import PUSHED_MS, TICK_MS
from normwatch.dashboard.pages.run_overlay import NO_METRICS
from normwatch.dashboard.pages.run_tick import refresh_options, tick
from normwatch.dashboard.pages.run_view import RunView
from normwatch.dashboard.routing import query_of
from normwatch.server.errors import RunNotFound
from normwatch.server.schemas import RunOut, SegmentOut
from normwatch.testing import ServerProcess
from tests.dashboard.callbacks import CALLBACK, callback_request
from tests.helpers.tenants import make_tenant

from .components import find, nodes, rows, text
from .seed import (
    Viewers,
    create_rule,
    create_run,
    post_event,
    post_points,
    threshold_rule,
    viewers,
)

STEPS = range(2000)
METRICS: dict[str, list[float]] = {
    "grad/norm/total": [6.0 if s == 1500 else 1.0 for s in STEPS],
    "params/norm/final_norm.weight": [78.0 + 0.5 * s for s in STEPS],
    "train/loss": [10.0 - 0.001 * s for s in STEPS],
    "grad/norm/embed": [6.0] * len(STEPS),
    **{f"grad/norm/layers.{i}": [1.0 + 0.5 * i] * len(STEPS) for i in range(4)},
    "grad/norm/lm_head": [9.0] * len(STEPS),
}
NAMES = sorted(METRICS)
CONFIG = {"optimizer": {"name": "adamw", "lr": 3e-4}}
LEFT, RIGHT = "grad/norm/total", "params/norm/final_norm.weight"
TICK_OUTPUTS = [
    "left-metric.options",
    "right-metric.options",
    "run-last-step.children",
    "left-metric.value",
    "right-metric.value",
    "draw-tick.data",
    "ticks-seen.data",
    "aids-tick.data",
    "transitions-tick.data",
    "attribution-tick.data",
    "layers-grid-tick.data",
    "layers-profile-tick.data",
    "spikes-tick.data",
    "tick.interval",
    "x-axis.options",
    "run-state.children",
    "run-config.children",
    "run-note.children",
]
ZOOM = {"type": "event-zoom", "step": 1000}


@dataclass(frozen=True)
class World:
    mine: Viewers
    theirs: Viewers
    run: str
    empty_run: str
    their_run: str
    read_token: str = ""
    """My tenant's read token, for requests through the real server."""


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    create_rule(pg_server, mine, threshold_rule("grad-high", 5.0))
    run = create_run(pg_server, mine, "overlay-run", config=CONFIG)
    post_points(pg_server, mine, run, STEPS, METRICS)
    post_event(pg_server, mine, run, 1000, "lr warmup ends", "config")
    empty_run = create_run(pg_server, mine, "empty-run")
    their_run = create_run(pg_server, theirs, "their-run")
    post_points(pg_server, theirs, their_run, STEPS, METRICS)
    post_event(pg_server, theirs, their_run, 1000, "their event", "config")
    return World(
        viewers(dashboard_sessions, mine),
        viewers(dashboard_sessions, theirs),
        run,
        empty_run,
        their_run,
        mine.read,
    )


def full_view(world: World, **changes: Any) -> RunView:
    return replace(RunView(world.run, LEFT, RIGHT), **changes)


def store_of(page: Any) -> Any:
    (store,) = find(page, "Store", id="view")
    return store["data"]


# --- layout -------------------------------------------------------------------------------


def test_layout_shows_the_run_in_its_default_view(
    world: World, dashboard_data: DashboardData
) -> None:
    page = layout(dashboard_data, world.mine.read, {}, world.run)
    assert store_of(page) == RunView(world.run, LEFT, RIGHT).to_store()
    assert [h["children"] for h in find(page, "H1")] == ["overlay-run"]
    assert find(page, "Span", className="muted")[0]["children"] == "segment 1"
    (link,) = find(page, "Link", id="run-alerts-link")
    assert link["href"] == f"/alerts?run={world.run}"
    left, right, norm, extra, family, shared = find(page, "Dropdown")
    options = [{"label": n, "value": n} for n in NAMES]
    assert (norm["id"], norm["value"]) == ("normalize", None)
    assert find(page, "Slider", id="smoothing")[0]["value"] == 0.0
    assert find(page, "RadioItems", id="x-axis")[0]["value"] == "step"
    assert (left["id"], left["value"], left["options"]) == ("left-metric", LEFT, options)
    assert (right["id"], right["value"], right["options"]) == ("right-metric", RIGHT, options)
    assert (extra["id"], extra["value"], extra["options"]) == ("add-series", [], options)
    assert (family["id"], family["value"]) == ("depth-family", "grad/norm")
    assert (shared["id"], shared["value"]) == ("attribution-family", "grad/norm")
    assert find(page, "Checklist", id="log-scale")[0]["value"] == []
    assert find(page, "Checklist", id="chart-options")[0]["value"] == []
    assert find(page, "Interval", id="tick")[0]["interval"] == 1000


def test_layout_takes_the_view_from_the_url(world: World, dashboard_data: DashboardData) -> None:
    query = {"left": "train/loss", "right": "", "start": "100", "end": "300", "log": "1"}
    page = layout(dashboard_data, world.mine.read, query, world.run)
    assert store_of(page) == RunView(world.run, "train/loss", "", 100, 300, True).to_store()
    assert find(page, "Checklist", id="log-scale")[0]["value"] == ["log"]


def test_layout_takes_the_series_axes_forecast_and_focus_from_the_url(
    world: World, dashboard_data: DashboardData
) -> None:
    share = "share(grad/norm/lm_head, grad/norm/total)"
    query = query_of(
        "?series=train/loss&series=" + share.replace(",", "%2C") + "&series=share(a)"
        "&axes=one&forecast=1&focus=1000&start=800&end=1200"
    )
    page = layout(dashboard_data, world.mine.read, query, world.run)
    expected = full_view(
        world,
        start=800,
        end=1200,
        extra=("train/loss", share),
        one_axis=True,
        forecast=True,
        focus=1000,
    )
    assert store_of(page) == expected.to_store()
    assert find(page, "Checklist", id="chart-options")[0]["value"] == ["one-axis", "forecast"]
    (extra,) = find(page, "Dropdown", id="add-series")
    assert extra["value"] == ["train/loss", share]
    assert extra["options"][-1] == {"label": share, "value": share}
    (left,) = find(page, "Dropdown", id="left-metric")
    assert left["options"][-1] == {"label": share, "value": share}


def test_layout_shows_the_config_and_the_attribution_families(
    world: World, dashboard_data: DashboardData
) -> None:
    page = layout(dashboard_data, world.mine.read, {}, world.run)
    (details,) = [n for n in nodes(page) if n["props"].get("id") == "run-config"]
    assert text(details).startswith("Config (2 keys)")
    assert rows(details) == [["optimizer.lr", "0.0003"], ["optimizer.name", "adamw"]]
    (family,) = find(page, "Dropdown", id="attribution-family")
    assert family["options"] == [{"label": "grad/norm", "value": "grad/norm"}]
    empty = layout(dashboard_data, world.mine.read, {}, world.empty_run)
    (bare,) = [n for n in nodes(empty) if n["props"].get("id") == "run-config"]
    assert text(bare) == "Config (0 keys)" + NO_CONFIG


def test_layout_of_a_run_without_metrics(world: World, dashboard_data: DashboardData) -> None:
    page = layout(dashboard_data, world.mine.admin, {}, world.empty_run)
    assert store_of(page) == RunView(world.empty_run).to_store()
    assert find(page, "Dropdown", id="depth-family")[0]["options"] == []


def test_layout_of_another_projects_run_is_not_found(
    world: World, dashboard_data: DashboardData
) -> None:
    with pytest.raises(RunNotFound):
        layout(dashboard_data, world.mine.read, {}, world.their_run)
    with pytest.raises(RunNotFound):
        layout(dashboard_data, world.mine.admin, {}, "f" * 32)


def test_restarts_text() -> None:
    def run_with(*starts: int | None) -> RunOut:
        now = "2025-01-01T00:00:00Z"
        segments = [
            SegmentOut(segment=i + 1, start_step=s, created_at=now) for i, s in enumerate(starts)
        ]
        return RunOut.model_validate(
            {
                "id": "r",
                "project": "p",
                "name": "n",
                "status": "running",
                "segment": len(starts),
                "config": {},
                "tags": [],
                "last_step": None,
                "last_seen": now,
                "created_at": now,
                "segments": segments,
            }
        )

    assert restarts_text(run_with(0)) == "segment 1"
    assert restarts_text(run_with(0, 1200, 77_096)) == "segment 3 · restarted at 1,200, 77,096"


# --- update_view --------------------------------------------------------------------------


def changed(
    world: World, dashboard_data: DashboardData, view: RunView | None, **inputs: Any
) -> Any:
    values: dict[str, Any] = {
        "left": LEFT,
        "right": RIGHT,
        "log": [],
        "relayout": None,
        "zooms": [0],
        "trigger": None,
    }
    return update_view(dashboard_data, world.mine.read, view, **{**values, **inputs})


def test_update_view_zooms_on_an_event_of_the_viewers_run(
    world: World, dashboard_data: DashboardData
) -> None:
    new = changed(world, dashboard_data, full_view(world), zooms=[1], trigger=ZOOM)
    assert new == full_view(world, start=800, end=1200, focus=1000)
    assert new.to_store() == {
        "run": world.run,
        "left": LEFT,
        "right": RIGHT,
        "start": 800,
        "end": 1200,
        "log": False,
        "extra": [],
        "one_axis": False,
        "forecast": False,
        "focus": 1000,
        "smooth": 0.0,
        "x": "step",
        "norm": None,
        "robust": False,
    }


def test_update_view_ignores_an_event_of_another_projects_run(
    world: World, dashboard_data: DashboardData
) -> None:
    theirs = RunView(world.their_run, LEFT, RIGHT)
    assert changed(world, dashboard_data, theirs, zooms=[1], trigger=ZOOM) is None
    unknown = RunView("f" * 32, LEFT, RIGHT)
    assert changed(world, dashboard_data, unknown, zooms=[1], trigger=ZOOM) is None


@pytest.mark.parametrize(
    "inputs",
    [
        {"zooms": [0], "trigger": ZOOM},  # the list redrawn, nothing clicked
        {"zooms": [1], "trigger": {"type": "event-zoom", "step": "1000"}},
        {"zooms": [1], "trigger": {"type": "event-zoom", "step": -1}},
        {"zooms": "1", "trigger": ZOOM},
        {"trigger": "left-metric"},  # nothing changed
        {"trigger": "overlay", "relayout": {"yaxis.range[0]": 0, "yaxis.range[1]": 2}},
    ],
)
def test_update_view_changes_nothing(
    world: World, dashboard_data: DashboardData, inputs: dict[str, Any]
) -> None:
    assert changed(world, dashboard_data, full_view(world), **inputs) is None


def test_update_view_of_a_store_without_a_view_changes_nothing(
    world: World, dashboard_data: DashboardData
) -> None:
    assert changed(world, dashboard_data, None, zooms=[1], trigger=ZOOM) is None


def test_update_view_follows_pickers_chart_and_full_range_button(
    world: World, dashboard_data: DashboardData
) -> None:
    view = full_view(world, start=10, end=20)
    picked = changed(world, dashboard_data, view, left="train/loss", right=None, log=["log"])
    assert picked == replace(view, left="train/loss", right=None, log=True)
    relayout = {"xaxis.range[0]": 900.2, "xaxis.range[1]": 1099.5}
    zoomed = changed(world, dashboard_data, view, trigger="overlay-zoom", relayout=relayout)
    assert zoomed == replace(view, start=900, end=1100)
    reset = changed(world, dashboard_data, view, trigger="reset-range")
    assert reset == replace(view, start=None, end=None)
    crafted = changed(world, dashboard_data, view, left={"x": 1}, right=5)
    assert crafted == replace(view, left=None, right=None)
    long = changed(world, dashboard_data, view, left="x" * 513)
    assert long == replace(view, left=None)


def test_update_view_follows_the_series_picker_and_the_chart_toggles(
    world: World, dashboard_data: DashboardData
) -> None:
    view = full_view(world)
    share = "share(grad/norm/lm_head, grad/norm/total)"
    picked = changed(
        world,
        dashboard_data,
        view,
        extra=["train/loss", share, "train/loss", LEFT, "share(a)", 5],
        options=["one-axis", "forecast"],
        trigger="add-series",
    )
    assert picked == replace(view, extra=("train/loss", share), one_axis=True, forecast=True)
    cleared = changed(world, dashboard_data, picked, extra=None, options=None)
    assert cleared == view


def test_update_view_keeps_a_focus_only_while_the_range_shows_it(
    world: World, dashboard_data: DashboardData
) -> None:
    focused = full_view(world, start=800, end=1200, focus=1000)
    inside = {"xaxis.range[0]": 900, "xaxis.range[1]": 1100}
    moved = changed(world, dashboard_data, focused, trigger="overlay-zoom", relayout=inside)
    assert moved == replace(focused, start=900, end=1100)
    away = {"xaxis.range[0]": 1500, "xaxis.range[1]": 1700}
    panned = changed(world, dashboard_data, focused, trigger="overlay-zoom", relayout=away)
    assert panned == full_view(world, start=1500, end=1700)
    reset = changed(world, dashboard_data, focused, trigger="reset-range")
    assert reset == full_view(world)


# --- draw ---------------------------------------------------------------------------------

SHAPE = [
    f"{LEFT}|y",
    f"{RIGHT}|y2",
    "alert firing|y3",
    "alert resolved|y3",
    "event@1000",
    "alert:firing@1500",
    "alert:resolved@1501",
]


def shape_of(world: World) -> list[str]:
    """`SHAPE` with the layout the default view of the world's run draws."""
    return [*SHAPE, f"layout:{world.run}|{LEFT}|{RIGHT}|False|step"]


def test_draw_reads_the_viewers_run(world: World, dashboard_data: DashboardData) -> None:
    fig, shape, info, events = draw(
        dashboard_data, world.mine.read, full_view(world), None, trigger=None
    )
    left, right, firing, resolved = fig["data"]
    assert (left["name"], left["x"][:2], left["y"][1499:1502]) == (LEFT, [0, 1], [1.0, 6.0, 1.0])
    assert (right["name"], right["y"][-1]) == (RIGHT, 78.0 + 0.5 * 1999)
    assert (firing["x"], resolved["x"]) == ([1500], [1501])
    assert firing["text"] == ["grad-high · grad/norm/total = 6 · 6 &gt; 5 for 1 step"]
    assert resolved["text"] == ["grad-high · grad/norm/total = 1 · 1 no longer &gt; 5"]
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [1000]
    assert fig["layout"]["annotations"][0]["text"] == "lr warmup ends (1,000)"
    assert shape == shape_of(world)
    assert info == f"{LEFT}: 2,000 points, steps 0–1,999 · {RIGHT}: 2,000 points, steps 0–1,999"
    assert text(events) == "zoom step 1,000 · config · lr warmup ends"


def test_draw_reads_the_views_range(world: World, dashboard_data: DashboardData) -> None:
    view = full_view(world, right=None, start=900, end=1100, log=True)
    fig, _, info, _ = draw(dashboard_data, world.mine.read, view, None, trigger="view")
    assert fig["data"][0]["x"] == list(range(900, 1101))
    assert fig["layout"]["xaxis"]["range"] == [900, 1100]
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert info == f"{LEFT}: 201 points, steps 900–1,100"


def test_draw_on_a_tick_patches_the_data_of_an_unchanged_chart(
    world: World, dashboard_data: DashboardData
) -> None:
    view = full_view(world)
    patch, shape, info, events = draw(
        dashboard_data, world.mine.read, view, shape_of(world), trigger="tick"
    )
    assert isinstance(patch, dash.Patch)
    operations = patch.to_plotly_json()["operations"]
    assert [op["location"] for op in operations] == [
        *(["data", i, axis] for i in range(4) for axis in ("x", "y")),
        ["layout", "xaxis", "range"],
        ["layout", "shapes"],
        ["layout", "annotations"],
    ]
    assert operations[2]["params"]["value"] == list(range(2000))  # the right line's steps
    assert (shape, events) == (dash.no_update, dash.no_update)
    assert info.startswith(f"{LEFT}: 2,000 points")
    # A tick after the shape changed (here: a chart drawn before the alert) redraws it all.
    fig, new_shape, _, _ = draw(dashboard_data, world.mine.read, view, SHAPE[:2], trigger="tick")
    assert isinstance(fig, dict) and new_shape == shape_of(world)
    # So does a tick after the view changed the x axis, its own redraw superseded.
    by_time = replace(view, x="time")
    fig, _, _, _ = draw(dashboard_data, world.mine.read, by_time, shape_of(world), trigger="tick")
    assert isinstance(fig, dict)


def test_draw_of_a_run_without_metrics(world: World, dashboard_data: DashboardData) -> None:
    fig, shape, info, _ = draw(
        dashboard_data, world.mine.read, RunView(world.empty_run), None, trigger=None
    )
    assert fig == empty_figure(NO_METRICS)
    assert (shape, info) == ([], "")


def test_draw_of_another_projects_run_is_the_not_found_chart(
    world: World, dashboard_data: DashboardData
) -> None:
    expected = (empty_figure(RUN_NOT_FOUND), [], "", [])
    assert not_found_drawn() == expected
    for view in (RunView(world.their_run, LEFT, RIGHT), RunView("f" * 32, LEFT), None):
        assert draw(dashboard_data, world.mine.admin, view, None, trigger=None) == expected


# --- refresh_options ----------------------------------------------------------------------


def test_refresh_options_every_fifth_tick(world: World, dashboard_data: DashboardData) -> None:
    options = [{"label": n, "value": n} for n in NAMES]
    view = full_view(world)
    fifth = refresh_options(dashboard_data, world.mine.read, view, 5)
    assert fifth == (options, options, "last step 1,999", dash.no_update, dash.no_update)
    other = refresh_options(dashboard_data, world.mine.read, view, 7)
    assert other == (*[dash.no_update] * 2, "last step 1,999", *[dash.no_update] * 2)
    empty = refresh_options(dashboard_data, world.mine.read, RunView(world.empty_run), 10)
    assert empty == ([], [], "", dash.no_update, dash.no_update)


def test_refresh_options_of_another_projects_run_is_empty(
    world: World, dashboard_data: DashboardData
) -> None:
    for view in (RunView(world.their_run), None):
        got = refresh_options(dashboard_data, world.mine.read, view, 5)
        assert got == ([], [], "", dash.no_update, dash.no_update)


# --- draw_depth ---------------------------------------------------------------------------


def test_draw_depth_orders_the_layers(world: World, dashboard_data: DashboardData) -> None:
    for family in ("grad/norm", "params/norm", None):  # no such family: the first one
        fig, info, options, value = draw_depth(
            dashboard_data, world.mine.read, full_view(world), family, []
        )
        (bar,) = fig["data"]
        assert bar["x"] == ["embed", "layers.0", "layers.1", "layers.2", "layers.3", "lm_head"]
        assert bar["y"] == [6.0, 1.0, 1.5, 2.0, 2.5, 9.0]
        assert fig["layout"]["title"]["text"] == "grad/norm by depth at step 1,999"
        assert fig["layout"]["yaxis"]["type"] == "linear"
        # (6 + 9) / 2 over the median of the middle layers (1.5, 2.0, 2.5, 1.0 → 1.75).
        assert info == "ends / middle: 4.3×"
        assert (options, value) == ([{"label": "grad/norm", "value": "grad/norm"}], "grad/norm")
    log_fig, *_ = draw_depth(
        dashboard_data, world.mine.read, full_view(world), "grad/norm", ["log"]
    )
    assert log_fig["layout"]["yaxis"]["type"] == "log"


def test_draw_depth_without_layers(world: World, dashboard_data: DashboardData) -> None:
    no_layers = (empty_figure(NO_LAYERS), "", [], None)
    empty = RunView(world.empty_run)
    assert draw_depth(dashboard_data, world.mine.read, empty, "grad/norm", []) == no_layers
    for view in (RunView(world.their_run), None):
        assert draw_depth(dashboard_data, world.mine.read, view, "grad/norm", []) == no_layers


# --- crafted stores, through the real server ------------------------------------------------

DRAW_OUTPUTS = [
    "overlay.figure",
    "overlay-shape.data",
    "range-info.children",
    "event-list.children",
]
CRAFTED = [
    ["not", "a", "view"],
    {"run": "../alerts"},
    {"run": "0" * 32, "start": 5, "end": 1},
    {"run": "0" * 32, "start": 2**70},
    {"run": "0" * 32, "left": {"$ne": 1}},
    {"left": "grad/norm/total"},
]


@pytest.mark.parametrize("store", CRAFTED)
def test_crafted_stores_draw_nothing_and_fail_nothing(pg_server: ServerProcess, store: Any) -> None:
    tenant = make_tenant(pg_server.database_url)
    with httpx.Client(base_url=pg_server.url, timeout=30) as browser:
        assert browser.get("/login", params={"token": tenant.read}).status_code == 303
        drawn = browser.post(
            CALLBACK,
            json=callback_request(
                DRAW_OUTPUTS,
                {"view.data": store, "draw-tick.data": 3, "overlay-aids.data": None},
                {"overlay-shape.data": None},
                ["view.data"],
            ),
        )
        assert drawn.status_code == 200, drawn.text
        answer = drawn.json()["response"]
        annotations = answer["overlay"]["figure"]["layout"]["annotations"]
        assert [a["text"] for a in annotations] == [RUN_NOT_FOUND]
        assert (answer["range-info"]["children"], answer["event-list"]["children"]) == ("", [])

        controls = {
            "left-metric.value": LEFT,
            "right-metric.value": RIGHT,
            "log-scale.value": ["log"],
            "overlay-zoom.data": None,
            "reset-range.n_clicks": 1,
            "event-click.data": store,
        }
        request = callback_request(["view.data"], controls, {"view.data": store}, [])
        request["inputs"] += [
            {"id": "add-series", "property": "value", "value": ["train/loss"]},
            {"id": "chart-options", "property": "value", "value": ["forecast"]},
            {"id": "smoothing", "property": "value", "value": 0.5},
            {"id": "x-axis", "property": "value", "value": "step"},
            {"id": "normalize", "property": "value", "value": None},
        ]
        request["changedPropIds"] = ["reset-range.n_clicks"]
        assert browser.post(CALLBACK, json=request).status_code == 204

        options = browser.post(
            CALLBACK,
            json=callback_request(
                TICK_OUTPUTS,
                {"tick.n_intervals": 5, "live-poke.data": None},
                {"view.data": store, "layers-pin.data": None, "ticks-seen.data": None},
                ["tick.n_intervals"],
            ),
        )
        assert options.status_code == 200, options.text
        assert options.json()["response"] == {
            "left-metric": {"options": []},
            "right-metric": {"options": []},
            "run-last-step": {"children": ""},
        }


# --- the chart aids and the sections below the chart, through the real server --------------

AID_STORES = [
    *CRAFTED,
    {"run": "0" * 32, "left": LEFT, "start": 1, "end": 9, "focus": 5},
    {"run": "0" * 32, "extra": ["share(a)"], "forecast": True},
]


@pytest.mark.parametrize("store", AID_STORES)
def test_crafted_stores_read_no_aids_and_fail_nothing(pg_server: ServerProcess, store: Any) -> None:
    tenant = make_tenant(pg_server.database_url)
    with httpx.Client(base_url=pg_server.url, timeout=30) as browser:
        assert browser.get("/login", params={"token": tenant.read}).status_code == 303

        def post(outputs: list[str], inputs: dict[str, Any], state: dict[str, Any]) -> Any:
            answer = browser.post(
                CALLBACK, json=callback_request(outputs, inputs, state, [next(iter(inputs))])
            )
            assert answer.status_code in (200, 204), answer.text
            return answer.json()["response"] if answer.status_code == 200 else None

        aids = post(
            ["overlay-aids.data"],
            {"aids-key.data": store, "aids-tick.data": None},
            {"view.data": store, "overlay-aids.data": {"run": "x"}},
        )
        assert aids == {"overlay-aids": {"data": None}}
        table = post(
            ["transition-table.children"],
            {"view-drawn.data": store, "transitions-tick.data": None},
            {},
        )
        assert table["transition-table"]["children"]["props"]["children"] == ""
        shares = post(
            ["attribution-chart.figure", "attribution-info.children"],
            {
                "view-drawn.data": store,
                "attribution-family.value": "grad/norm",
                "attribution-by.value": ["part"],
                "attribution-tick.data": None,
            },
            {},
        )
        assert shares["attribution-info"]["children"] == ""
        ticks = post(
            TICK_OUTPUTS,
            {"tick.n_intervals": 20, "live-poke.data": None},
            {"view.data": store, "layers-pin.data": None, "ticks-seen.data": None},
        )
        # A store that holds no view, or a view of no run of the viewer's, asks for nothing.
        assert ticks == {
            "left-metric": {"options": []},
            "right-metric": {"options": []},
            "run-last-step": {"children": ""},
        }
        click = {"row": {"type": "transition-row", "step": 5}, "clicks": 1}
        request = callback_request(
            ["view.data"], {"transition-click.data": click}, {"view.data": store}, []
        )
        (zoom,) = [
            d["output"]
            for d in browser.get("/_dash-dependencies").json()
            if d["inputs"][0]["id"] == "transition-click"
        ]
        request["output"] = zoom  # the view again (allow_duplicate): `view.data@<hash>`
        request["changedPropIds"] = ["transition-click.data"]
        assert browser.post(CALLBACK, json=request).status_code == 204
        request["inputs"][0]["value"] = store  # a crafted click
        assert browser.post(CALLBACK, json=request).status_code == 204
        add = callback_request(
            ["add-series.value", "add-series.options", "expression-info.children"],
            {"add-expression.n_clicks": 1, "expression.n_submit": None},
            {
                "expression.value": "share(a)",
                "expression-axis.value": store,
                "add-series.value": store,
                "add-series.options": store,
                "right-metric.options": store,
                "view.data": store,
            },
            ["add-expression.n_clicks"],
        )
        (spec,) = [
            d
            for d in browser.get("/_dash-dependencies").json()
            if "add-series.value" in d["output"]
        ]
        add["output"] = spec["output"]  # with the right picker's outputs, `@<hash>` each
        add["outputs"] = [
            {"id": key.rpartition(".")[0], "property": key.rpartition(".")[2]}
            for key in spec["output"].strip(".").split("...")
        ]
        added = browser.post(CALLBACK, json=add)
        assert added.status_code == 200 and "share takes 2 arguments" in added.text


def test_draw_draws_the_extra_series_and_the_aids(
    world: World, dashboard_data: DashboardData
) -> None:
    view = full_view(world, extra=("train/loss", "ratio(grad/norm/lm_head, grad/norm/total)"))
    aids = {
        "run": world.run,
        "thresholds": [{"rule": "grad-high", "metric": LEFT, "value": 5.0, "kind": "threshold"}],
        "fit": None,
    }
    fig, shape, info, _ = draw(
        dashboard_data, world.mine.read, replace(view, forecast=True), None, trigger=None, aids=aids
    )
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["train/loss"]["yaxis"] == "y"
    assert by_name["ratio(grad/norm/lm_head, grad/norm/total)"]["y"][0] == 9.0
    assert by_name["threshold grad-high (5.0)"]["y"] == [5.0, 5.0]
    assert f"forecast: {LEFT}|y" in shape
    assert info.endswith("ratio(grad/norm/lm_head, grad/norm/total): 2,000 points, steps 0–1,999")
    # On a tick with the same shape, the aids are patched like the lines.
    patch, same, _, _ = draw(
        dashboard_data,
        world.mine.read,
        replace(view, forecast=True),
        shape,
        trigger="tick",
        aids=aids,
    )
    assert isinstance(patch, dash.Patch) and same is dash.no_update


def test_draw_of_a_malformed_extra_series_says_why(
    world: World, dashboard_data: DashboardData
) -> None:
    view = full_view(world, extra=("share(a)",))
    fig, shape, info, events = draw(dashboard_data, world.mine.read, view, None, trigger=None)
    (note,) = fig["layout"]["annotations"]
    assert note["text"] == (
        "Cannot draw these series: share takes 2 arguments, got 1 in 'share(a)'"
    )
    assert (shape, info) == ([], "")
    assert text(events) == "zoom step 1,000 · config · lr warmup ends"


def test_draw_leaves_out_and_names_what_the_run_never_logged(
    world: World, dashboard_data: DashboardData
) -> None:
    """A deep link or a picker naming what the run never logged: the other series are
    drawn, and the range text names what was left out with the closest names the run has;
    with nothing left, the chart says it."""
    view = full_view(world, right=None, extra=("train/los", "ratio(train/loss, grad/nrom/*)"))
    fig, _, info, _ = draw(dashboard_data, world.mine.read, view, None, trigger=None)
    assert [t["name"] for t in fig["data"] if t["name"] in view.metrics] == [LEFT]
    warning, _, drawn = info
    assert warning.className == "error"
    assert warning.children == (
        "Not drawn: no metric 'train/los' in this run (closest: 'train/loss'); "
        "'grad/nrom/*' matches no metric of this run (closest: 'grad/norm/*', "
        "'grad/norm/embed', 'grad/norm/total')."
    )
    assert drawn == f"{LEFT}: 2,000 points, steps 0–1,999"
    alone = RunView(world.run, "grad/norm/totl", None)
    fig, shape, info, _ = draw(dashboard_data, world.mine.read, alone, None, trigger=None)
    (note,) = fig["layout"]["annotations"]
    assert note["text"] == (
        "Cannot draw these series: no metric 'grad/norm/totl' in this run "
        "(closest: 'grad/norm/total')"
    )
    assert (shape, info) == ([], "")


def test_a_name_never_logged_over_http_draws_the_rest_and_the_download_names_it(
    world: World, pg_server: ServerProcess
) -> None:
    """Through the real server: the draw callback's answer carries the left-out names
    beside the chart, and the page's CSV download of them is a 404 saying the same."""
    view = full_view(world, right=None, extra=("grad/norm/totl",))
    with httpx.Client(base_url=pg_server.url, timeout=30) as browser:
        assert browser.get("/login", params={"token": world.read_token}).status_code == 303
        drawn = browser.post(
            CALLBACK,
            json=callback_request(
                DRAW_OUTPUTS,
                {"view.data": view.to_store(), "draw-tick.data": 1, "overlay-aids.data": None},
                {"overlay-shape.data": None},
                ["view.data"],
            ),
        )
        assert drawn.status_code == 200, drawn.text
        answer = drawn.json()["response"]
        assert [t["name"] for t in answer["overlay"]["figure"]["data"]][:1] == [LEFT]
        warning, _, drawn_text = answer["range-info"]["children"]
        assert warning["props"] == {
            "children": "Not drawn: no metric 'grad/norm/totl' in this run "
            "(closest: 'grad/norm/total').",
            "className": "error",
        }
        assert drawn_text == f"{LEFT}: 2,000 points, steps 0–1,999"
        download = browser.get(
            f"/runs/{world.run}/export.csv", params={"metric": [LEFT, "grad/norm/totl"]}
        )
        assert download.status_code == 404
        assert (
            download.text == "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total')"
        )


def test_refresh_options_keep_the_views_expressions(
    world: World, dashboard_data: DashboardData
) -> None:
    share = "share(grad/norm/lm_head, grad/norm/total)"
    view = full_view(world, right=share)
    left, right, *_ = refresh_options(dashboard_data, world.mine.read, view, 5)
    assert left == right == [{"label": n, "value": n} for n in (*NAMES, share)]


def test_a_view_waiting_for_metrics_takes_the_defaults_once_they_come(
    world: World, dashboard_data: DashboardData
) -> None:
    """A page opened before the run's first metric: its view charts nothing. On the first
    tick that finds metrics (any tick, not every fifth) the pickers get the defaults."""
    waiting = RunView(world.run)
    options = [{"label": n, "value": n} for n in NAMES]
    for n in (1, 2, 5):
        got = refresh_options(dashboard_data, world.mine.read, waiting, n)
        assert got == (options, options, "last step 1,999", LEFT, RIGHT)
    charted = RunView(world.run, LEFT)  # what the user chose stays
    got = refresh_options(dashboard_data, world.mine.read, charted, 7)
    assert got[3:] == (dash.no_update, dash.no_update)


def test_a_tick_redraws_and_refreshes_what_the_run_changed(
    pg_server: ServerProcess,
    world: World,
    dashboard_data: DashboardData,
    dashboard_sessions: sessionmaker[Session],
) -> None:
    """One tick callback for the page: the chart is redrawn when the run logged something,
    when the live channel says it changed, and every third beat regardless; the sections
    that read points, only when due and when the run changed since they last read it; each
    beat (second) counted once whatever the interval, which stretches while the channel is
    open."""
    tenant = make_tenant(pg_server.database_url)
    who = viewers(dashboard_sessions, tenant).read
    run = create_run(pg_server, tenant, "ticking")
    post_points(pg_server, tenant, run, [0, 1], {LEFT: [1.0, 2.0]})
    view = RunView(run, LEFT)  # the latest steps: every section follows them
    skip = dash.no_update

    def ticked(n: int, seen: Any, poke: Any = None) -> tuple[Any, dict[str, Any], set[str], Any]:
        out = tick(dashboard_data, who, view, n, None, seen, poke)
        assert len(out) == len(TICK_OUTPUTS)
        named = dict(zip(TICK_OUTPUTS[7:13], out[7:13], strict=True))
        return out[5], out[6], {k for k, v in named.items() if v is not skip}, out[13]

    draw_tick, seen, sections, interval = ticked(20, None)  # beats 1-20: every section due
    assert draw_tick != skip and interval is skip  # no channel: the interval stays 1 s
    assert sections == {
        "aids-tick.data",
        "transitions-tick.data",
        "attribution-tick.data",
        "layers-grid-tick.data",
        "layers-profile-tick.data",
        "spikes-tick.data",
    }
    # Nothing logged since: a redraw only when a third beat passed (21, 24), and at beat 30
    # only the rules' lines, which read no points; a section due (layers at 25) but with
    # nothing new to read is not set off.
    draw_tick, seen, sections, _ = ticked(22, seen)
    assert draw_tick != skip and sections == set()
    draw_tick, seen, sections, _ = ticked(23, seen)
    assert (draw_tick, sections) == (skip, set())
    draw_tick, seen, sections, _ = ticked(25, seen)
    assert draw_tick != skip and sections == set()
    draw_tick, seen, sections, interval = ticked(30, seen)
    assert sections == {"aids-tick.data"} and interval is skip

    post_points(pg_server, tenant, run, [2], {LEFT: [3.0]})
    draw_tick, seen, sections, _ = ticked(31, seen)
    assert draw_tick != skip and sections == set()  # the chart at once; the sections when due

    # The live channel opens: the interval stretches, the server says when to look. Its
    # word that the run changed redraws the chart (an event brings no new points), once.
    opened = {"n": 1, "on": True, "changed": False, "hidden": False}
    draw_tick, seen, sections, interval = ticked(31, seen, opened)
    assert (draw_tick, sections, interval) == (skip, set(), PUSHED_MS)
    told = {"n": 2, "on": True, "changed": True, "hidden": False}
    draw_tick, seen, sections, interval = ticked(31, seen, told)
    assert draw_tick != skip and (sections, interval) == (set(), skip)
    assert ticked(31, seen, told)[0] is skip
    # Two five-second ticks later it is beat 41: every section that reads points is due
    # again (40), and the run changed since they last read it.
    draw_tick, seen, sections, interval = ticked(33, seen, told)
    assert len(sections) == 6 and interval is skip
    closed = {"n": 3, "on": False, "changed": False, "hidden": False}
    draw_tick, seen, sections, interval = ticked(34, seen, closed)
    assert interval == TICK_MS  # the channel closed: look every second

    # A hidden tab rests: nothing read, nothing set off, whatever the run logs or is due.
    hidden = {"n": 4, "on": False, "changed": False, "hidden": True}
    post_points(pg_server, tenant, run, [3], {LEFT: [4.0]})
    out = tick(dashboard_data, who, view, 34, None, seen, hidden)
    assert [i for i, v in enumerate(out) if v is not skip] == [6, 13] and out[13] == PUSHED_MS
    out = tick(dashboard_data, who, view, 38, None, out[6], hidden)  # beats 35-54 pass
    assert [i for i, v in enumerate(out) if v is not skip] == [6]
    # Shown again: the chart is redrawn and every section reads what it missed, due or not.
    shown = {"n": 5, "on": False, "changed": True, "hidden": False}
    draw_tick, seen, sections, interval = ticked(38, out[6], shown)
    assert draw_tick != skip and len(sections) == 6 and interval == TICK_MS

    # Of another project's run: the pickers emptied, nothing set off.
    out = tick(dashboard_data, who, RunView(world.their_run, LEFT), 20, None, None)
    assert out[:3] == ([], [], "") and all(v is skip for v in out[3:])

    # The x axis choices come with the pickers' options: tokens are offered once the run
    # logs a tokens metric, on the next beat the options are read.
    def tokens_choice(out: tuple[Any, ...]) -> Any:
        assert out[14] is not skip
        return next(o for o in out[14] if o["value"] == "tokens")

    out = tick(dashboard_data, who, view, 5, None, None)  # beats 1-5: the options are due
    assert tokens_choice(out)["disabled"] is True
    post_points(pg_server, tenant, run, [4], {"throughput/total_tokens": [4096.0]})
    assert tick(dashboard_data, who, view, 6, None, out[6])[14] is skip  # beat 6: not due
    out = tick(dashboard_data, who, view, 10, None, out[6])
    assert tokens_choice(out) == {
        "label": " tokens (throughput/total_tokens)",
        "value": "tokens",
        "disabled": False,
    }
