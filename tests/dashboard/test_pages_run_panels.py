"""The run page's panels section against real reads (a real server on Postgres): only the
panels in view are read and drawn, once for each view and each version of the run's data;
expression panels; a layout saved for the project by an admin and kept on the page for a
reader."""

from __future__ import annotations

import dash
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.figures import from_typed
from normwatch.dashboard.pages.run_panels import change_layout, section
from normwatch.dashboard.pages.run_panels_draw import draw_panels, drawn_for
from normwatch.dashboard.pages.run_panels_layout import NOT_SAVED, new_names
from normwatch.dashboard.pages.run_view import RunView
from normwatch.dashboard.panels import Layout
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, tree
from .seed import create_run, post_points, viewers

STEPS = list(range(50))
METRICS = {
    "train/loss": [3.0 - s / 50 for s in STEPS],
    "grad/norm/total": [2.0] * 50,
    "grad/norm/lm_head": [0.5] * 50,
    "optim/lr": [1e-3] * 50,
}
SHARE = "share(grad/norm/lm_head, grad/norm/total)"


def ids(*keys: str) -> list[dict[str, str]]:
    return [{"type": "panel-body", "key": k} for k in keys]


def ys(body: object) -> list[float]:
    figure = tree(body)["props"]["figure"]
    y = figure["data"][-1]["y"]
    return [float(v) for v in (from_typed(y) if isinstance(y, dict) else y)]


def test_only_panels_in_view_are_drawn_once_per_view_and_data_version(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run = create_run(pg_server, tenant, "panels")
    post_points(pg_server, tenant, run, STEPS, METRICS)
    who = viewers(dashboard_sessions, tenant).read
    view = RunView(run, "grad/norm/total")
    every = ids(*METRICS, SHARE, "never/logged")
    drawn = draw_panels(dashboard_data, who, view, every, ["optim/lr", SHARE], {}, {"draw": 7})
    assert drawn is not None
    bodies, store = drawn
    assert [b is dash.no_update for b in bodies] == [True, True, True, False, False, True]
    assert ys(bodies[3]) == [1e-3] * 50
    assert ys(bodies[4]) == [0.0625] * 50  # lm_head's share of the total's square
    assert store == dict.fromkeys(["optim/lr", SHARE], drawn_for(view, {"draw": 7}))
    # Drawn for this view and data: nothing to do, until either changes.
    assert draw_panels(dashboard_data, who, view, every, ["optim/lr"], store, {"draw": 7}) is None
    again = draw_panels(dashboard_data, who, view, every, ["optim/lr"], store, {"draw": 8})
    assert again is not None and [b is dash.no_update for b in again[0]].count(False) == 1
    zoomed = RunView(run, "grad/norm/total", start=10, end=19)
    bodies, _ = draw_panels(dashboard_data, who, zoomed, every, ["train/loss"], store, None) or (
        [],
        {},
    )
    figure = tree(bodies[0])["props"]["figure"]
    assert figure["layout"]["xaxis"]["range"] == [10, 19]
    assert len(ys(bodies[0])) == 10
    # A panel of a name the run never logged says why.
    bodies, _ = draw_panels(dashboard_data, who, view, every, ["never/logged"], {}, None) or (
        [],
        {},
    )
    message = tree(bodies[5])["props"]["figure"]["layout"]["annotations"][0]["text"]
    assert message.startswith("never/logged: no metric 'never/logged' in this run")
    # A key a crafted request names that is no expression: the panel says why.
    bad = "ratio(train/loss"
    bodies, _ = draw_panels(dashboard_data, who, view, ids(bad), [bad], {}, None) or ([], {})
    message = tree(bodies[0])["props"]["figure"]["layout"]["annotations"][0]["text"]
    assert message.startswith("ratio(train/loss: ")


def test_a_layout_is_saved_by_an_admin_and_kept_on_the_page_for_a_reader(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run = create_run(pg_server, tenant, "panels")
    post_points(pg_server, tenant, run, STEPS, METRICS)
    who = viewers(dashboard_sessions, tenant)
    names = list(METRICS)
    pinned = change_layout(dashboard_data, who.admin, {}, names, act="pin", key="optim/lr")
    assert pinned == (Layout(pinned=["optim/lr"]).model_dump(), "")
    assert dashboard_data.workspace(who.read) == Layout(pinned=["optim/lr"])
    added = change_layout(
        dashboard_data, who.admin, pinned[0], names, act="add", key=None, expression=SHARE
    )
    assert added is not None and added[0]["expressions"] == [SHARE]
    bad = change_layout(
        dashboard_data, who.admin, added[0], names, act="add", key=None, expression="ratio(a)"
    )
    assert bad == (added[0], "Not added: Value error, ratio takes 2 arguments, got 1 in 'ratio(a)'")
    hidden = change_layout(dashboard_data, who.read, added[0], names, act="hide", key="train/loss")
    assert hidden is not None
    assert hidden[0]["hidden"] == ["train/loss"]
    assert hidden[1] == NOT_SAVED.format(
        why="saving the project's panel layout needs an admin token"
    )
    assert dashboard_data.workspace(who.read).hidden == []
    removed = change_layout(dashboard_data, who.admin, added[0], names, act="remove", key=SHARE)
    assert removed == (Layout(pinned=["optim/lr"]).model_dump(), "")
    assert dashboard_data.workspace(who.read).expressions == []
    assert change_layout(dashboard_data, who.admin, added[0], names, act="up", key="x") is None
    assert change_layout(dashboard_data, who.admin, added[0], names, act="drop", key="x") is None

    change_layout(
        dashboard_data, who.admin, removed[0], names, act="add", key=None, expression=SHARE
    )
    page = section(dashboard_data, who.read, names)
    assert [summary["children"] for summary in find(page, "Summary")] == [
        "pinned (1)",
        "expressions (1)",
        "train (1)",
        "grad/norm (2)",
    ]
    assert [p["data-key"] for p in find(page, "Div", className="panel")] == [
        "optim/lr",
        SHARE,
        "train/loss",
        "grad/norm/lm_head",
        "grad/norm/total",
    ]


def test_a_metric_logged_later_gets_its_panel_once_the_tick_sees_new_data(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run = create_run(pg_server, tenant, "panels")
    post_points(pg_server, tenant, run, STEPS, {"train/loss": METRICS["train/loss"]})
    who = viewers(dashboard_sessions, tenant).read
    view = RunView(run, "train/loss")
    store = {"names": ["train/loss"], "version": None}
    # Nothing new: the same names, with the version seen.
    assert new_names(dashboard_data, who, view, {"draw": 1}, store) == {
        "names": ["train/loss"],
        "version": 1,
    }
    post_points(pg_server, tenant, run, [50], {"optim/lr": [1e-3]})
    seen = {"names": ["train/loss"], "version": 1}
    assert new_names(dashboard_data, who, view, {"draw": 1}, seen) is None  # not read
    assert new_names(dashboard_data, who, view, {"draw": 2}, seen) == {
        "names": ["optim/lr", "train/loss"],
        "version": 2,
    }
    assert new_names(dashboard_data, who, None, {"draw": 2}, seen) is None
