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

__all__ = ["TriggerId", "clicked", "in_thread", "or_prevent", "triggered_id"]

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
