"""Tells whoever watches a run (an open run page's live channel) that the run changed.

What this process stores, it says at once: the metric and event routes call
`RunChanges.changed` after their commit. What another process stored (another worker of
the service, ``normwatch sync``), it finds by polling: while any run is watched, one query
every `POLL_S` reads the watched runs' marks (`storage.runs.run_marks`: last step, segment,
status, last batch, events) and wakes the watches of those that moved. Several pages
watching one run share that read, however many there are. A change this process stored is
read into the marks before its watches are woken, so the poll does not tell it twice; of
two reads that cross, the later one started wins.

A watch only says "changed since you last looked"; what changed, the watcher reads as
ever. Watches live on the event loop; `RunChanges.changed` may be called from any thread.
At most ``max_watches`` are open at once in a process: `watch` raises `WatchesFull` beyond.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ..storage.runs import run_marks

__all__ = ["POLL_S", "RunChanges", "Watch", "WatchesFull"]

log = logging.getLogger("normwatch.live")

POLL_S = 1.0
"""How often the watched runs' marks are read, for changes other processes stored."""


class WatchesFull(Exception):
    """This process has as many watches open as it allows."""


class Watch:
    """One watcher's view of one run: `changed` returns once the run changed since the
    last time it returned (changes in between count once)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._event = asyncio.Event()

    async def changed(self) -> None:
        await self._event.wait()
        self._event.clear()

    def _wake(self) -> None:
        self._event.set()


class RunChanges:
    """The watches of this process, by run, and the poll that serves them."""

    def __init__(
        self, sessions: sessionmaker[Session], *, max_watches: int = 1000, poll_s: float = POLL_S
    ) -> None:
        self._sessions = sessions
        self.max_watches = max_watches
        self._poll_s = poll_s
        self._watches: dict[str, set[Watch]] = {}
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._poller: asyncio.Task[None] | None = None
        # By run: the number of the read its marks come from, and the marks.
        self._seen: dict[str, tuple[int, tuple[Any, ...]]] = {}
        self._reads = 0
        self._noting: set[asyncio.Task[None]] = set()

    @property
    def watching(self) -> int:
        """Watches open now."""
        return self._count

    def changed(self, run_id: str) -> None:
        """Wake the watches of ``run_id`` (none: nothing to do), once its marks are read.
        Any thread."""
        loop = self._loop
        if loop is None or run_id not in self._watches:
            return
        if threading.get_ident() == self._loop_thread:
            self._note(run_id)
        else:
            try:
                loop.call_soon_threadsafe(self._note, run_id)
            except RuntimeError:  # the loop has closed: nobody is watching any more
                pass

    @asynccontextmanager
    async def watch(self, run_id: str) -> AsyncIterator[Watch]:
        """A watch of ``run_id`` for the block; `WatchesFull` when ``max_watches`` are open."""
        if self._count >= self.max_watches:
            raise WatchesFull(f"{self._count} watches open, the most this process allows")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
        watch = Watch(run_id)
        self._watches.setdefault(run_id, set()).add(watch)
        self._count += 1
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="normwatch-live-poll")
        try:
            yield watch
        finally:
            watchers = self._watches.get(run_id, set())
            watchers.discard(watch)
            if not watchers:
                self._watches.pop(run_id, None)
                self._seen.pop(run_id, None)
            self._count -= 1
            if not self._watches and self._poller is not None:
                self._poller.cancel()
                self._poller = None

    def _wake(self, run_id: str) -> None:
        for watch in self._watches.get(run_id, ()):
            watch._wake()

    def _note(self, run_id: str) -> None:
        task = asyncio.create_task(self._changed_here(run_id))
        self._noting.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._noting.discard)

    async def _changed_here(self, run_id: str) -> None:
        try:
            await self._read([run_id])
        except SQLAlchemyError:
            pass  # the watchers are told anyway; the poll may tell them once more
        self._wake(run_id)

    async def _poll(self) -> None:
        failing = False
        while self._watches:
            try:
                moved = await self._read(list(self._watches))
            except SQLAlchemyError as exc:
                if not failing:
                    log.warning("live updates: cannot read the watched runs (%s); retrying", exc)
                failing = True
            else:
                if failing:
                    log.info("live updates: reading the watched runs again")
                failing = False
                for run_id in moved:
                    self._wake(run_id)
            await asyncio.sleep(self._poll_s)

    async def _read(self, run_ids: Sequence[str]) -> list[str]:
        """Read the marks of ``run_ids`` into what was seen; those that moved since the
        last read (a run read for the first time has not), unless a later read began
        before this one ended."""
        self._reads += 1
        number = self._reads
        marks = await anyio.to_thread.run_sync(self._marks, run_ids)
        moved = []
        for run_id, mark in marks.items():
            before = self._seen.get(run_id)
            if run_id not in self._watches or (before is not None and before[0] > number):
                continue
            if before is not None and before[1] != mark:
                moved.append(run_id)
            self._seen[run_id] = (number, mark)
        return moved

    def _marks(self, run_ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        with self._sessions() as session:
            return run_marks(session, run_ids)
