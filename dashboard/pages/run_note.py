"""The run page's note, under its title: shown to everyone (`.run_header.note_of`, kept live
by the page's tick), edited by admins in place through the runs list's write
(`.runs_notes.write_note`, the validation of ``PATCH /api/v1/runs/{id}``), which refuses a
viewer without an admin token whatever the page shows."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, html
from dash.exceptions import PreventUpdate

from normwatch.server.auth import Principal
from normwatch.server.schemas import RunOut

from ..refusals import RunNotFound
from ..session import viewer
from ..wiring import TriggerId, clicked, in_thread, or_prevent, triggered_id
from .run_header import note_of
from .run_view import RunView
from .runs_notes import NOTES_ADMIN_ONLY, NoteEditing, note_editor, write_note

__all__ = ["NoteEditing", "RunNoteChange", "change_run_note", "note_section"]

RunNoteChange = tuple[Any, Any, Any, Any]
"""The message, whether the editor is hidden, its text, and the note the header shows."""


def note_section(run: RunOut, who: Principal) -> html.Div:
    """The note under the page's title (``run-note``, which the tick refreshes) and, for an
    admin, its "edit note" button and editor."""
    parts: list[Any] = [html.Div(note_of(run), id="run-note")]
    if who.can("admin"):
        edit = html.Button("edit note", id="run-note-edit", n_clicks=0, className="small")
        parts += [edit, note_editor("run-note"), html.Div(id="run-note-message")]
    return html.Div(parts, className="run-note")


def change_run_note(
    data: NoteEditing, who: Principal, run_id: str | None, trigger: TriggerId, typed: object
) -> RunNoteChange | None:
    """What a click on the page's note controls does (``trigger``: its id): "edit note"
    opens the editor on the note as stored now, *save note* replaces it with ``typed``
    (`write_note`; the header shows the saved note at once), *cancel* closes the editor.
    Refused, with the reason and the editor left open: a viewer without an admin token, a
    run outside the project, a note the service refuses (too long). None for anything else
    (``run_id`` None: a page of no run)."""
    keep = dash.no_update
    if trigger == "run-note-cancel":
        return None, True, keep, keep
    if run_id is None or trigger not in ("run-note-edit", "run-note-save"):
        return None
    if trigger == "run-note-save":
        run, message = write_note(data, who, run_id, typed)
        if run is None:
            return message, keep, keep, keep
        return message, True, keep, note_of(run)
    if not who.can("admin"):
        return html.Span(NOTES_ADMIN_ONLY, className="error"), keep, keep, keep
    try:
        run = data.run(who, run_id)
    except RunNotFound:
        return html.Span(f"No run {run_id} in your project.", className="error"), keep, keep, keep
    return None, False, run.notes or "", keep


def register(app: dash.Dash, data: NoteEditing) -> None:
    """Wire the note's buttons; only an admin's page has them, so a reader's sets off none.
    The saved note goes to ``run-note`` at once, which the tick also writes (a duplicate
    output): the header need not wait for the run's next read."""

    @app.callback(
        Output("run-note-message", "children"),
        Output("run-note-editor", "hidden"),
        Output("run-note-input", "value"),
        Output("run-note", "children", allow_duplicate=True),
        Input("run-note-edit", "n_clicks"),
        Input("run-note-save", "n_clicks"),
        Input("run-note-cancel", "n_clicks"),
        State("run-note-input", "value"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_run_note(
        _edit: object, _save: object, _cancel: object, typed: object, store: object
    ) -> RunNoteChange:
        if not clicked():  # an editor drawn with 0 clicks
            raise PreventUpdate
        view = RunView.from_store(store)
        run_id = None if view is None else view.run
        change = await in_thread(change_run_note, data, viewer(), run_id, triggered_id(), typed)
        return or_prevent(change)
