"""The trainer-facing `Run`: queue on the training thread, send on a background thread.

``log`` and ``event`` only append to an in-memory queue under a lock, so a slow or dead
server never stalls a training step and never raises into it. A daemon thread creates the
run on the server, then drains the queue every ``flush_interval`` seconds (sooner when a
full batch is waiting) into gzip-compressed columnar batches, in the order things were
logged. Failures it cannot fix are reported through the ``normwatch.client`` logger and
counted in `Run.dropped_points`; they never surface as exceptions.
"""

from __future__ import annotations

import atexit
import logging
import math
import operator
import threading
import time
from collections.abc import Mapping
from types import TracebackType

import httpx

from ._batch import ColumnarBatch, dumps, fetch_from_device, gzip_json, jsonable, merge_records
from ._queue import EventRecord, Record, SendQueue
from ._transport import Delivery, IngestApi

logger = logging.getLogger("normwatch.client")

EXIT_FLUSH_TIMEOUT = 10.0
"""Seconds the interpreter waits at exit for unsent metrics when `Run.finish` was not called."""

_SHED_WARNING_INTERVAL = 10.0


def _as_step(step: object) -> int:
    value = step if type(step) is int else operator.index(step)  # type: ignore[call-overload]
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    return value


def _parse_created(body: object) -> tuple[str, int | None] | None:
    """``(run id, segment)`` from the answer to ``POST /runs``, or None if it has no id."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str | int):
        return None
    segment = body.get("segment")
    return str(body["id"]), segment if isinstance(segment, int) else None


class Run:
    """One training run streaming metrics to a normwatch server.

    >>> run = Run("http://127.0.0.1:8000", token="...", project="marin", name="32b-exp1295")
    >>> run.log({"train/loss": 2.31, "grad/norm/total": 0.42}, step=81000)  # doctest: +SKIP
    >>> run.finish()  # doctest: +SKIP

    The same ``name`` (within ``project``) resumes the run; a ``start_step`` below the run's
    last step opens a new segment, for a restart from a checkpoint. ``transport`` is handed
    to `httpx.Client` (tests pass `httpx.MockTransport`).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str,
        project: str | None = None,
        name: str,
        config: Mapping[str, object] | None = None,
        tags: list[str] | None = None,
        start_step: int | None = None,
        flush_interval: float = 0.5,
        max_batch_points: int = 50_000,
        max_queue_points: int = 5_000_000,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string, e.g. name='32b-exp1295'")
        if not flush_interval > 0:
            raise ValueError(f"flush_interval must be > 0 seconds, got {flush_interval}")
        if max_batch_points < 1 or max_queue_points < max_batch_points:
            raise ValueError(
                "need 1 <= max_batch_points <= max_queue_points, got "
                f"max_batch_points={max_batch_points}, max_queue_points={max_queue_points}"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        document: dict[str, object] = {
            "name": name,
            "config": jsonable(dict(config or {})),
            "tags": [str(tag) for tag in tags or []],
        }
        if project is not None:
            document["project"] = project
        if start_step is not None:
            document["start_step"] = _as_step(start_step)
        self._create_document = dumps(document)
        self._name = name
        self._flush_interval = float(flush_interval)
        self._max_queue_points = max_queue_points
        self._timeout = float(timeout)
        self._api = IngestApi(url, token=token, timeout=timeout, transport=transport)

        self._queue = SendQueue(max_points=max_queue_points, batch_points=max_batch_points)
        self._failed = False
        self._run_id: str | None = None
        self._segment: int | None = None
        self._deadline = math.inf
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._warned: set[str] = set()
        self._last_shed_warning = -math.inf

        self._thread = threading.Thread(
            target=self._work, name=f"normwatch-sender-{name}", daemon=True
        )
        self._thread.start()
        atexit.register(self._flush_at_exit)

    # -- training-thread side -------------------------------------------------------------

    def log(self, metrics: Mapping[str, object], *, step: int) -> None:
        """Queue ``metrics`` for ``step``; returns at once, never raises.

        Values may be Python numbers, NumPy scalars or size-1 device arrays (JAX); they are
        converted to floats on the sender thread. Logging the same step twice merges the two
        dicts (the later value of a metric wins). A value that is not a real scalar is
        dropped with a warning; the others of the call are kept.
        """
        try:
            record: Record = (_as_step(step), dict(metrics))
        except Exception as exc:
            self._warn_once(f"log:{type(exc).__name__}", "dropped a log() call: %s", exc)
            return
        self._enqueue(record, len(record[1]))

    def event(self, text: str, *, step: int, kind: str = "note") -> None:
        """Queue an annotation (a config change, a restart) drawn on the charts at ``step``."""
        try:
            record = EventRecord(_as_step(step), str(kind), str(text))
        except Exception as exc:
            self._warn_once(f"event:{type(exc).__name__}", "dropped an event() call: %s", exc)
            return
        self._enqueue(record, 0)

    def finish(self, timeout: float = 30.0) -> None:
        """Send what is queued and stop the sender, waiting at most ``timeout`` seconds.

        Points still unsent when the time is up stay counted in `pending_points`. Calling
        it again does nothing; `log` after `finish` drops its metrics with a warning.
        """
        if not self._queue.close():
            return
        try:
            timeout = max(float(timeout), 0.0)
            self._deadline = time.monotonic() + timeout
            self._stop.set()
            self._wake.set()
            if self._thread is not threading.current_thread():
                self._thread.join(timeout)
            atexit.unregister(self._flush_at_exit)
            if self.pending_points:
                logger.warning(
                    "run %r: %d points were not delivered within finish(timeout=%s)",
                    self._name,
                    self.pending_points,
                    timeout,
                )
        except Exception:
            logger.exception("run %r: finish() failed", self._name)

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.finish()

    def __repr__(self) -> str:
        return (
            f"Run(name={self._name!r}, run_id={self._run_id!r}, segment={self._segment}, "
            f"sent_points={self.sent_points}, pending_points={self.pending_points})"
        )

    @property
    def run_id(self) -> str | None:
        """The server's id for this run; None until the server has created it."""
        return self._run_id

    @property
    def segment(self) -> int | None:
        """The segment this process writes to (a restart opens a new one); None until known."""
        return self._segment

    @property
    def sent_points(self) -> int:
        """(step, metric) values the server has accepted."""
        return self._queue.sent_points

    @property
    def dropped_points(self) -> int:
        """Values given up on: invalid, refused by the server, or shed from a full queue."""
        return self._queue.dropped_points

    @property
    def pending_points(self) -> int:
        """Values logged but not yet accepted by the server (queued or in flight)."""
        return self._queue.queued_points + self._queue.inflight_points

    def _enqueue(self, record: Record | EventRecord, points: int) -> None:
        shed = self._queue.put(record, points)
        if self._queue.batch_ready:
            self._wake.set()
        if shed is None and not self._failed:
            self._warn_once("closed", "run %r is finished; dropped data logged after", self._name)
        elif shed:
            self._warn_shed(shed)

    def _warn_shed(self, shed: int) -> None:
        now = time.monotonic()
        if now - self._last_shed_warning < _SHED_WARNING_INTERVAL:
            return
        self._last_shed_warning = now
        logger.warning(
            "run %r: more than max_queue_points=%d values waiting (server slow or unreachable); "
            "dropped the oldest %d, %d dropped in all",
            self._name,
            self._max_queue_points,
            shed,
            self.dropped_points,
        )

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        """Log a WARNING the first time ``key`` is seen, DEBUG afterwards."""
        level = logging.DEBUG if key in self._warned else logging.WARNING
        self._warned.add(key)
        logger.log(level, message, *args)

    def _flush_at_exit(self) -> None:
        self.finish(timeout=EXIT_FLUSH_TIMEOUT)

    # -- sender-thread side ---------------------------------------------------------------

    def _work(self) -> None:
        try:
            if self._create_run():
                self._send_loop()
        except Exception:
            logger.exception("run %r: the sender stopped; later metrics are dropped", self._name)
            self._give_up()
        finally:
            self._api.close()

    def _create_run(self) -> bool:
        delivery = self._api.create_run(
            self._create_document, pause=self._pause, budget=self._budget
        )
        if delivery.outcome == "delivered":
            created = _parse_created(delivery.body)
            if created is not None:
                self._run_id, self._segment = created
                return True
            delivery = Delivery(
                "rejected", delivery.status_code, message=f"answer without an id: {delivery.body!r}"
            )
        if delivery.outcome == "rejected":
            logger.error(
                "run %r: the server refused to create the run (HTTP %s): %s; its metrics are "
                "dropped",
                self._name,
                delivery.status_code,
                delivery.message,
            )
            self._give_up()
        return False

    def _give_up(self) -> None:
        self._failed = True
        self._queue.discard()

    def _send_loop(self) -> None:
        while True:
            finishing = self._stop.is_set()
            if not finishing and not self._queue.batch_ready:
                self._wake.wait(self._flush_interval)
                self._wake.clear()
                finishing = self._stop.is_set()
            while (item := self._queue.take()) is not None:
                if isinstance(item, EventRecord):
                    delivered = self._send_event(item)
                else:
                    delivered = self._send_records(item)
                if not delivered:
                    return
            if finishing:
                return

    def _send_records(self, records: list[Record]) -> bool:
        """Convert, merge and send records; False when the finish deadline cut it short."""
        taken = sum(len(metrics) for _, metrics in records)
        fetch_from_device(records)
        merged = merge_records(records)
        for name, reason in merged.rejected.items():
            self._warn_once(
                f"value:{name}", "run %r: dropped values of %r: %s", self._name, name, reason
            )
        if not self._deliver(merged.batch):
            return False
        self._queue.settle(taken=taken, dropped=merged.rejected_points)
        return True

    def _deliver(self, batch: ColumnarBatch) -> bool:
        if not batch.rows:
            return True
        assert self._run_id is not None
        delivery = self._api.post_metrics(
            self._run_id,
            gzip_json(batch.body(self._segment)),
            pause=self._pause,
            budget=self._budget,
        )
        if delivery.outcome == "delivered":
            self._queue.settle(sent=batch.points)
            return True
        if delivery.outcome == "abandoned":
            return False
        if delivery.status_code == 413 and len(batch.rows) > 1:
            return all(self._deliver(half) for half in batch.split())
        self._warn_once(
            f"metrics:{delivery.status_code}:{delivery.message}",
            "run %r: the server refused a batch of %d points (HTTP %s): %s; batch dropped",
            self._name,
            batch.points,
            delivery.status_code,
            delivery.message,
        )
        self._queue.settle(dropped=batch.points)
        return True

    def _send_event(self, event: EventRecord) -> bool:
        assert self._run_id is not None
        document = {"step": event.step, "kind": event.kind, "text": event.text}
        delivery = self._api.post_event(
            self._run_id, dumps(document), pause=self._pause, budget=self._budget
        )
        if delivery.outcome == "rejected":
            self._warn_once(
                f"event:{delivery.status_code}:{delivery.message}",
                "run %r: the server refused event %r at step %d (HTTP %s): %s",
                self._name,
                event.text,
                event.step,
                delivery.status_code,
                delivery.message,
            )
        return delivery.outcome != "abandoned"

    def _budget(self) -> float | None:
        """Timeout for the next request: the full one, or what is left before the deadline."""
        if not self._stop.is_set():
            return self._timeout
        remaining = self._deadline - time.monotonic()
        return min(self._timeout, remaining) if remaining > 0 else None

    def _pause(self, seconds: float) -> bool:
        """Back off before a retry; False when that would run past the finish deadline."""
        started = time.monotonic()
        if not self._stop.is_set() and not self._stop.wait(seconds):
            return True
        rest = max(seconds - (time.monotonic() - started), 0.0)
        if time.monotonic() + rest >= self._deadline:
            return False
        time.sleep(rest)
        return True
