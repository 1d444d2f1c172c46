"""The runs list: times ago, the table and its header, the counts, the view's changes by the
controls, ticks kept while a filter hides them, and, on the dashboard's real data, the
refresh, the layout a URL names and an admin's tag edits (refused to anyone else)."""

from __future__ import annotations

import doctest
from datetime import UTC, datetime, timedelta
from typing import Any

import dash
import httpx
import pytest
from dash import html
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages import runs, runs_table, runs_tags
from normwatch.dashboard.pages.runs import (
    NO_MATCH,
    NO_RUNS,
    ago,
    compare_action,
    layout,
    refresh,
    update_view,
)
from normwatch.dashboard.pages.runs_table import count_text, header, sort_labels, state_options
from normwatch.dashboard.pages.runs_tags import ADMIN_ONLY, change_tags, typed_tags
from normwatch.dashboard.pages.runs_view import Listing, RunsView
from normwatch.dashboard.routing import query_of
from normwatch.server.errors import Forbidden, RunNotFound
from normwatch.server.schemas import MetricOut, RunOut
from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .components import find, rows, text, tree
from .seed import api, create_run, post_points, viewers

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
KEEP = dash.no_update


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


def test_doctests() -> None:
    for module in (runs, runs_table, runs_tags):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 0) == (0, True), module


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


# --- the table ----------------------------------------------------------------------------


def test_runs_table_one_row_a_run() -> None:
    listed = [
        run_out(
            last_step=81_000,
            tags=["32b", "ep"],
            segment=2,
            last_seen=NOW - timedelta(0, 90),
            created_at=NOW - timedelta(days=2),
        ),
        run_out(id="r2", name="<b>tiny</b>", status="finished", last_seen=NOW),
    ]
    table = runs_table.runs_table(listed, NOW)
    assert tree(table)["props"]["id"] == "runs-table"
    assert rows(table) == [
        ["32b-exp1295", "running", "2", "81,000", "1 min ago", "2 d ago", "32bep", ""],
        ["<b>tiny</b>", "finished", "1", "—", "0 s ago", "0 s ago", "", ""],
    ]
    assert [(a["children"], a["href"]) for a in find(table, "Link")] == [
        ("32b-exp1295", "/runs/r1"),
        ("<b>tiny</b>", "/runs/r2"),
    ]
    assert [s["className"] for s in find(table, "Span")] == [
        "status status-running",
        "tag",
        "tag",
        "run-note",
        "status status-finished",
        "run-note",
    ]
    titled = [td["title"] for td in find(table, "Td") if "title" in td]
    assert titled == [
        (NOW - timedelta(0, 90)).isoformat(),
        (NOW - timedelta(days=2)).isoformat(),
        NOW.isoformat(),
        NOW.isoformat(),
    ]
    assert find(table, "Button") == []  # no tag controls but for admins


def test_runs_table_gives_admins_tag_controls() -> None:
    table = runs_table.runs_table([run_out(tags=["32b", "ep"]), run_out(id="r2")], admin=True)
    assert [b["id"] for b in find(table, "Button")] == [
        {"type": "run-tag-remove", "run": "r1", "tag": "32b"},
        {"type": "run-tag-remove", "run": "r1", "tag": "ep"},
        {"type": "run-tag-edit", "run": "r1"},
        {"type": "run-note-edit", "run": "r1"},
        {"type": "run-tag-edit", "run": "r2"},
        {"type": "run-note-edit", "run": "r2"},
    ]
    assert [b["children"] for b in find(table, "Button", className="small tag-edit")] == [
        "edit tags",
        "+ tag",
    ]


def test_runs_table_without_runs_says_why_in_a_row() -> None:
    for empty in (NO_RUNS, NO_MATCH):
        body = runs_table.runs_table([], empty=empty)
        assert rows(body) == [[empty]]
        assert find(body, "Td")[0]["colSpan"] == len(runs_table.COLUMNS) + 1  # and notes


def test_header_sorts_by_its_columns() -> None:
    row = header("-last_step")
    assert [text(th) for th in tree(row)["props"]["children"]] == [
        "name",
        "status",
        "segment",
        "last step ↓",
        "last seen",
        "created",
        "tags",
        "notes",
    ]
    assert [b["id"] for b in find(row, "Button")] == list(runs.SORT_BUTTONS)
    assert sort_labels("name")[0] == "name ↑"


