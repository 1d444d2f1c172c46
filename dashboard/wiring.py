"""What page modules use to wire their plain callback functions to Dash.

A page's callbacks are module-level functions of plain arguments (the viewer, the data,
the values of the callback's inputs); its ``register`` wraps each in an ``async`` callback
that reads what only Dash knows (the viewer of the request, which input fired), runs the
function in a worker thread (its reads block on the database, and Dash runs callbacks on
the event loop) and turns "nothing to change" into ``PreventUpdate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, ParamSpec, TypeVar

import anyio
from dash import ctx
from dash.exceptions import PreventUpdate

__all__ = [
    "ROW_CLICK_JS",
    "TriggerId",
    "clicked",
    "clicked_row",
    "in_thread",
    "or_prevent",
    "triggered_id",
]

P = ParamSpec("P")
T = TypeVar("T")

TriggerId = str | Mapping[str, Any] | None
"""The id of the component whose change ran a callback: a string, a pattern id's dict, or
None on a callback's first run."""


async def in_thread(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` in a worker thread, so the event loop keeps serving."""
    return await anyio.to_thread.run_sync(partial(function, *args, **kwargs))


def or_prevent(result: T | None) -> T:
    """``result``, or ``PreventUpdate`` for None: the functions' "nothing changes"."""
    if result is None:
        raise PreventUpdate
    return result


def triggered_id() -> TriggerId:
    """The id of the input that fired the running callback."""
    found: TriggerId = ctx.triggered_id
    return found


def clicked() -> bool:
    """Whether a real click fired the running callback, not a button appearing with 0 clicks."""
    return any(t.get("value") for t in ctx.triggered)


ROW_CLICK_JS = """
function() {
    const triggered = window.dash_clientside.callback_context.triggered || [];
    const hit = triggered.find(t => typeof t.value === "number" && t.value > 0);
    if (!hit) { return window.dash_clientside.no_update; }
    const id = hit.prop_id.slice(0, hit.prop_id.lastIndexOf("."));
    return {row: JSON.parse(id), clicks: hit.value};
}
"""
"""The browser side of a table's clickable rows (``n_clicks`` of a pattern id): a real click
goes into the table's click store as ``{"row": <the row's id>, "clicks": n}`` (`clicked_row`
reads it), and a table drawn anew, whose rows all appear with 0 clicks, sends nothing. A
server callback on the rows themselves was a round trip each time a table was drawn, at the
end of every page load and zoom."""


def clicked_row(store: object) -> tuple[TriggerId, bool]:
    """The row id a click store (`ROW_CLICK_JS`) holds, and whether it says a real click;
    ``(None, False)`` for anything else, as the store comes from the browser.

    >>> clicked_row({"row": {"type": "spike-row", "start": 5}, "clicks": 1})
    ({'type': 'spike-row', 'start': 5}, True)
    >>> clicked_row({"row": "spike-table", "clicks": 0}), clicked_row(None)
    (('spike-table', False), (None, False))
    """
    if not isinstance(store, Mapping):
        return None, False
    row = store.get("row")
    clicks = store.get("clicks")
    trigger: TriggerId = row if isinstance(row, str | Mapping) else None
    real = isinstance(clicks, int) and not isinstance(clicks, bool) and clicks > 0
    return trigger, real
