"""A webhook receiver on 127.0.0.1: the one every test that needs a receiver uses.

It records every POST (path, headers, body, when it arrived and the status it was answered
with) and answers each with a `Reply`: the one set for its path, else the default; the
first ``fail_first`` requests, and any before ``healthy_at``, get ``failure`` instead.

>>> with WebhookReceiver(fail_first=2) as receiver:  # doctest: +SKIP
...     deliver_to(receiver.url("/hook"))
...     [payload] = receiver.wait_for(1)

A receiver made but not started refuses connections at its URL: an endpoint that is down.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from normwatch.testing import free_port

__all__ = ["Received", "Reply", "WebhookReceiver"]


@dataclass(frozen=True)
class Reply:
    """How to answer a request: status, headers and body, each part possibly late."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay_s: float = 0.0
    """Wait before the status line (a slow receiver: the sender's timeout)."""
    body_delay_s: float = 0.0
    """Wait between the headers and the body (a status that arrived, a body that stalls)."""


@dataclass(frozen=True)
class Received:
    """One POST as it arrived, and the status it was answered with."""

    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes
    at: float
    """``time.monotonic()`` when the body had been read."""
    status: int
    answered: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    """Set once the whole answer was written."""

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that records every POST and answers as configured."""

    def __init__(
        self,
        port: int | None = None,
        *,
        reply: Reply | None = None,
        fail_first: int = 0,
        healthy_at: float = 0.0,
        failure: Reply | None = None,
    ) -> None:
        self.port = port or free_port()
        self.reply = reply or Reply()
        self.replies: dict[str, Reply] = {}
        """Replies by request path, over the default ``reply``."""
        self.fail_first = fail_first
        self.healthy_at = healthy_at
        """A ``time.monotonic()`` value: every request before it gets ``failure``."""
        self.failure = failure or Reply(500, body=b"")
        self.received: list[Received] = []
        self._release = threading.Event()  # ends a slow reply's wait at stop()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        self._release.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None

    def __enter__(self) -> WebhookReceiver:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def delivered(self) -> list[Received]:
        """The requests answered with a 2xx status (the whole answer written), in the order
        they arrived."""
        return [r for r in self.received if 200 <= r.status < 300 and r.answered.is_set()]

    def payloads(self) -> list[Any]:
        """The JSON bodies of the delivered requests."""
        return [r.json() for r in self.delivered]

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Any]:
        """Until ``count`` requests were delivered (or ``timeout`` passed): `payloads`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.delivered) < count:
            time.sleep(0.02)
        return self.payloads()

    def wait_for_requests(self, count: int, timeout: float = 15.0) -> list[Received]:
        """Until ``count`` requests arrived, whatever they were answered (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.received) < count:
            time.sleep(0.02)
        return list(self.received)

    def _choose(self, path: str) -> Reply:
        if self.fail_first > 0 or time.monotonic() < self.healthy_at:
            self.fail_first = max(0, self.fail_first - 1)
            return self.failure
        return self.replies.get(path, self.reply)

    def _wait(self, seconds: float) -> None:
        self._release.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, receiver: WebhookReceiver) -> None:
        self.receiver = receiver
        super().__init__(("127.0.0.1", receiver.port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a sender that timed out and hung up is expected here


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        arrived = time.monotonic()
        reply = receiver._choose(self.path)
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Received(self.path, headers, body, arrived, reply.status)
        receiver.received.append(request)
        if reply.delay_s:
            receiver._wait(reply.delay_s)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if reply.body_delay_s:
            self.wfile.flush()
            receiver._wait(reply.body_delay_s)
        self.wfile.write(reply.body)
        self.wfile.flush()
        request.answered.set()

    def log_message(self, format: str, *args: Any) -> None:
        pass
