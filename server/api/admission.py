"""Who goes when in a worker: admission slots, and interactive requests ahead of batches.

**Admission** (:class:`Admission`, an ASGI middleware, and its :class:`Slots`) bounds the
requests in progress in a worker, in two kinds that never take each other's places:
metric batches (``NORMWATCH_INGEST_CONCURRENCY``) and everything else that may touch the
database (``NORMWATCH_READ_CONCURRENCY``: API reads and writes, dashboard pages and
callbacks, scrapes). A request that finds its kind's slots all taken waits in line for
one (``NORMWATCH_INGEST_WAIT_S`` / ``NORMWATCH_READ_WAIT_S``) and is then answered 503 with
``Retry-After``; when too many already wait (``NORMWATCH_ADMISSION_QUEUE``) it is answered
at once. Admission happens before anything else, authentication included, and before the
body is read, so a waiting request costs a connection, not memory, and the database pool
(larger than both kinds together, see `docs/operations.md`) is never exhausted by a
burst: each admitted request holds at most one pooled connection at a time.

``/healthz`` and static files are not admitted: they never queue behind a burst
(``/healthz`` checks the database on a connection of its own, see `DatabaseProbe`).

**A fair share of reads.** One caller (one token, one dashboard session, or one address
sending neither) holds at most ``NORMWATCH_READ_PER_CALLER`` read slots at once
(:class:`CallerShares`); its further requests wait in a line of their own, for one of its own
slots, and are answered 503 after the same wait. So a caller sending many expensive reads at
once slows only itself: the other slots stay free for everyone else.

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
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Literal

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..telemetry import INGEST_ROUTE

__all__ = [
    "Admission",
    "Busy",
    "CallerShares",
    "InteractiveRequests",
    "ReadsFirst",
    "Slots",
    "caller_of",
    "is_batch",
]

Kind = Literal["ingest", "read"]

UNADMITTED_PREFIXES = (
    "/healthz",
    "/_dash-component-suites/",
    "/assets/",
    "/_favicon.ico",
)
"""Paths served without a slot: the health check and static files, none of which queue
behind a burst or take a pooled connection."""


class Busy(Exception):
    """Every slot stayed taken for the whole wait, or the line was full."""


class Slots:
    """At most ``capacity`` requests of one kind in progress; others wait in line (first
    come, first served) up to ``wait_s``, at most ``queue_limit`` of them.

    Used from one event loop (a worker's); a slot freed goes straight to the first in line.
    """

    def __init__(self, capacity: int, wait_s: float, queue_limit: int = 512) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.wait_s = wait_s
        self.queue_limit = queue_limit
        self.in_flight = 0
        self._line: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._line)

    async def acquire(self) -> bool:
        """Take a slot, waiting in line for one if need be; False if none came in time."""
        if self.in_flight < self.capacity and not self._line:
            self.in_flight += 1
            return True
        if len(self._line) >= self.queue_limit or self.wait_s <= 0:
            return False
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._line.append(turn)
        try:
            await asyncio.wait((turn,), timeout=self.wait_s)
        except BaseException:  # cancelled (the client left): give back what it was given
            self._leave_line(turn)
            raise
        if turn.done():
            return True  # a slot was handed over: in_flight already counts it
        self._leave_line(turn)
        return False

    def release(self) -> None:
        """Give a slot back: to the first in line, if anyone waits."""
        while self._line:
            turn = self._line.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.in_flight -= 1

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the block; raises `Busy` when none came in time."""
        if not await self.acquire():
            raise Busy
        try:
            yield
        finally:
            self.release()

    def _leave_line(self, turn: asyncio.Future[None]) -> None:
        if turn.done() and not turn.cancelled():
            self.release()  # handed over just as the wait ended: pass it on
            return
        turn.cancel()
        with contextlib.suppress(ValueError):
            self._line.remove(turn)


class CallerShares:
    """At most ``per_caller`` read slots for each caller at once: each caller's own `Slots`,
    made when it first asks and dropped when it holds and awaits none. Used from one event
    loop (a worker's).

    A caller is told by what it authenticates with, before anything is checked (admission
    comes first): its ``Authorization`` header, else its ``Cookie`` header, else its address.
    Only a hash of that is kept.
    """

    def __init__(self, per_caller: int, wait_s: float, queue_limit: int = 512) -> None:
        if per_caller < 1:
            raise ValueError(f"per_caller must be at least 1, got {per_caller}")
        self.per_caller = per_caller
        self.wait_s = wait_s
        self.queue_limit = queue_limit
        self._callers: dict[int, Slots] = {}

    def __len__(self) -> int:
        """Callers holding or awaiting a slot now."""
        return len(self._callers)

    @contextlib.asynccontextmanager
    async def share(self, scope: Scope) -> AsyncIterator[None]:
        """Hold one of the caller's slots for the block; raises `Busy` when none came in
        time."""
        caller = caller_of(scope)
        slots = self._callers.get(caller)
        if slots is None:
            slots = self._callers[caller] = Slots(self.per_caller, self.wait_s, self.queue_limit)
        try:
            async with slots.slot():
                yield
        finally:
            if slots.in_flight == 0 and slots.waiting == 0:
                self._callers.pop(caller, None)


def caller_of(scope: Scope) -> int:
    """Who sends a request, as `CallerShares` tells callers apart (a hash)."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in (b"authorization", b"cookie"):
            found[name] = value
    if b"authorization" in found:
        return hash((b"authorization", found[b"authorization"]))
    if b"cookie" in found:
        return hash((b"cookie", found[b"cookie"]))
    client = scope.get("client")
    return hash(("address", client[0] if client else None))


class Admission:
    """Pure ASGI middleware: each HTTP request takes a slot of its kind first (see above),
    and a read first one of its caller's ``shares`` when given.

    ``refused(kind)`` is called for every request answered 503 here.
    """

    def __init__(
        self,
        app: ASGIApp,
        ingest: Slots,
        reads: Slots,
        refused: Callable[[Kind], None] | None = None,
        shares: CallerShares | None = None,
    ) -> None:
        self.app = app
        self.slots: dict[Kind, Slots] = {"ingest": ingest, "read": reads}
        self.refused = refused
        self.shares = shares

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(UNADMITTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        kind: Kind = "ingest" if is_batch(scope) else "read"
        if kind == "read" and self.shares is not None:
            try:
                async with self.shares.share(scope):
                    await self._admitted(kind, scope, receive, send)
            except Busy:
                await self._refuse(kind, send)
            return
        await self._admitted(kind, scope, receive, send)

    async def _admitted(self, kind: Kind, scope: Scope, receive: Receive, send: Send) -> None:
        slots = self.slots[kind]
        if not await slots.acquire():
            await self._refuse(kind, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            slots.release()

    async def _refuse(self, kind: Kind, send: Send) -> None:
        if self.refused is not None:
            self.refused(kind)
        await _busy(send, kind)


async def _busy(send: Send, kind: Kind) -> None:
    what = "ingest" if kind == "ingest" else "this worker"
    body = orjson.dumps({"detail": f"{what} is at capacity; retry shortly"})
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ReadsFirst:
    """How many interactive requests run in this process; batches wait for them. Small
    batches (a trainer's latest steps, which an alert may hang on) go ahead of large ones
    the same way: a large batch also waits while a small one is in progress, a small one
    waits only for interactive requests."""

    def __init__(self, max_wait_s: float = 0.1) -> None:
        self.max_wait_s = max_wait_s
        self._active = 0
        self._small = 0
        self._idle = threading.Condition(threading.Lock())

    @property
    def active(self) -> int:
        return self._active

    @property
    def small(self) -> int:
        """Small batches (and outgoing notifications) in progress."""
        return self._small

    def enter_small(self) -> None:
        """A small batch (or a notification on its way out) starts its work."""
        with self._idle:
            self._small += 1

    def leave_small(self) -> None:
        """Each `enter_small` is left once."""
        with self._idle:
            self._small -= 1
            if self._small == 0 and self._active == 0:
                self._idle.notify_all()

    @contextlib.contextmanager
    def small_batch(self) -> Iterator[None]:
        """Mark a small batch in progress for the block's duration."""
        self.enter_small()
        try:
            yield
        finally:
            self.leave_small()

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

    def wait_turn(self, *, small: bool = False) -> float:
        """Block until no interactive request runs and, unless ``small`` (the caller is a
        small batch), no small batch either (at most ``max_wait_s``); seconds waited."""
        if self._active == 0 and (small or self._small == 0):  # the common case: no lock
            return 0.0
        start = time.perf_counter()
        with self._idle:
            self._idle.wait_for(
                lambda: self._active == 0 and (small or self._small == 0), self.max_wait_s
            )
        return time.perf_counter() - start


class InteractiveRequests:
    """Pure ASGI middleware: every HTTP request but a metric batch is interactive while the
    service works on it, and a metric batch of at most ``small_batch_bytes`` (its declared
    ``Content-Length``) is a small batch then (see :class:`ReadsFirst`); such a batch's
    scope says so (``scope["state"]["small_batch"]``).

    That is from the end of its body (at once for a request without one) to the start of
    its answer, so a client that uploads slowly, or reads the answer slowly, holds no batch
    back: the service is not working on it then.
    """

    def __init__(self, app: ASGIApp, reads_first: ReadsFirst, small_batch_bytes: int = 0) -> None:
        self.app = app
        self.reads_first = reads_first
        self.small_batch_bytes = small_batch_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        gate = self.reads_first
        enter, leave = gate.enter, gate.leave
        if is_batch(scope):
            length = _content_length(scope)
            if length is None or length > self.small_batch_bytes:
                await self.app(scope, receive, send)
                return
            scope.setdefault("state", {})["small_batch"] = True
            enter, leave = gate.enter_small, gate.leave_small
        working = False
        done = False

        def begin() -> None:
            nonlocal working
            if not working and not done:
                working = True
                enter()

        def end() -> None:
            nonlocal working, done
            done = True
            if working:
                working = False
                leave()

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


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None when not declared (or not a number)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() else None
    return None


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


def is_batch(scope: Scope) -> bool:
    """A POST of a metric batch (the ingest route), told from the raw path."""
    # Routing has not happened yet: match the ingest route's shape on the raw path.
    if scope["method"] != "POST":
        return False
    path: str = scope["path"]
    if not (path.startswith(_BATCH_PREFIX) and path.endswith(_BATCH_SUFFIX)):
        return False
    run_id = path[len(_BATCH_PREFIX) : len(path) - len(_BATCH_SUFFIX)]
    return bool(run_id) and "/" not in run_id


_BATCH_PREFIX, _, _BATCH_SUFFIX = INGEST_ROUTE.partition("{run_id}")
