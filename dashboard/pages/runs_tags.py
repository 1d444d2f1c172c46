"""The runs list's tag editing, for admins: a tag's × on a row takes it off the run, a
row's "edit tags" opens an editor of the run's tags. Every change goes through
`DashboardData` (the validation of ``PATCH /api/v1/runs/{id}``), which refuses a viewer
without an admin token whatever the page shows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import dash
from dash import dcc, html

from normwatch.server.auth import Principal
from normwatch.server.schemas import RunOut

from ..refusals import Refusal, RunNotFound, said
from ..wiring import TriggerId
from .run_view import RUN_ID

__all__ = ["ADMIN_ONLY", "TagChange", "TagEditing", "change_tags", "tag_editor", "typed_tags"]

ADMIN_ONLY = "Changing tags needs an admin token."
TagChange = tuple[Any, Any, Any, Any, Any, Any]
"""The run whose tags are edited, the message, the change counter, whether the editor is
hidden, its text and its title."""


class TagEditing(Protocol):
    """What tag editing reads and changes, for the viewer (`RunNotFound` outside its
    project; `TagsRefused` for a viewer without an admin token, or tags refused)."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...

    def set_tags(self, who: Principal, run_id: str, tags: Sequence[str]) -> RunOut: ...

    def remove_tag(self, who: Principal, run_id: str, tag: str) -> RunOut: ...


def tag_editor() -> html.Div:
    """An admin's editor of one run's tags, opened by the run's "edit tags" button."""
    return html.Div(
        [
            html.Span(id="runs-tag-title", className="tag-title"),
            dcc.Input(
                id="runs-tag-input",
                type="text",
                value="",
                placeholder="tags, separated by commas",
                className="tag-input",
            ),
            html.Button("save tags", id="runs-tag-save", n_clicks=0, className="primary"),
            html.Button("cancel", id="runs-tag-cancel", n_clicks=0),
        ],
        id="runs-tag-editor",
        className="controls tag-editor",
        hidden=True,
    )


def typed_tags(text: object) -> list[str]:
    """The tags typed in the editor: comma-separated, trimmed, each once.

    >>> typed_tags(" 32b, ablation,,32b ")
    ['32b', 'ablation']
    """
    parts = text.split(",") if isinstance(text, str) else []
    return list(dict.fromkeys(p.strip() for p in parts if p.strip()))


def change_tags(
    data: TagEditing,
    who: Principal,
    trigger: TriggerId,
    click: bool,
    editing: object,
    typed: object,
    changed: object,
) -> TagChange | None:
    """What a click on a tag control does (``trigger``: its id): a run's "edit tags" opens
    the editor on its tags, a tag's × takes it off the run, *save tags* (or Enter) replaces
    the tags of the run being edited (``editing``) with those ``typed``, *cancel* closes
    the editor. A change counts one up in ``changed`` (the table refreshes on it). Refused,
    with the reason: a viewer without an admin token, a run outside the project, tags the
    service refuses. None without a real ``click``."""
    keep = dash.no_update
    if trigger is None or not click:
        return None
    if trigger == "runs-tag-cancel":
        return None, None, keep, True, "", ""
    if not who.can("admin"):
        return keep, _error(ADMIN_ONLY), keep, keep, keep, keep
    kind = trigger.get("type") if isinstance(trigger, Mapping) else trigger
    run_id = trigger.get("run") if isinstance(trigger, Mapping) else editing
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        return keep, _error("Pick a run's tags to edit first."), keep, keep, keep, keep
    try:
        if kind == "run-tag-edit":
            run = data.run(who, run_id)
            title = f"Tags of {run.name}"
            return run.id, None, keep, False, ", ".join(run.tags), title
        if kind == "run-tag-remove":
            tag = trigger.get("tag") if isinstance(trigger, Mapping) else None
            if not isinstance(tag, str):
                return None
            run = data.remove_tag(who, run_id, tag)
            text = ", ".join(run.tags) if editing == run.id else keep
            return (
                keep,
                _ok(f"Removed tag {tag} from {run.name}."),
                _next(changed),
                keep,
                text,
                keep,
            )
        if kind in ("runs-tag-save", "runs-tag-input"):
            run = data.set_tags(who, run_id, typed_tags(typed))
            now = ", ".join(run.tags) or "none"
            return None, _ok(f"Tags of {run.name}: {now}."), _next(changed), True, "", ""
    except RunNotFound:
        return keep, _error(f"No run {run_id} in your project."), keep, keep, keep, keep
    except Refusal as exc:
        return keep, _error(f"{said(exc)}."), keep, keep, keep, keep
    return None


def _error(message: str) -> html.Span:
    return html.Span(message, className="error")


def _ok(message: str) -> html.Span:
    return html.Span(message, className="ok")


def _next(changed: object) -> int:
    return (changed if isinstance(changed, int) and not isinstance(changed, bool) else 0) + 1
