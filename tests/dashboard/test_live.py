"""A run page's live channel (``WS /runs/{run_id}/live``) against a real server on Postgres:
"changed" for each batch and event of the run, refused without a session, from another site,
for another project's run exactly as for a missing one, and 503 with Retry-After beyond the
worker's bound; closed 1012 when the server shuts down."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from starlette.websockets import WebSocket
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from normwatch.dashboard.live import MIN_GAP_S, forward
from normwatch.server.workers.live import Watch
from normwatch.testing import ServerProcess, start_server
from tests.helpers.api import client_for, create_run, post_metrics
from tests.helpers.coroutines import run_async
from tests.helpers.tenants import make_tenant


def session_cookie(server: ServerProcess, token: str) -> str:
    answer = httpx.get(f"{server.url}/login", params={"token": token}, timeout=30)
    assert answer.status_code == 303, answer.text
    return answer.cookies["normwatch_session"]


def channel(
    server: ServerProcess, run_id: str, cookie: str | None, origin: str | None = None
) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + f"/runs/{run_id}/live"
    headers = {"Cookie": f"normwatch_session={cookie}"} if cookie else {}
    return connect(
        url, origin=Origin(origin or server.url), additional_headers=headers, open_timeout=10
    )


def refused(server: ServerProcess, run_id: str, cookie: str | None, **kw: Any) -> httpx.Response:
    """The HTTP answer that refused the handshake."""
    with pytest.raises(InvalidStatus) as caught, channel(server, run_id, cookie, **kw):
        pass
    answer = caught.value.response
    refusal = httpx.Response(answer.status_code, headers=list(answer.headers.raw_items()))
    refusal._content = answer.body or b""
    return refusal


def test_the_channel_says_changed_for_batches_and_events(pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    cookie = session_cookie(pg_server, tenant.read)
    with client_for(pg_server, tenant, "ingest") as api:
        run = create_run(api, name="watched", start_step=0)
        with channel(pg_server, run, cookie) as live:
            post_metrics(api, run, [0, 1], loss=[1.0, 0.9])
            assert live.recv(timeout=5) == "changed"
            answer = api.post(f"/api/v1/runs/{run}/events", json={"step": 1, "text": "note"})
            assert answer.status_code == 201
            assert live.recv(timeout=5) == "changed"
            with pytest.raises(TimeoutError):
                live.recv(timeout=1.5)  # nothing more happened: nothing more is said


def test_the_channel_refuses_what_the_page_would_not_show(pg_server: ServerProcess) -> None:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    cookie = session_cookie(pg_server, mine.read)
    with client_for(pg_server, theirs, "ingest") as api:
        their_run = create_run(api, name="theirs", start_step=0)
    with client_for(pg_server, mine, "ingest") as api:
        my_run = create_run(api, name="mine", start_step=0)

    other, missing = refused(pg_server, their_run, cookie), refused(pg_server, "0" * 32, cookie)
    # Another project's run looks exactly like a run that does not exist.
    assert (other.status_code, other.json()) == (missing.status_code, missing.json())
    assert other.status_code == 404
    assert refused(pg_server, my_run, None).status_code == 403  # no session
    assert refused(pg_server, my_run, "forged").status_code == 403
    elsewhere = refused(pg_server, my_run, cookie, origin="http://evil.example")
    assert elsewhere.status_code == 403
    assert "cross-site" in elsewhere.json()["detail"]


def test_a_full_worker_answers_503_and_shutdown_closes_1012(
    pg_server: ServerProcess, tmp_path: Path
) -> None:
    server = start_server(pg_server.database_url, tmp_path, NORMWATCH_LIVE_MAX_WATCHES="1")
    try:
        tenant = make_tenant(server.database_url)
        cookie = session_cookie(server, tenant.read)
        with client_for(server, tenant, "ingest") as api:
            run = create_run(api, name="crowded", start_step=0)
        with channel(server, run, cookie) as live:
            full = refused(server, run, cookie)
            assert (full.status_code, full.headers["retry-after"]) == (503, "30")
            server.stop()
            with pytest.raises(ConnectionClosed) as closed:
                live.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
    finally:
        server.stop()


class PageSocket:
    """The server's end of a page's WebSocket, as `forward` uses it."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []
        self.closed: tuple[int, str] | None = None
        self.leaving = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.leaving.wait()
        return {"type": "websocket.disconnect", "code": 1001}

    async def send_text(self, text: str) -> None:
        self.sent.append((asyncio.get_running_loop().time(), text))

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


def test_forward_coalesces_changes_and_renews_the_channel() -> None:
    async def scenario() -> PageSocket:
        socket, watch = PageSocket(), Watch("r")
        task = asyncio.ensure_future(forward(cast(WebSocket, socket), watch, renew_s=1.0))
        for _ in range(5):  # five changes in a burst: one message now, one after the gap
            watch._wake()
            await asyncio.sleep(0.01)
        await asyncio.wait_for(task, 3)
        return socket

    socket = run_async(scenario())
    assert [text for _, text in socket.sent] == ["changed", "changed"]
    assert socket.sent[1][0] - socket.sent[0][0] >= MIN_GAP_S * 0.9
    assert socket.closed == (1000, "renew")


def test_forward_ends_when_the_page_goes() -> None:
    async def scenario() -> PageSocket:
        socket, watch = PageSocket(), Watch("r")
        task = asyncio.ensure_future(forward(cast(WebSocket, socket), watch))
        await asyncio.sleep(0.05)
        socket.leaving.set()
        await asyncio.wait_for(task, 3)
        watch._wake()
        return socket

    socket = run_async(scenario())
    assert (socket.sent, socket.closed) == ([], None)