@pytest.mark.parametrize(
    ("listing", "capped", "said"),
    [
        (Listing([], 0, 0, 1, 1), False, "0 runs"),
        (Listing([], 1, 1, 1, 1), False, "1 run"),
        (Listing([], 0, 1, 1, 1), False, "0 of 1 run"),
        (Listing([], 3, 40, 1, 1), False, "3 of 40 runs"),
        (Listing([], 10_000, 10_000, 1, 200), True, "10,000+ runs · 1–50 on page 1 of 200"),
        (Listing([], 120, 130, 3, 3), False, "120 of 130 runs · 101–120 on page 3 of 3"),
    ],
)
def test_count_text(listing: Listing, capped: bool, said: str) -> None:
    assert count_text(listing, capped=capped) == said


def test_state_options_add_what_the_runs_have() -> None:
    listed = [run_out(status="crashed"), run_out(status="running")]
    view = RunsView(states=("paused",))
    assert state_options(listed, view) == ["running", "finished", "failed", "crashed", "paused"]


# --- the view's changes -------------------------------------------------------------------


def controls(**values: Any) -> dict[str, Any]:
    """The controls as the browser sends them, the default view's values unless given."""
    return {"search": "", "tags": [], "states": [], "config": "", "sort": "-last_seen", **values}


def test_update_view_from_the_controls() -> None:
    store, error, sort, *labels = update_view(
        {}, "runs-search", **controls(search="lr", tags=["32b"], config="a.b>=1e-4")
    )
    assert store["url"] == "?q=lr&tag=32b&config=a.b%3E%3D1e-4"
    assert (error, sort, labels[3]) == ("", "-last_seen", "last seen ↓")
    unchanged = update_view(
        store, "runs-search", **controls(search="lr", tags=["32b"], config="a.b>=1e-4")
    )
    assert unchanged[0] is KEEP


def test_update_view_says_why_a_config_filter_is_malformed_and_keeps_the_last() -> None:
    store = RunsView.from_query(query_of("?config=a%3D1&page=2")).to_store()
    new, error, *_ = update_view(store, "runs-config", **controls(config="a=1, b>x"))
    assert new is KEEP
    assert error == "'b>x': > compares numbers; x is not a number"
    fixed, error, *_ = update_view(store, "runs-config", **controls(config="b>2"))
    assert (fixed["config"], fixed["page"], error) == (["b>2"], 1, "")


def test_update_view_by_a_column_title_and_the_pager() -> None:
    store = RunsView(page=3).to_store()
    by_name, _, sort, *labels = update_view(store, "runs-sort-name", **controls())
    assert (by_name["sort"], by_name["page"], sort, labels[0]) == ("name", 1, "name", "name ↑")
    again, _, sort, *_ = update_view(by_name, "runs-sort-name", **controls(sort="name"))
    assert (again["sort"], sort) == ("-name", "-name")
    picked, *_ = update_view(store, "runs-sort", **controls(sort="created"))
    assert (picked["sort"], picked["page"]) == ("created", 1)
    assert update_view(store, "runs-next", **controls())[0]["page"] == 4
    assert update_view(store, "runs-prev", **controls())[0]["page"] == 2
    first = RunsView().to_store()
    assert update_view(first, "runs-prev", **controls())[0] is KEEP
    # A button drawn again without a click changes nothing.
    assert update_view(store, "runs-next", False, **controls()) is None


def test_compare_action_keeps_runs_a_filter_hides() -> None:
    class Reads:
        def metrics(self, who: object, run_id: str) -> list[MetricOut]:
            return [MetricOut(name="grad/norm/total", last_step=1, last_value=1.0)]

    def boxes(*run_ids: str) -> list[dict[str, str]]:
        return [{"type": "compare-pick", "run": r} for r in run_ids]

    data: Any = Reads()
    who: Any = None
    # r1 and r2 ticked; a search leaves r3 alone on the page: both stay ticked.
    assert compare_action(data, who, [[]], ["r1", "r2"], boxes("r3")) is None
    # r3 ticked too, then r2 unticked where it shows again.
    action = compare_action(data, who, [["r3"]], ["r1", "r2"], boxes("r3"))
    assert action is not None and action[1] == ["r1", "r2", "r3"]
    action = compare_action(data, who, [["r1"], [], ["r3"]], action[1], boxes("r1", "r2", "r3"))
    assert action is not None and action[1] == ["r1", "r3"]
    assert text(action[0]) == "compare 2 runs"


