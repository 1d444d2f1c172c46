"""The runs list's notes, for admins: a row's "edit note" opens an editor of the run's note.
Every change goes through `DashboardData` (the validation of ``PATCH /api/v1/runs/{id}``),
which refuses a viewer without an admin token whatever the page shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import dash
from dash import dcc, html

from normwatch.server.auth import Principal
from normwatch.server.schemas import MAX_NOTES, RunOut

from ..refusals import Refusal, RunNotFound, said
from ..wiring import TriggerId
from .run_view import RUN_ID

__all__ = [
    "NOTES_ADMIN_ONLY",
    "NoteChange",
    "NoteEditing",
    "change_note",
    "note_editor",
    "write_note",
]

NOTES_ADMIN_ONLY = "Changing notes needs an admin token."
NoteChange = tuple[Any, Any, Any, Any, Any, Any]
"""The run whose note is edited, the message, the change counter, whether the editor is
hidden, its text and its title."""


class NoteEditing(Protocol):
    """What note editing reads and changes, for the viewer (`RunNotFound` outside its
    project; a refusal for a viewer without an admin token, or a note refused)."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...

    def set_notes(self, who: Principal, run_id: str, notes: str) -> RunOut: ...


def note_editor(prefix: str = "runs-note") -> html.Div:
    """An admin's editor of one run's note, opened by the run's "edit note" button. Its
    parts' ids begin with ``prefix`` (``-title``, ``-input``, ``-save``, ``-cancel``,
    ``-editor``): the runs list and the run page each have one."""
    return html.Div(
        [
            html.Span(id=f"{prefix}-title", className="tag-title"),
            dcc.Textarea(
                id=f"{prefix}-input",
                value="",
                maxLength=MAX_NOTES,
                placeholder=f"a note on the run (at most {MAX_NOTES:,} characters)",
                className="note-input",
            ),
            html.Button("save note", id=f"{prefix}-save", n_clicks=0, className="small"),
            html.Button("cancel", id=f"{prefix}-cancel", n_clicks=0, className="small"),
        ],
        id=f"{prefix}-editor",
        className="controls tag-editor",
        hidden=True,
    )


def change_note(
    data: NoteEditing,
    who: Principal,
    trigger: TriggerId,
    click: bool,
    editing: object,
    typed: object,
    changed: object,
) -> NoteChange | None:
    """What a click on a note control does (``trigger``: its id): a run's "edit note" opens
    the editor on its note, *save note* replaces the note of the run being edited
    (``editing``) with the text ``typed`` (empty: removes it), *cancel* closes the editor.
    A change counts one up in ``changed`` (the table refreshes on it). Refused, with the
    reason: a viewer without an admin token, a run outside the project, a note the service
    refuses (too long). None without a real ``click``."""
    keep = dash.no_update
    if trigger is None or not click:
        return None
    if trigger == "runs-note-cancel":
        return None, None, keep, True, "", ""
    if not who.can("admin"):
        return keep, _error(NOTES_ADMIN_ONLY), keep, keep, keep, keep
    kind = trigger.get("type") if isinstance(trigger, Mapping) else trigger
    run_id = trigger.get("run") if isinstance(trigger, Mapping) else editing
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        return keep, _error("Pick a run's note to edit first."), keep, keep, keep, keep
    if kind == "runs-note-save":
        run, message = write_note(data, who, run_id, typed)
        if run is None:
            return keep, message, keep, keep, keep, keep
        return None, message, _next(changed), True, "", ""
    if kind == "run-note-edit":
        try:
            run = data.run(who, run_id)
        except RunNotFound:
            return keep, _error(f"No run {run_id} in your project."), keep, keep, keep, keep
        return run.id, None, keep, False, run.notes or "", f"Note on {run.name}"
    return None


def write_note(
    data: NoteEditing, who: Principal, run_id: str, typed: object
) -> tuple[RunOut | None, html.Span]:
    """Replace the note of the viewer's run ``run_id`` with ``typed`` (empty: removes it),
    through the validation of ``PATCH /api/v1/runs/{id}``: the run as saved and the message
    saying so, or None and the reason it was refused (a viewer without an admin token, a
    run outside the project, a note too long or not plain text). The one write of a note
    from every page that edits one."""
    if not who.can("admin"):
        return None, _error(NOTES_ADMIN_ONLY)
    try:
        run = data.set_notes(who, run_id, typed if isinstance(typed, str) else "")
    except RunNotFound:
        return None, _error(f"No run {run_id} in your project.")
    except Refusal as exc:
        return None, _error(f"{said(exc)}.")
    return run, _ok(f"Saved the note on {run.name}." if run.notes else f"No note on {run.name}.")


def _error(message: str) -> html.Span:
    return html.Span(message, className="error")


def _ok(message: str) -> html.Span:
    return html.Span(message, className="ok")


def _next(changed: object) -> int:
    return (changed if isinstance(changed, int) and not isinstance(changed, bool) else 0) + 1
