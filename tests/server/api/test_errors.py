"""A failure no handler takes is a logged 500 with an error id, on a connection the server
keeps: requests a client sends after it on the same keep-alive connection are answered.

The service runs in uvicorn in a thread of this process, so that the test can give it a route
that fails (the service has none on purpose); requests go over a raw socket, which shows
whether the server closed the connection.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import pytest
import uvicorn
from fastapi import FastAPI

from normwatch.server.app import create_app
from normwatch.server.config import Settings
from normwatch.testing import free_port


@contextmanager
def served(app: FastAPI) -> Iterator[int]:
    """``app`` on a free loopback port, in a thread of this process; its port."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


def answer(conn: socket.socket, pending: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer read off ``conn`` (``pending`` holds bytes read past it)."""
    while b"\r\n\r\n" not in pending:
        chunk = conn.recv(65536)
        assert chunk, "the server closed the connection"
        pending += chunk
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    size = int(headers["content-length"])
    while len(rest) < size:
        chunk = conn.recv(65536)
        assert chunk, "the server closed the connection"
        rest += chunk
    pending[:] = rest[size:]
    return int(lines[0].split()[1]), headers, rest[:size]


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode()


def test_a_500_keeps_the_keep_alive_connection(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings(database_url=pg_url), dashboard=False)

    def failing() -> None:
        raise ZeroDivisionError("a bug")

    app.add_api_route("/failing", failing)
    with served(app) as port, socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        pending = bytearray()
        conn.sendall(get("/healthz"))
        assert answer(conn, pending)[0] == 200
        with caplog.at_level(logging.ERROR, logger="normwatch"):
            conn.sendall(get("/failing"))
            status, headers, body = answer(conn, pending)
        assert status == 500 and headers.get("connection") != "close"
        error_id = orjson.loads(body)["error_id"]
        assert orjson.loads(body) == {"detail": "internal error", "error_id": error_id}
        [record] = [r for r in caplog.records if error_id in r.getMessage()]
        assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
        # The same connection answers on, pipelined requests too.
        conn.sendall(get("/healthz") + get("/failing") + get("/healthz"))
        assert [answer(conn, pending)[0] for _ in range(3)] == [200, 500, 200]
        conn.sendall(get("/metrics"))
        status, _, scraped = answer(conn, pending)
    assert status == 200
    counted = [
        line
        for line in scraped.decode().splitlines()
        if line.startswith("normwatch_http_request_duration_seconds_count")
        and 'route="/failing"' in line
    ]
    assert counted and all('status="5xx"' in line for line in counted)
    assert sum(float(line.rsplit(" ", 1)[1]) for line in counted) == 2