def test_typed_tags() -> None:
    assert typed_tags(" 32b , ablation,,32b, ") == ["32b", "ablation"]
    assert typed_tags(None) == [] == typed_tags(" , ")


def test_refresh_interval_backs_off_for_a_slow_read() -> None:
    assert [runs.refresh_interval(s) for s in (0.0, 0.5, 0.51, 2.0, 99.0)] == [
        2000,
        2000,
        3000,
        8000,
        30_000,
    ]


# --- on the dashboard's real data ---------------------------------------------------------


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
        table, count, tags, states, first_page, last_page, interval = refresh(dashboard_data, who)
        listed = {(r[0], r[3]) for r in rows(html.Tbody(table))}
        assert listed == {("first-run", "2"), ("second-run", "—")}
        hrefs = {link["href"] for link in find(table, "Link")}
        assert hrefs == {f"/runs/{first}", f"/runs/{second}"}
        assert (count, tags, states) == ("2 runs", [], ["running", "finished", "failed"])
        assert (first_page, last_page, interval) == (True, True, 2000)
    page = layout(dashboard_data, me.read, {})
    assert [h["children"] for h in find(page, "H1")] == [f"Runs in {mine.project}"]
    assert "their-run" not in text(page)

    # Options the browser shows already are left as they are.
    shown = refresh(dashboard_data, me.read, None, [], ["running", "finished", "failed"], 2000)
    assert shown[2:4] == (KEEP, KEEP) and shown[6] is KEEP

    nobody = make_tenant(pg_server.database_url)
    alone = viewers(dashboard_sessions, nobody).read
    assert text(refresh(dashboard_data, alone)[0]) == NO_RUNS


def seed_runs(server: ServerProcess, tenant: Tenant) -> dict[str, str]:
    made = {}
    for name, tags, lr in (
        ("32b-lr3e-4", ["32b", "ablation"], 3e-4),
        ("32b-lr1e-3", ["32b"], 1e-3),
        ("7b-lr3e-4", ["7b"], 3e-4),
    ):
        body = {"name": name, "tags": tags, "config": {"optimizer": {"lr": lr}}}
        with api(server, tenant) as client:
            got = client.post("/api/v1/runs", json=body)
        assert got.status_code == 200, got.text
        made[name] = str(got.json()["id"])
    return made


