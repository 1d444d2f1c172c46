"""The background side of a `Run`: create the run on the server, then drain the queue.

One daemon thread runs `Sender.run`. It first creates (or resumes) the run, retrying until
the server answers, while the trainer keeps queuing. Then every ``flush_interval`` seconds,
or as soon as a full batch waits, it sends everything queued, in order: metric batches and
events interleaved exactly as they were logged.

Stopping: `Sender.stop` sets a deadline; from then on back-off sleeps and request timeouts
are cut so that the thread gives up (leaving the rest counted as pending) by that time.
After the last metrics it reports the run's final status (``finished`` or ``failed``), in
the time that is left.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Literal

from ._batch import ColumnarBatch, dumps, fetch_from_device, gzip_json, merge_records
from ._queue import EventRecord, Record, SendQueue
from ._transport import Delivery, IngestApi

logger = logging.getLogger("normwatch.client")

FinalStatus = Literal["finished", "failed"]
"""What the run is marked as on the server when it ends."""
FINAL_STATUSES: tuple[FinalStatus, ...] = ("finished", "failed")


class WarnOnce:
    """Log a WARNING the first time a key is seen and DEBUG afterwards, so a trainer that
    repeats the same mistake every step does not flood its own logs."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, key: str, message: str, *args: object) -> None:
        level = logging.DEBUG if key in self._seen else logging.WARNING
        self._seen.add(key)
        logger.log(level, message, *args)


def _parse_created(body: object) -> tuple[str, int | None] | None:
    """``(run id, segment)`` from the answer to ``POST /runs``, or None if it has no id."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str | int):
        return None
    segment = body.get("segment")
    return str(body["id"]), segment if isinstance(segment, int) else None


class Sender:
    """Moves queued metrics and events to the server; owns the `IngestApi`."""

    def __init__(
        self,
        api: IngestApi,
        queue: SendQueue,
        *,
        run_name: str,
        create_document: bytes,
        flush_interval: float,
        timeout: float,
        warn_once: WarnOnce,
    ) -> None:
        self._api = api
        self._queue = queue
        self._run_name = run_name
        self._create_document = create_document
        self._flush_interval = flush_interval
        self._timeout = timeout
        self._warn_once = warn_once
        self._stop_requested = threading.Event()
        self._wake = threading.Event()
        self._deadline = math.inf
        self._final_status: FinalStatus = "finished"
        self.run_id: str | None = None
        self.segment: int | None = None
        self.failed = False
        """True once the data can never be sent (run refused, or an internal fault)."""

    def wake(self) -> None:
        """Send now instead of at the next tick (a full batch is waiting)."""
        self._wake.set()

    def stop(self, timeout: float, status: FinalStatus = "finished") -> None:
        """Flush what is queued, then mark the run ``status``; give up ``timeout`` s from now."""
        self._final_status = status
        self._deadline = time.monotonic() + timeout
        self._stop_requested.set()
        self._wake.set()

    def run(self) -> None:
        """Thread body; never raises."""
        try:
            if self._create_run():
                self._send_loop()
                self._report_status()
        except Exception:
            logger.exception(
                "run %r: the sender stopped; later metrics are dropped", self._run_name
            )
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
                self.run_id, self.segment = created
                return True
            delivery = Delivery(
                "rejected", delivery.status_code, message=f"answer without an id: {delivery.body!r}"
            )
        if delivery.outcome == "rejected":
            logger.error(
                "run %r: the server refused to create the run (HTTP %s): %s; its metrics are "
                "dropped",
                self._run_name,
                delivery.status_code,
                delivery.message,
            )
            self._give_up()
        return False

    def _give_up(self) -> None:
        self.failed = True
        self._queue.discard()

    def _send_loop(self) -> None:
        while True:
            finishing = self._stop_requested.is_set()
            if not finishing and not self._queue.batch_ready:
                self._wake.wait(self._flush_interval)
                self._wake.clear()
                finishing = self._stop_requested.is_set()
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
        """Convert, merge and send records; False when the deadline cut it short."""
        taken = sum(len(metrics) for _, metrics in records)
        fetch_from_device(records)
        merged = merge_records(records)
        for name, reason in merged.rejected.items():
            self._warn_once(
                f"value:{name}", "run %r: dropped values of %s: %s", self._run_name, name, reason
            )
        if not self._deliver(merged.batch):
            return False
        self._queue.settle(taken=taken, dropped=merged.rejected_points)
        return True

    def _deliver(self, batch: ColumnarBatch) -> bool:
        if not batch.rows:
            return True
        assert self.run_id is not None
        delivery = self._api.post_metrics(
            self.run_id,
            gzip_json(batch.body(self.segment)),
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
            self._run_name,
            batch.points,
            delivery.status_code,
            delivery.message,
        )
        self._queue.settle(dropped=batch.points)
        return True

    def _send_event(self, event: EventRecord) -> bool:
        assert self.run_id is not None
        document = {"step": event.step, "kind": event.kind, "text": event.text}
        delivery = self._api.post_event(
            self.run_id, dumps(document), pause=self._pause, budget=self._budget
        )
        if delivery.outcome == "rejected":
            self._warn_once(
                f"event:{delivery.status_code}:{delivery.message}",
                "run %r: the server refused event %r at step %d (HTTP %s): %s",
                self._run_name,
                event.text,
                event.step,
                delivery.status_code,
                delivery.message,
            )
        return delivery.outcome != "abandoned"

    def _report_status(self) -> None:
        """Best effort: the run is left "running" on the server when this cannot get through."""
        assert self.run_id is not None
        status = self._final_status
        delivery = self._api.update_run(
            self.run_id, dumps({"status": status}), pause=self._pause, budget=self._budget
        )
        if delivery.outcome == "delivered":
            return
        if delivery.outcome == "rejected":
            reason = f"the server refused (HTTP {delivery.status_code}): {delivery.message}"
        else:
            reason = "no answer before the finish timeout"
        logger.warning("run %r: could not mark the run %s: %s", self._run_name, status, reason)

    def _budget(self) -> float | None:
        """Timeout for the next request: the full one, or what is left before the deadline."""
        if not self._stop_requested.is_set():
            return self._timeout
        remaining = self._deadline - time.monotonic()
        return min(self._timeout, remaining) if remaining > 0 else None

    def _pause(self, seconds: float) -> bool:
        """Back off before a retry; False when that would run past the deadline."""
        started = time.monotonic()
        if not self._stop_requested.is_set() and not self._stop_requested.wait(seconds):
            return True
        rest = max(seconds - (time.monotonic() - started), 0.0)
        if time.monotonic() + rest >= self._deadline:
            return False
        time.sleep(rest)
        return True
