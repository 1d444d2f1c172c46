"""Who goes when in a worker: ingest slots, and interactive requests ahead of batches.

**Ingest slots** (:class:`IngestSlots`) bound the metric batches in progress in a worker; a
batch that finds them all taken waits a moment for one, then gets 503 with ``Retry-After``.

**Interactive first.** A worker shares one interpreter lock among the threads that handle
its requests. Under steady ingest several of them are busy parsing and storing metric
batches, and a chart read that arrives then gets the lock only in turns with each of them.
Batches are throughput work (a trainer's client sends in the background and never waits on
the answer); a chart, a run list or an alert page is someone waiting.

So every request that is not a metric batch is *interactive* while the service works on
it (:class:`InteractiveRequests`, an ASGI middleware), and a batch's handler calls
:meth:`ReadsFirst.wait_turn` between its stages (before parsing, before the database):
while an interactive request is in progress in this worker, the batch waits, without the
interpreter lock, until none is, or at most ``max_wait_s`` a stage, so that a slow page
never stalls ingest for longer than that. A batch already inside a stage finishes it.
When nothing interactive runs, ``wait_turn`` costs an attribute read.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .telemetry import INGEST_ROUTE

__all__ = ["IngestSlots", "InteractiveRequests", "ReadsFirst"]


class IngestSlots:
    """At most ``capacity`` metric batches in progress in this worker; a batch that finds them
    all taken waits up to ``wait_s`` for one, then gets 503 with ``Retry-After``.

    The wait rides out a stall of a fraction of a second (a checkpoint's fsync, a burst of
    batches) without turning it into errors that every trainer must retry, while a worker
    that stays overloaded still sheds load within ``wait_s``. A waiting request has not read
    its body yet, so waiting costs a connection, not memory.
    """

    def __init__(self, capacity: int, wait_s: float) -> None:
        self.capacity = capacity
        self.wait_s = wait_s
        self.in_flight = 0
        self._freed: asyncio.Condition | None = None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.in_flight >= self.capacity:
            if self._freed is None:
                self._freed = asyncio.Condition()
            async with self._freed:
                try:
                    await asyncio.wait_for(
                        self._freed.wait_for(lambda: self.in_flight < self.capacity),
                        self.wait_s,
                    )
                except TimeoutError:
                    raise HTTPException(
                        503, "ingest is at capacity; retry shortly", headers={"Retry-After": "1"}
                    ) from None
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if self._freed is not None:
                async with self._freed:
                    self._freed.notify()


class ReadsFirst:
    """How many interactive requests run in this process; batches wait for them."""

    def __init__(self, max_wait_s: float = 0.1) -> None:
        self.max_wait_s = max_wait_s
        self._active = 0
        self._idle = threading.Condition(threading.Lock())

    @property
    def active(self) -> int:
        return self._active

    def enter(self) -> None:
        """An interactive request starts its work."""
        with self._idle:
            self._active += 1

    def leave(self) -> None:
        """An interactive request has done its work (each `enter` is left once)."""
        with self._idle:
            self._active -= 1
            if self._active == 0:
                self._idle.notify_all()

    @contextlib.contextmanager
    def interactive(self) -> Iterator[None]:
        """Mark an interactive request in progress for the block's duration."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def wait_turn(self) -> float:
        """Block until no interactive request runs (at most ``max_wait_s``); seconds waited."""
        if self._active == 0:  # the common case: no lock taken
            return 0.0
        start = time.perf_counter()
        with self._idle:
            self._idle.wait_for(lambda: self._active == 0, self.max_wait_s)
        return time.perf_counter() - start


class InteractiveRequests:
    """Pure ASGI middleware: every HTTP request but a metric batch is interactive while the
    service works on it (see :class:`ReadsFirst`).

    That is from the end of its body (at once for a request without one) to the start of
    its answer, so a client that uploads slowly, or reads the answer slowly, holds no batch
    back: the service is not working on it then.
    """

    def __init__(self, app: ASGIApp, reads_first: ReadsFirst) -> None:
        self.app = app
        self.reads_first = reads_first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _is_batch(scope):
            await self.app(scope, receive, send)
            return
        gate = self.reads_first
        working = False
        done = False

        def begin() -> None:
            nonlocal working
            if not working and not done:
                working = True
                gate.enter()

        def end() -> None:
            nonlocal working, done
            done = True
            if working:
                working = False
                gate.leave()

        async def receive_marked() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                begin()
            elif message["type"] == "http.disconnect":
                end()
            return message

        async def send_marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                end()
            await send(message)

        if not _has_body(scope):
            begin()
        try:
            await self.app(scope, receive_marked, send_marked)
        finally:
            end()


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


def _is_batch(scope: Scope) -> bool:
    # Routing has not happened yet: match the ingest route's shape on the raw path.
    if scope["method"] != "POST":
        return False
    path: str = scope["path"]
    if not (path.startswith(_BATCH_PREFIX) and path.endswith(_BATCH_SUFFIX)):
        return False
    run_id = path[len(_BATCH_PREFIX) : len(path) - len(_BATCH_SUFFIX)]
    return bool(run_id) and "/" not in run_id


_BATCH_PREFIX, _, _BATCH_SUFFIX = INGEST_ROUTE.partition("{run_id}")