def test_layout_shows_the_view_the_url_names(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    seed_runs(pg_server, tenant)
    me = viewers(dashboard_sessions, tenant)
    query = query_of("?q=LR&tag=32b&config=optimizer.lr%3C5e-4&config=bad&sort=name&page=x")
    page = layout(dashboard_data, me.read, query)
    assert [r[0] for r in rows(page)] == ["32b-lr3e-4"]
    assert find(page, "Input", id="runs-search")[0]["value"] == "LR"
    assert find(page, "Input", id="runs-config")[0]["value"] == "optimizer.lr<5e-4"
    tags = find(page, "Dropdown", id="runs-tag")[0]
    assert (tags["value"], tags["options"]) == (["32b"], ["32b", "7b", "ablation"])
    assert find(page, "Dropdown", id="runs-sort")[0]["value"] == "name"
    store = find(page, "Store", id="runs-view")[0]["data"]
    assert store["url"] == "?q=LR&tag=32b&config=optimizer.lr%3C5e-4&sort=name"
    assert find(page, "Span", id="runs-count")[0]["children"] == "1 of 3 runs"
    assert find(page, "Div", id="runs-tag-editor") == []  # readers get no tag editor
    admin_page = layout(dashboard_data, me.admin, query)
    assert len(find(admin_page, "Div", id="runs-tag-editor")) == 1


def tags_of(server: ServerProcess, tenant: Tenant, run_id: str) -> list[str]:
    with api(server, tenant, "read") as client:
        got = client.get(f"/api/v1/runs/{run_id}")
    assert got.status_code == 200, got.text
    found: list[str] = got.json()["tags"]
    return found


def test_an_admin_edits_tags_through_the_service_and_no_one_else(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant, other = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    ids = seed_runs(pg_server, tenant)
    theirs = seed_runs(pg_server, other)["7b-lr3e-4"]
    me = viewers(dashboard_sessions, tenant)
    run_id = ids["32b-lr3e-4"]
    edit = {"type": "run-tag-edit", "run": run_id}

    opened = change_tags(dashboard_data, me.admin, edit, True, None, "", 0)
    assert opened == (run_id, None, KEEP, False, "32b, ablation", "Tags of 32b-lr3e-4")
    assert change_tags(dashboard_data, me.admin, edit, False, None, "", 0) is None  # no click

    saved = change_tags(
        dashboard_data, me.admin, "runs-tag-save", True, run_id, "ablation, new, 32b, new", 4
    )
    assert saved is not None
    assert (saved[0], text(saved[1]), saved[2:]) == (
        None,
        "Tags of 32b-lr3e-4: 32b, ablation, new.",
        (5, True, "", ""),
    )
    assert tags_of(pg_server, tenant, run_id) == ["32b", "ablation", "new"]

    remove = {"type": "run-tag-remove", "run": run_id, "tag": "ablation"}
    removed = change_tags(dashboard_data, me.admin, remove, True, run_id, "x", 5)
    assert removed is not None
    assert (text(removed[1]), removed[2], removed[4]) == (
        "Removed tag ablation from 32b-lr3e-4.",
        6,
        "32b, new",
    )
    assert tags_of(pg_server, tenant, run_id) == ["32b", "new"]

    # Refused, the reason said, nothing stored: a reader (a forged click), another
    # project's run, tags the API would refuse too.
    refusals = [
        (me.read, edit, None, "", ADMIN_ONLY),
        (me.read, "runs-tag-save", run_id, "hacked", ADMIN_ONLY),
        (me.read, {**remove, "tag": "32b"}, None, "", ADMIN_ONLY),
        (me.admin, {"type": "run-tag-edit", "run": theirs}, None, "", f"No run {theirs} in"),
        (me.admin, "runs-tag-save", theirs, "mine", f"No run {theirs} in your project."),
        (me.admin, {**remove, "run": theirs, "tag": "7b"}, None, "", f"No run {theirs} in"),
        (me.admin, "runs-tag-save", run_id, "ok, " + "x" * 129, "at most 128"),
        (me.admin, "runs-tag-save", run_id, ", ".join(f"t{i}" for i in range(65)), "at most 64"),
        (me.admin, "runs-tag-save", run_id, "a\x01b", "tag 'a\\x01b'"),
        (me.admin, "runs-tag-save", None, "x", "Pick a run's tags to edit first."),
        (me.admin, "runs-tag-save", "../etc", "x", "Pick a run's tags to edit first."),
    ]
    for who, trigger, editing, typed, says in refusals:
        answer = change_tags(dashboard_data, who, trigger, True, editing, typed, 7)
        assert answer is not None
        assert find(answer[1], "Span", className="error"), (trigger, answer)
        assert says in text(answer[1]), (trigger, text(answer[1]))
        assert (answer[0], answer[2]) == (KEEP, KEEP)
    assert tags_of(pg_server, tenant, run_id) == ["32b", "new"]
    assert tags_of(pg_server, other, theirs) == ["7b"]

    # The data layer refuses on its own, whatever page calls it.
    with pytest.raises(Forbidden, match="admin token"):
        dashboard_data.set_tags(me.read, run_id, [])
    with pytest.raises(RunNotFound):
        dashboard_data.remove_tag(me.admin, theirs, "7b")

    # Cancel closes the editor, for anyone: it changes nothing.
    assert change_tags(dashboard_data, me.read, "runs-tag-cancel", True, run_id, "x", 7) == (
        None,
        None,
        KEEP,
        True,
        "",
        "",
    )


def test_tags_validated_as_the_api_validates_them(pg_server: ServerProcess) -> None:
    """The same tags the dashboard refuses, the API refuses (one model validates both)."""
    tenant = make_tenant(pg_server.database_url)
    run_id = create_run(pg_server, tenant, "validated")
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("admin"), timeout=30) as c:
        for tags in (["x" * 129], [f"t{i}" for i in range(65)], ["a\x01b"], [""]):
            assert c.patch(f"/api/v1/runs/{run_id}", json={"tags": tags}).status_code == 422
