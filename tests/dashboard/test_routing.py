"""Which page a URL shows, called directly with the dashboard's real data on Postgres."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.routing import PAGES, frame, not_found, query_of, route
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, text, tree
from .seed import Viewers, create_run, post_points, viewers


@dataclass(frozen=True)
class World:
    project: str
    mine: Viewers
    run: str
    their_run: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    run = create_run(pg_server, mine, "routed-run")
    metrics = {"grad/norm/total": [1.0, 2.0], "train/loss": [3.0, 2.0]}
    post_points(pg_server, mine, run, [0, 1], metrics)
    their_run = create_run(pg_server, theirs, "their-run")
    return World(mine.project, viewers(dashboard_sessions, mine), run, their_run)


@pytest.mark.parametrize(
    ("search", "query"),
    [
        ("?left=grad%2Fnorm%2Ftotal&start=100", {"left": "grad/norm/total", "start": "100"}),
        ("left=a&left=b", {"left": "b"}),
        ("?log=1&right=", {"log": "1", "right": ""}),  # said empty: the right axis
        ("", {}),
        (None, {}),
        (["?left=a"], {}),
    ],
)
def test_query_of(search: Any, query: dict[str, str]) -> None:
    assert query_of(search) == query


def test_page_routes() -> None:
    assert [page.ROUTES for page in PAGES] == [
        ("/",),
        ("/runs/{run_id}",),
        ("/alerts",),
        ("/rules",),
        ("/compare",),
    ]


def test_frame_has_the_url_the_top_bar_and_the_page() -> None:
    shell = frame()
    assert find(shell, "Location")[0] == {"id": "url", "refresh": "callback-nav"}
    links = [(link["children"], link["href"]) for link in find(shell, "Link")]
    assert links == [("normwatch", "/"), ("runs", "/"), ("alerts", "/alerts"), ("rules", "/rules")]
    [logout] = find(shell, "Form")
    assert (logout["method"], logout["action"]) == ("post", "/logout")
    assert find(shell, "A") == []
    assert find(shell, "Main") == [{"children": None, "id": "page"}]


def test_not_found() -> None:
    shown = not_found("/runs/x")
    assert text(shown) == "Not foundNothing at /runs/x in your project.All runs"
    assert tree(shown)["props"]["className"] == "card"


def heading(page: Any) -> list[str]:
    return [h["children"] for h in find(page, "H1") + find(page, "H2")]


def test_route_opens_each_page(world: World, dashboard_data: DashboardData) -> None:
    who = world.mine.read
    viewer_text = f"project {world.project} · read"
    for path, search, title in (
        ("/", "", f"Runs in {world.project}"),
        (None, None, f"Runs in {world.project}"),
        (5, ["?"], f"Runs in {world.project}"),  # a crafted request: the runs list
        (f"/runs/{world.run}", "", "routed-run"),
        (f"/runs/{world.run}/", "?left=train/loss&run_id=x&who=y&data=z", "routed-run"),
        ("/alerts", f"?run={world.run}", f"Alerts in {world.project} for run {world.run}"),
        ("/alerts/", "", f"Alerts in {world.project}"),
        ("/rules", "", f"Alert rules in {world.project}"),
    ):
        page, shown_viewer = route(dashboard_data, who, path, search)
        assert (heading(page), shown_viewer) == ([title], viewer_text), path


def test_route_passes_the_query_to_the_page(world: World, dashboard_data: DashboardData) -> None:
    page, _ = route(
        dashboard_data, world.mine.admin, f"/runs/{world.run}", "?left=train/loss&log=1"
    )
    (store,) = find(page, "Store", id="view")
    assert (store["data"]["left"], store["data"]["log"]) == ("train/loss", True)


def test_route_to_nothing_or_another_projects_run_is_not_found(
    world: World, dashboard_data: DashboardData
) -> None:
    who = world.mine.admin
    for path, search, viewer_text in (
        ("/nowhere", "", f"project {world.project}"),
        ("/runs/a/b", "", f"project {world.project}"),
        (f"/runs/{world.their_run}", "", f"project {world.project} · admin"),
        ("/runs/" + "f" * 32, "", f"project {world.project} · admin"),
        ("/alerts", f"?run={world.their_run}", f"project {world.project} · admin"),
    ):
        page, shown_viewer = route(dashboard_data, who, path, search)
        assert (tree(page), shown_viewer) == (tree(not_found(path)), viewer_text), path
