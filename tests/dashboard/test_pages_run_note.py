"""The run page's note, under its title: shown when the run has one, sent again by the tick
once it was edited elsewhere, edited in place by admins only (the runs list's write, its
refusals), read through the dashboard's real data on Postgres."""

from __future__ import annotations

from typing import Any

import dash
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.run import layout
from normwatch.dashboard.pages.run_note import change_run_note
from normwatch.dashboard.pages.run_tick import tick
from normwatch.dashboard.pages.run_view import RunView
from normwatch.dashboard.pages.runs_notes import NOTES_ADMIN_ONLY
from normwatch.server.schemas import MAX_NOTES
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, text
from .seed import api, create_run, post_points, viewers

LEFT = "grad/norm/total"
SKIP = dash.no_update


def poke(n: int) -> dict[str, Any]:
    """The live channel's script's poke: open, the run changed."""
    return {"n": n, "on": True, "changed": True, "hidden": False}


def test_the_header_shows_the_note_and_the_tick_sends_an_edit_made_elsewhere(
    pg_server: ServerProcess,
    dashboard_data: DashboardData,
    dashboard_sessions: sessionmaker[Session],
) -> None:
    tenant = make_tenant(pg_server.database_url)
    me = viewers(dashboard_sessions, tenant)
    run = create_run(pg_server, tenant, "noted-page")
    post_points(pg_server, tenant, run, [0, 1], {LEFT: [1.0, 2.0]})

    page = layout(dashboard_data, me.read, {}, run)
    (note,) = find(page, "Div", id="run-note")
    assert note["children"] == []  # no note: nothing under the title
    assert find(page, id="run-note-edit") == [] and find(page, id="run-note-editor") == []
    (seen,) = find(page, "Store", id="ticks-seen")
    view = RunView(run, LEFT)

    with api(pg_server, tenant, "admin") as client:
        noted = client.patch(f"/api/v1/runs/{run}", json={"notes": "diverged at 4k"})
        assert noted.status_code == 200, noted.text
    out = tick(dashboard_data, me.read, view, 0, None, seen["data"], poke(1))
    assert text(out[17]) == "diverged at 4k"
    assert find(out[17], "P", className="run-note-text")[0]["children"] == "diverged at 4k"
    assert text(out[15]) == "runningsegment 1"  # the whole header comes again
    # Told again with nothing new: the header is not sent again.
    out = tick(dashboard_data, me.read, view, 0, None, out[6], poke(2))
    assert out[15:] == (SKIP, SKIP, SKIP)

    with api(pg_server, tenant, "admin") as client:
        cleared = client.patch(f"/api/v1/runs/{run}", json={"notes": ""})
        assert cleared.status_code == 200, cleared.text
    out = tick(dashboard_data, me.read, view, 0, None, out[6], poke(3))
    assert out[17] == []

    page = layout(dashboard_data, me.admin, {}, run)
    assert [b["children"] for b in find(page, "Button", id="run-note-edit")] == ["edit note"]
    assert find(page, "Div", id="run-note-editor")[0]["hidden"] is True


def test_only_an_admin_edits_the_note_on_the_run_page(
    pg_server: ServerProcess,
    dashboard_data: DashboardData,
    dashboard_sessions: sessionmaker[Session],
) -> None:
    tenant, other = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    me = viewers(dashboard_sessions, tenant)
    run = create_run(pg_server, tenant, "edited-here")
    theirs = create_run(pg_server, other, "theirs-here")
    keep = SKIP

    assert change_run_note(dashboard_data, me.admin, run, "run-note-edit", "") == (
        None,
        False,
        "",
        keep,
    )
    saved = change_run_note(dashboard_data, me.admin, run, "run-note-save", " lr 3e-4 ")
    assert saved is not None
    message, hidden, typed, shown = saved
    assert (text(message), hidden, typed, text(shown)) == (
        "Saved the note on edited-here.",
        True,
        keep,
        "lr 3e-4",
    )
    assert dashboard_data.run(me.read, run).notes == "lr 3e-4"
    assert change_run_note(dashboard_data, me.admin, run, "run-note-edit", "") == (
        None,
        False,
        "lr 3e-4",
        keep,
    )
    assert change_run_note(dashboard_data, me.admin, run, "run-note-cancel", "x") == (
        None,
        True,
        keep,
        keep,
    )

    refusals = [
        (me.read, run, "run-note-edit", "", NOTES_ADMIN_ONLY),
        (me.read, run, "run-note-save", "hacked", NOTES_ADMIN_ONLY),
        (
            me.admin,
            run,
            "run-note-save",
            "x" * (MAX_NOTES + 1),
            f"a note has at most 2,000 characters, not {MAX_NOTES + 1:,}.",
        ),
        (me.admin, theirs, "run-note-edit", "", f"No run {theirs} in your project."),
        (me.admin, theirs, "run-note-save", "mine", f"No run {theirs} in your project."),
    ]
    for who, run_id, trigger, typed, says in refusals:
        answer = change_run_note(dashboard_data, who, run_id, trigger, typed)
        assert answer is not None
        assert find(answer[0], "Span", className="error"), (trigger, answer)
        assert text(answer[0]) == says, (trigger, text(answer[0]))
        assert answer[1:] == (keep, keep, keep)  # the editor stays open on what was typed
    assert dashboard_data.run(me.read, run).notes == "lr 3e-4"
    assert dashboard_data.run(viewers(dashboard_sessions, other).read, theirs).notes is None

    assert change_run_note(dashboard_data, me.admin, run, "run-note-other", "x") is None
    assert change_run_note(dashboard_data, me.admin, None, "run-note-save", "x") is None
