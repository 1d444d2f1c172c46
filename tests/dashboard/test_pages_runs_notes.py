"""The runs table on the dashboard's real data: a page's metric columns read for its runs
at once, the names and keys it offers, and admins' notes through the service (a reader,
another project's run and a note too long refused, the reason said, nothing stored)."""

from __future__ import annotations

import dash
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.runs import layout, refresh, select
from normwatch.dashboard.pages.runs_notes import NOTES_ADMIN_ONLY, change_note
from normwatch.dashboard.pages.runs_view import RunsView
from normwatch.dashboard.routing import query_of
from normwatch.server.errors import Forbidden, RunNotFound
from normwatch.server.schemas import MAX_NOTES
from normwatch.server.storage.run_stats import SeriesStats
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, text
from .seed import create_run, post_points, viewers

KEEP = dash.no_update


def test_metric_columns_read_for_the_page_and_the_choices_offered(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant, other = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    first = create_run(pg_server, tenant, "first", {"optimizer": {"lr": 1e-3}})
    post_points(pg_server, tenant, first, [0, 1, 2], {"loss": [3.0, 1.0, 2.0], "acc": [0.5] * 3})
    second = create_run(pg_server, tenant, "second", {"optimizer": {"lr": 1e-3}, "seed": 2})
    post_points(pg_server, tenant, second, [0, 1], {"loss": [-1.0, "Infinity"]})
    theirs = create_run(pg_server, other, "theirs")
    post_points(pg_server, other, theirs, [0], {"secret/metric": [7.0]})
    me = viewers(dashboard_sessions, tenant)

    stats = dashboard_data.metric_stats(me.read, [first, second, theirs], ["loss", "acc"])
    assert stats == {
        first: {"loss": SeriesStats(2, 2.0, 1.0, 3.0), "acc": SeriesStats(2, 0.5, 0.5, 0.5)},
        second: {"loss": SeriesStats(1, float("inf"), -1.0, float("inf"))},
    }
    assert dashboard_data.logged_names(me.read) == ["acc", "loss"]

    query = query_of("?sort=name&col=max%3Aloss&col=last%3Aacc&col=config%3Aseed")
    page = layout(dashboard_data, me.read, query)
    found = [c["children"] for c in find(page, "Td", className="chosen-cell")]
    cells = [found[:3], found[3:]]
    assert cells == [["3", "0.5", "—"], ["inf", "—", "2"]]
    assert find(page, "Dropdown", id="runs-col-metric")[0]["options"] == ["acc", "loss"]
    keys = find(page, "Dropdown", id="runs-col-config")[0]["options"]
    assert keys == ["optimizer.lr", "seed"]

    # Sorted by a metric column: by the values of every matched run; past the limit of
    # runs the list keeps its default order and says so.
    by_max = RunsView.from_query(query_of("?col=max%3Aloss&sort=-max%3Aloss"))
    listing, values, said = select(dashboard_data, me.read, by_max, dashboard_data.runs(me.read))
    assert ([r.name for r in listing.rows], said) == (["second", "first"], "")
    assert values[first]["loss"].max == 3.0
    up = RunsView.from_query(query_of("?col=max%3Aloss&sort=max%3Aloss"))
    listing, _, said = select(dashboard_data, me.read, up, dashboard_data.runs(me.read))
    assert [r.name for r in listing.rows] == ["first", "second"]
    listing, _, said = select(dashboard_data, me.read, up, dashboard_data.runs(me.read), limit=1)
    assert [r.name for r in listing.rows] == ["second", "first"]  # most recently active
    assert said == " · not sorted by loss (max): more than 1 runs match"

    # Grouped by the lr both runs share: one row, the mean of their smallest losses.
    store = RunsView.from_query(query_of("?col=min%3Aloss&group=optimizer.lr")).to_store()
    table = refresh(dashboard_data, me.read, store)[0]
    assert "optimizer.lr = 0.0012 runs" in text(table)
    assert [c["children"] for c in find(table, "Td", className="chosen-cell")] == ["0 (-1–1)"]


def test_an_admin_edits_notes_through_the_service_and_no_one_else(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant, other = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    run_id = create_run(pg_server, tenant, "noted")
    theirs = create_run(pg_server, other, "theirs")
    me = viewers(dashboard_sessions, tenant)
    edit = {"type": "run-note-edit", "run": run_id}

    opened = change_note(dashboard_data, me.admin, edit, True, None, "", 0)
    assert opened == (run_id, None, KEEP, False, "", "Note on noted")
    assert change_note(dashboard_data, me.admin, edit, False, None, "", 0) is None  # no click
    saved = change_note(dashboard_data, me.admin, "runs-note-save", True, run_id, " lr 3e-4 ", 4)
    assert saved is not None
    assert (saved[0], text(saved[1]), saved[2:]) == (
        None,
        "Saved the note on noted.",
        (5, True, "", ""),
    )
    assert dashboard_data.run(me.read, run_id).notes == "lr 3e-4"
    reopened = change_note(dashboard_data, me.admin, edit, True, None, "", 5)
    assert reopened is not None and reopened[4] == "lr 3e-4"

    refusals = [
        (me.read, edit, None, "", NOTES_ADMIN_ONLY),
        (me.read, "runs-note-save", run_id, "hacked", NOTES_ADMIN_ONLY),
        (me.admin, {"type": "run-note-edit", "run": theirs}, None, "", f"No run {theirs} in"),
        (me.admin, "runs-note-save", theirs, "mine", f"No run {theirs} in your project."),
        (
            me.admin,
            "runs-note-save",
            run_id,
            "x" * (MAX_NOTES + 1),
            f"a note has at most 2,000 characters, not {MAX_NOTES + 1:,}",
        ),
        (me.admin, "runs-note-save", run_id, "a\x00b", "plain text"),
        (me.admin, "runs-note-save", None, "x", "Pick a run's note to edit first."),
    ]
    for who, trigger, editing, typed, says in refusals:
        answer = change_note(dashboard_data, who, trigger, True, editing, typed, 7)
        assert answer is not None
        assert find(answer[1], "Span", className="error"), (trigger, answer)
        assert says in text(answer[1]), (trigger, text(answer[1]))
        assert (answer[0], answer[2]) == (KEEP, KEEP)
    assert dashboard_data.run(me.read, run_id).notes == "lr 3e-4"
    assert dashboard_data.run(viewers(dashboard_sessions, other).read, theirs).notes is None

    with pytest.raises(Forbidden, match="admin token"):
        dashboard_data.set_notes(me.read, run_id, "")
    with pytest.raises(RunNotFound):
        dashboard_data.set_notes(me.admin, theirs, "x")
    removed = change_note(dashboard_data, me.admin, "runs-note-save", True, run_id, "", 7)
    assert removed is not None and text(removed[1]) == "No note on noted."
    assert dashboard_data.run(me.read, run_id).notes is None
    assert change_note(dashboard_data, me.read, "runs-note-cancel", True, run_id, "x", 7) == (
        None,
        None,
        KEEP,
        True,
        "",
        "",
    )
