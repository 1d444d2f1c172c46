"""The bounded in-memory queue between the training thread and the sender thread.

The training thread only ever calls `SendQueue.put`: an append and a few integer updates
under one lock. The spool writer thread empties the queue into the on-disk spool every
flush interval, whatever the server does; only if that falls behind (a stalled disk) so far
that more than ``max_points`` values wait are the oldest steps shed (events are kept), so
memory stays bounded and the trainer is never blocked.

Point accounting, where a point is one (step, metric) value::

    logged = queued + in flight + spooled + sent + ignored + dead-lettered + dropped

"in flight" is taken by the writer and not yet spooled; "spooled" is in the spool and not
yet answered by the server; "sent" the server stored; "ignored" were not stored because
their point had a value already (logged twice at a step here, or stored before on the
server): the first value of a point stands.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An annotation waiting to be sent, kept in order with the metrics around it."""

    step: int
    kind: str
    text: str


Record = tuple[int, Mapping[Any, object]]
"""A step and what was logged for it, values not yet converted: a copy of the caller's dict, or
a `PackedMetrics` as it came (immutable)."""


def _nothing() -> None:
    pass


class SendQueue:
    """FIFO of records and events, with the counters `Run` exposes.

    ``on_batch_ready`` is called, outside the lock, by the `put` that brings the queue to a
    full batch, so the writer need not wait for its timer.
    """

    def __init__(
        self, *, max_points: int, batch_points: int, on_batch_ready: Callable[[], None] = _nothing
    ) -> None:
        self.on_batch_ready = on_batch_ready
        self._lock = threading.Lock()
        self._items: deque[Record | EventRecord] = deque()
        self._max_points = max_points
        self._batch_points = batch_points
        self.closed = False
        # Plain ints, read without the lock: a stale read by a property is harmless.
        self.queued_points = 0
        self.inflight_points = 0
        self.spooled_points = 0
        self.sent_points = 0
        self.ignored_points = 0
        self.dead_points = 0
        self.dropped_points = 0

    @property
    def batch_ready(self) -> bool:
        """True when a full batch is waiting and the sender should not wait for its timer."""
        return self.queued_points >= self._batch_points

    def put(self, item: Record | EventRecord, points: int) -> int | None:
        """Append ``item`` holding ``points`` values.

        Returns how many old values were shed to make room (usually 0), or None when the
        queue is closed and the item was dropped.
        """
        # The training thread's path: one lock, no other call unless a batch fills up.
        with self._lock:
            if self.closed:
                self.dropped_points += points
                return None
            self._items.append(item)
            queued = self.queued_points = self.queued_points + points
            shed = 0 if queued <= self._max_points else self._shed_oldest()
        if queued >= self._batch_points > queued - points:
            self.on_batch_ready()
        return shed

    def _shed_oldest(self) -> int:
        kept_events: list[EventRecord] = []
        shed = 0
        while self.queued_points > self._max_points and self._items:
            item = self._items.popleft()
            if isinstance(item, EventRecord):
                kept_events.append(item)
                continue
            shed += len(item[1])
            self.queued_points -= len(item[1])
        self._items.extendleft(reversed(kept_events))
        self.dropped_points += shed
        return shed

    def close(self) -> bool:
        """Refuse further items; True only for the call that closed it."""
        with self._lock:
            was_open = not self.closed
            self.closed = True
            return was_open

    def discard(self) -> None:
        """Close and drop everything waiting or in flight (nowhere left to write it)."""
        with self._lock:
            self.closed = True
            self.dropped_points += self.queued_points + self.inflight_points
            self.queued_points = self.inflight_points = 0
            self._items.clear()

    def take(self) -> EventRecord | list[Record] | None:
        """The next event, or the next records up to ``batch_points`` values, or None.

        A record larger than the room left is split by metric name, the rest staying at
        the head of the queue. Taken values count as in flight until `settle`.
        """
        with self._lock:
            if not self._items:
                return None
            head = self._items[0]
            if isinstance(head, EventRecord):
                self._items.popleft()
                return head
            records: list[Record] = []
            room = self._batch_points
            while self._items and room > 0:
                head = self._items[0]
                if isinstance(head, EventRecord):
                    break
                step, metrics = head
                if len(metrics) > room:
                    items = list(metrics.items())
                    records.append((step, dict(items[:room])))
                    self._items[0] = (step, dict(items[room:]))
                    taken = room
                else:
                    self._items.popleft()
                    records.append(head)
                    taken = len(metrics)
                room -= taken
                self.queued_points -= taken
                self.inflight_points += taken
            return records

    def settle(
        self, *, taken: int = 0, spooled: int = 0, dropped: int = 0, ignored: int = 0
    ) -> None:
        """The writer is done with ``taken`` values: ``spooled`` of them went to the spool,
        ``dropped`` could not be converted, ``ignored`` were later values of a point logged
        twice (the first one was spooled)."""
        with self._lock:
            self.inflight_points -= taken
            self.spooled_points += spooled
            self.dropped_points += dropped
            self.ignored_points += ignored

    def unspool(self, *, sent: int = 0, dead: int = 0, dropped: int = 0, ignored: int = 0) -> None:
        """Spooled values left the spool: stored by the server, ignored by it (their point
        had a value already), dead-lettered, or dropped for room."""
        with self._lock:
            self.spooled_points -= sent + dead + dropped + ignored
            self.sent_points += sent
            self.ignored_points += ignored
            self.dead_points += dead
            self.dropped_points += dropped
