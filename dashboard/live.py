"""A run page's live channel: a WebSocket on which the server says when the run changed.

``WS /runs/{run_id}/live`` is opened by the run page's script (`.pages.run_live.LIVE_JS`)
with the dashboard's session cookie, which `.session.SessionMiddleware` checks before this
runs (no session: refused, 403). The handshake is then refused

- 403 when a browser sent it from another site (`.security.sent_from_elsewhere`);
- 404 for a run of another project, exactly as for a run that does not exist;
- 503 with ``Retry-After`` when this worker has ``NORMWATCH_LIVE_MAX_WATCHES`` channels open
  (the page then keeps polling, as it does without a channel).

Once open, the server sends the text ``changed`` whenever the run changed
(`normwatch.server.workers.live.RunChanges`: at once for what this worker stored, within a
second for what another did), at most once every `MIN_GAP_S`; what changed, the page reads
through its tick callback as ever. Nothing the page sends is read. After `RENEW_S` the
server closes the channel (1000, ``renew``) and the page opens another. A WebSocket, not
server-sent events: a browser keeps at most six HTTP/1.1 connections to a host, and a
seventh tab holding an event stream would wait for one, while WebSockets have a pool of
their own. When the server shuts down it closes the channel (1012) and the page reconnects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from fastapi import FastAPI
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from normwatch.server.auth import Principal
from normwatch.server.schemas import RunOut
from normwatch.server.workers.live import RunChanges, Watch, WatchesFull

from .refusals import NO_SUCH_RUN, RunNotFound
from .security import sent_from_elsewhere
from .session import viewer
from .wiring import in_thread

__all__ = ["LIVE_PATH", "MIN_GAP_S", "RENEW_S", "RETRY_AFTER_S", "forward", "install_live"]

LIVE_PATH = "/runs/{run_id}/live"
MIN_GAP_S = 0.25
"""The least time between two messages to one page: changes in between make one message."""
RETRY_AFTER_S = 30
"""What a refused page is told to wait before it asks again when the worker is full."""
RENEW_S = 300.0
"""A channel is closed (1000, ``renew``) after this long, and the page opens another at once:
the handshake checks the session again (one revoked meanwhile is refused), and pages spread
over the workers a scale-up added."""


class LiveReads(Protocol):
    """What the channel reads: the run, for the viewer (`RunNotFound` outside its project)."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...


def install_live(
    server: FastAPI, data: LiveReads, changes: RunChanges, trusted_origins: Iterable[str] = ()
) -> None:
    """Add the live channel's route to ``server`` (whose session middleware guards it)."""
    trusted = frozenset(trusted_origins)

    async def live(websocket: WebSocket, run_id: str) -> None:
        reason = sent_from_elsewhere(websocket.scope, trusted)
        if reason is not None:
            await _refuse(websocket, 403, f"cross-site request refused: {reason}")
            return
        try:
            await in_thread(data.run, viewer(), run_id)
        except RunNotFound:
            await _refuse(websocket, 404, NO_SUCH_RUN)
            return
        try:
            async with changes.watch(run_id) as watch:
                await websocket.accept()
                await forward(websocket, watch)
        except WatchesFull:
            await _refuse(websocket, 503, "too many live pages; polling instead", RETRY_AFTER_S)

    server.add_api_websocket_route(LIVE_PATH, live)


async def _refuse(websocket: WebSocket, status: int, detail: str, retry_after: int = 0) -> None:
    headers = {"Retry-After": str(retry_after)} if retry_after else None
    await websocket.send_denial_response(JSONResponse({"detail": detail}, status, headers))


async def forward(websocket: WebSocket, watch: Watch, renew_s: float = RENEW_S) -> None:
    """Send ``changed`` for each change of the watched run until the page goes away, or
    until ``renew_s`` have passed (then close, 1000 ``renew``)."""
    loop = asyncio.get_running_loop()
    renew_at = loop.time() + renew_s
    closed = asyncio.ensure_future(_until_closed(websocket))
    try:
        while True:
            change = asyncio.ensure_future(watch.changed())
            await asyncio.wait(
                {closed, change},
                timeout=max(0.0, renew_at - loop.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if closed.done():
                change.cancel()
                return
            if not change.done():
                change.cancel()
                await websocket.close(1000, "renew")
                return
            try:
                await websocket.send_text("changed")
            except WebSocketDisconnect:
                return
            await asyncio.wait({closed}, timeout=MIN_GAP_S)
    finally:
        closed.cancel()


async def _until_closed(websocket: WebSocket) -> None:
    try:
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass
    except (WebSocketDisconnect, RuntimeError):  # gone without a goodbye
        return
