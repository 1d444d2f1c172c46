"""Callback requests checked before Dash sees them, so a malformed one is a 400.

Dash answers every exception raised while it serves ``POST /_dash-update-component`` with a
500 of its own, whether the request named no callback of this app, carried the wrong
number of inputs, or a callback failed; and it logs none of them. A browser sends what the
page's callbacks declare, so a request that does not fit is crafted or stale (a page served
by an older version of the app): `CallbackCheck` answers it 400 saying what does not fit,
and what is left for Dash to fail on is a bug, which `CallbackErrors` logs with the id its
500 carries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from dash.exceptions import PreventUpdate
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from normwatch.server.api.errors import internal_error

__all__ = ["MAX_CALLBACK_BYTES", "CallbackCheck", "CallbackErrors", "callback_problem"]

PATH = "/_dash-update-component"
MAX_CALLBACK_BYTES = 1 << 20
"""The largest callback request read (the app's own bound on such bodies)."""


def _declared_id(spec: Mapping[str, Any]) -> str | dict[str, Any]:
    """A declared input's id: a string, or a pattern id (declared as its JSON text)."""
    component = spec.get("id")
    if isinstance(component, str) and component.startswith("{"):
        found: dict[str, Any] = json.loads(component)
        return found
    return str(component)


def _fits(declared: Mapping[str, Any], sent: object) -> bool:
    """Whether ``sent`` is what a browser sends for the ``declared`` input or state."""
    component, prop = _declared_id(declared), declared.get("property")
    if isinstance(component, dict):  # a pattern: a list of the matching components
        return isinstance(sent, list) and all(
            isinstance(item, dict)
            and isinstance(item.get("id"), dict)
            and item.get("property") == prop
            for item in sent
        )
    return isinstance(sent, dict) and sent.get("id") == component and sent.get("property") == prop


def callback_problem(body: object, callbacks: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What in a callback request's JSON ``body`` fits none of ``callbacks`` (Dash's
    callback map), or None when it fits."""
    if not isinstance(body, dict):
        return "a callback request is a JSON object"
    output = body.get("output")
    if not isinstance(output, str):
        return "output: the callback's output, a string"
    callback = callbacks.get(output)
    if callback is None:
        return "output: no callback of this dashboard has that output"
    if not isinstance(body.get("outputs"), dict | list):
        return "outputs: an object or a list"
    for part in ("inputs", "state"):
        declared: Sequence[Mapping[str, Any]] = callback.get(part) or []
        sent = body.get(part, [])
        if not isinstance(sent, list) or len(sent) != len(declared):
            return f"{part}: this callback takes {len(declared)}"
        for index, (spec, item) in enumerate(zip(declared, sent, strict=True)):
            if not _fits(spec, item):
                return f"{part}[{index}]: not the declared {spec.get('id')}.{spec.get('property')}"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        return "changedPropIds: a list of strings"
    return None


class CallbackCheck:
    """Pure ASGI middleware: a callback request that `callback_problem` finds fault with is
    answered 400 naming the fault; any other goes on with its body as it came.

    ``callbacks`` gives Dash's callback map once Dash has finished its setup (it merges the
    callbacks then; see `dash_internals.finish_setup`).
    """

    def __init__(self, app: ASGIApp, callbacks: Callable[[], Mapping[str, Any]]) -> None:
        self.app = app
        self.callbacks = callbacks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        kind = Headers(scope=scope).get("content-type", "")
        if not is_json(kind):
            # Dash reads only a JSON body; anything else would fail inside it, a 500.
            said = f"'{kind[:100]}'" if kind else "none"
            detail = f"a callback request is JSON (Content-Type: application/json), got {said}"
            await _refuse(send, 400, detail)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_CALLBACK_BYTES:
                await _refuse(
                    send, 413, f"a callback request is at most {MAX_CALLBACK_BYTES} bytes"
                )
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            problem = callback_problem(orjson.loads(body), self.callbacks())
        except orjson.JSONDecodeError:
            problem = "the body is not JSON"
        if problem is not None:
            await _refuse(send, 400, problem)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def is_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON: ``application/json``, with parameters or not.

    >>> is_json("application/json; charset=utf-8"), is_json("text/plain"), is_json("")
    (True, False, False)
    """
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


async def _refuse(send: Send, status: int, detail: str) -> None:
    content = orjson.dumps({"detail": detail})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(content)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": content})


class CallbackErrors:
    """Pure ASGI middleware, inside Dash's own: a callback that raises (a bug; `PreventUpdate`
    aside, which Dash answers 204) is logged with an id and answered 500 with that id, the
    way the API answers its failures, instead of Dash's anonymous, unlogged 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        answered = False

        async def send_tracked(message: Message) -> None:
            nonlocal answered
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except PreventUpdate:
            raise
        except Exception as exc:
            if answered:
                raise
            response = internal_error(Request(scope), exc)
            await response(scope, receive, send)
