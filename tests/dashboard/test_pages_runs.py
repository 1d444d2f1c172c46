"""The runs list: times ago, the table, and its refresh on the dashboard's real data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.runs import NO_RUNS, ago, layout, refresh, runs_table
from normwatch.server.schemas import RunOut
from sqlalchemy.orm import Session, sessionmaker

from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, header, rows, text, tree
from .seed import create_run, post_points, viewers

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0, "0 s ago"),
        (59.9, "59 s ago"),
        (60, "1 min ago"),
        (3599, "59 min ago"),
        (3600, "1 h ago"),
        (86_399, "23 h ago"),
        (86_400, "1 d ago"),
        (40 * 86_400, "40 d ago"),
        (-30, "0 s ago"),  # a clock ahead of ours
    ],
)
def test_ago(seconds: float, said: str) -> None:
    assert ago(NOW - timedelta(seconds=seconds), NOW) == said


def run_out(**fields: Any) -> RunOut:
    defaults: dict[str, Any] = {
        "id": "r1",
        "project": "marin",
        "name": "32b-exp1295",
        "status": "running",
        "segment": 1,
        "config": {},
        "tags": [],
        "last_step": None,
        "last_seen": NOW,
        "created_at": NOW,
    }
    return RunOut.model_validate({**defaults, **fields})


def test_runs_table_one_row_a_run() -> None:
    runs = [
        run_out(last_step=81_000, tags=["32b", "ep"], segment=2, last_seen=NOW - timedelta(0, 90)),
        run_out(id="r2", name="<b>tiny</b>", status="finished", last_seen=NOW),
    ]
    table = runs_table(runs, NOW)
    assert tree(table)["props"]["className"] == "runs"
    assert header(table) == [
        "name",
        "project",
        "status",
        "segment",
        "last step",
        "last seen",
        "tags",
    ]
    assert rows(table) == [
        ["32b-exp1295", "marin", "running", "2", "81,000", "1 min ago", "32b, ep"],
        ["<b>tiny</b>", "marin", "finished", "1", "—", "0 s ago", ""],
    ]
    assert [(a["children"], a["href"]) for a in find(table, "Link")] == [
        ("32b-exp1295", "/runs/r1"),
        ("<b>tiny</b>", "/runs/r2"),
    ]
    assert [s["className"] for s in find(table, "Span")] == [
        "status status-running",
        "status status-finished",
    ]
    last_seen = [td for td in find(table, "Td") if "title" in td]
    assert [td["title"] for td in last_seen] == [
        (NOW - timedelta(0, 90)).isoformat(),
        NOW.isoformat(),
    ]


def test_runs_table_without_runs_says_how_to_start_one() -> None:
    empty = tree(runs_table([]))
    assert (empty["type"], empty["props"]) == ("P", {"children": NO_RUNS, "className": "empty"})


def test_refresh_lists_only_the_viewers_project(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    first = create_run(pg_server, mine, "first-run")
    post_points(pg_server, mine, first, [0, 1, 2], {"grad/norm/total": [1.0, 2.0, 3.0]})
    second = create_run(pg_server, mine, "second-run")
    create_run(pg_server, theirs, "their-run")
    me = viewers(dashboard_sessions, mine)

    for who in (me.read, me.admin):
        table = refresh(dashboard_data, who)
        listed = {(r[0], r[1], r[4]) for r in rows(table)}
        assert listed == {("first-run", mine.project, "2"), ("second-run", mine.project, "—")}
        hrefs = {link["href"] for link in find(table, "Link")}
        assert hrefs == {f"/runs/{first}", f"/runs/{second}"}
    page = layout(dashboard_data, me.read, {})
    assert [h["children"] for h in find(page, "H1")] == [f"Runs in {mine.project}"]
    assert "their-run" not in text(page)

    nobody = make_tenant(pg_server.database_url)
    alone = viewers(dashboard_sessions, nobody).read
    assert text(refresh(dashboard_data, alone)) == NO_RUNS
