"""What the run page's panel buttons change: the project's layout after a pin, a hide, a
move, a fold or an expression added, saved for the project (`..workspace.WorkspaceData`);
and the run's metric names, read again once the run logs a metric the page has no panel
of."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from normwatch.server.auth import Principal
from normwatch.server.errors import Forbidden

from ..panels import (
    Layout,
    arrange,
    layout_of,
    moved,
    pinned,
    with_expression,
    with_folded,
    without_expression,
)
from ..panels import with_hidden as hidden_in
from ..refusals import Refusal, said
from .run_panels_draw import PanelReads
from .run_view import RunView

__all__ = ["NOT_SAVED", "WorkspaceReads", "change_layout", "names_of", "new_names"]

NOT_SAVED = "Shown on this page until it is reloaded: {why}."


class WorkspaceReads(PanelReads, Protocol):
    """What the panels section reads and saves."""

    def workspace(self, who: Principal) -> Layout: ...

    def save_workspace(self, who: Principal, layout: Layout) -> Layout: ...


def change_layout(
    data: WorkspaceReads,
    who: Principal,
    store: object,
    names: object,
    *,
    act: str | None,
    key: object,
    expression: object = None,
) -> tuple[dict[str, Any], str] | None:
    """The layout after a panel's button (``act`` on ``key``: up, down, pin, unpin, hide,
    show, remove an expression panel), a group folded or opened (``fold`` on the group's
    name) or an expression added (``act`` "add"), saved for the project, and the note
    beside the panels; None when nothing changes. A layout the viewer may not save is kept
    on the page with the note saying why; one the service refuses is dropped, and the note
    says why."""
    layout = layout_of(store)
    run_names = names_of(names)
    if act == "add":
        if not isinstance(expression, str) or not expression.strip():
            return None
        try:
            new = with_expression(layout, expression.strip())
        except ValidationError as exc:
            return layout.model_dump(), f"Not added: {exc.errors()[0]['msg']}"
    elif isinstance(key, str) and act in ("up", "down"):
        groups, _ = arrange(run_names, layout)
        new = moved(layout, groups, key, -1 if act == "up" else 1)
    elif isinstance(key, str) and act in ("pin", "unpin"):
        new = pinned(layout, key, act == "pin")
    elif isinstance(key, str) and act in ("hide", "show"):
        new = hidden_in(layout, key, act == "hide")
    elif isinstance(key, str) and act == "remove":
        new = without_expression(layout, key)
    elif isinstance(key, str) and act == "fold":
        new = with_folded(layout, key)
    else:
        return None
    if new == layout:
        return None
    try:
        saved = data.save_workspace(who, new)
    except Forbidden as exc:
        return new.model_dump(), NOT_SAVED.format(why=said(exc))
    except Refusal as exc:
        return layout.model_dump(), f"Not saved: {said(exc)}"
    return saved.model_dump(), ""


def new_names(
    data: WorkspaceReads, who: Principal, view: RunView | None, ticks: object, names: object
) -> dict[str, Any] | None:
    """The ``panel-names`` store once the run logged a metric the page has no panel of
    (read only when the page's tick saw new data since, ``ticks``'s ``draw`` version);
    None when it has every one."""
    version = ticks.get("draw") if isinstance(ticks, Mapping) else None
    before = names if isinstance(names, dict) else {}
    if view is None or version is None or before.get("version") == version:
        return None
    try:
        metrics = [m.name for m in data.metrics(who, view.run)]
    except Refusal:
        return None
    shown = before.get("names")
    if isinstance(shown, list) and set(metrics) <= set(shown):
        return {"names": shown, "version": version}
    return {"names": metrics, "version": version}


def names_of(store: object) -> list[str]:
    """The run's metric names a ``panel-names`` store holds (or a list of them)."""
    names = store.get("names") if isinstance(store, dict) else store
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
