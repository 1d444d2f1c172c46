"""The trainer-facing `Run`: queue on the training thread, spool and send in the background.

``log`` and ``event`` only append to an in-memory queue under a lock, so a slow or dead
server never stalls a training step and never raises into it. Two daemon threads do the
rest: the spool writer (`normwatch.client._writer`) converts what was logged and appends it
to an on-disk spool every flush interval; the sender (`normwatch.client._sender`) delivers
the spool to the server, retrying through outages. What the server has not taken when the
process ends stays in the spool for the next `Run` of the same name or ``normwatch sync``.
Problems are reported through the ``normwatch.client`` logger and counted on the `Run`.
"""

from __future__ import annotations

import atexit
import operator
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from ._batch import jsonable
from ._control import ControlInbox, ControlRequest
from ._packed import PackedMetrics
from ._queue import EventRecord, SendQueue
from ._reporting import WarnEvery, WarnOnce, logger
from ._sender import Sender
from ._streams import default_spool_dir, run_folder
from ._transport import IngestApi
from ._writer import FINAL_STATUSES, FinalStatus, SpoolWriter

EXIT_FLUSH_TIMEOUT = 10.0
"""Seconds the interpreter waits at exit for unsent metrics when `Run.finish` was not called."""

MIN_SPOOL_BYTES = 4096

_SHED_WARNING_INTERVAL = 10.0


def _as_step(step: object) -> int:
    value = step if type(step) is int else operator.index(step)  # type: ignore[arg-type]
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    return value


class Run:
    """One training run streaming metrics to a normwatch server.

    >>> run = Run("http://127.0.0.1:8000", token="...", name="32b-exp1295")  # doctest: +SKIP
    >>> run.log({"train/loss": 2.31, "grad/norm/total": 0.42}, step=81000)  # doctest: +SKIP
    >>> run.finish()  # doctest: +SKIP

    The same ``name`` (within ``project``) resumes the run; a ``start_step`` below the run's
    last step opens a new segment, for a restart from a checkpoint. ``transport`` is handed
    to `httpx.Client` (tests pass `httpx.MockTransport`).

    Everything logged goes through a spool in ``spool_dir`` (default ``$NORMWATCH_SPOOL_DIR``
    or ``./normwatch-spool``), bounded by ``spool_max_bytes``: the oldest data is dropped,
    with a warning, only when the server stays away long enough to fill it. A spool that an
    earlier process of this run left behind is replayed before this run's own data.

    `finish` marks the run finished on the server; used as a context manager, a block left
    by an exception marks it failed instead.
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
        spool_dir: str | os.PathLike[str] | None = None,
        spool_max_bytes: int = 2**30,
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
        if spool_max_bytes < MIN_SPOOL_BYTES:
            raise ValueError(
                f"spool_max_bytes must be >= {MIN_SPOOL_BYTES}, got {spool_max_bytes}; "
                "the default is 2**30 (1 GiB)"
            )
        document: dict[str, object] = {
            "name": name,
            "config": jsonable(dict(config or {})),
            "tags": [str(tag) for tag in tags or []],
        }
        if project is not None:
            document["project"] = project
        if start_step is not None:
            document["start_step"] = _as_step(start_step)

        spool_root = Path(os.path.abspath(spool_dir)) if spool_dir else default_spool_dir()
        metadata: dict[str, object] = {
            "version": 1,
            "url": url,
            "project": project,
            "name": name,
            "create": document,
            "run_id": None,
            "segment": None,
        }

        self._name = name
        self._max_queue_points = max_queue_points
        self._queue = SendQueue(max_points=max_queue_points, batch_points=max_batch_points)
        self._warn_once = WarnOnce()
        self._warn_shed_every = WarnEvery(_SHED_WARNING_INTERVAL)
        self._writer = SpoolWriter(
            self._queue,
            run_folder=run_folder(spool_root, project, name),
            metadata=metadata,
            max_bytes=spool_max_bytes,
            flush_interval=float(flush_interval),
            run_name=name,
            warn_once=self._warn_once,
        )
        self._queue.on_batch_ready = self._writer.wake
        self._control = ControlInbox(name)
        self._sender = Sender(
            IngestApi(url, token=token, timeout=timeout, transport=transport),
            self._queue,
            self._writer,
            run_name=name,
            flush_interval=float(flush_interval),
            timeout=float(timeout),
            warn_once=self._warn_once,
            control=self._control,
        )
        self._writer_thread = threading.Thread(
            target=self._writer.run, name=f"normwatch-spool-{name}", daemon=True
        )
        self._thread = threading.Thread(
            target=self._sender.run, name=f"normwatch-sender-{name}", daemon=True
        )
        self._writer_thread.start()
        self._thread.start()
        atexit.register(self._flush_at_exit)

    def log(self, metrics: Mapping[str, object], *, step: int) -> None:
        """Queue ``metrics`` for ``step``; returns at once, never raises.

        Values may be Python numbers, NumPy scalars or size-1 device arrays (JAX); they are
        converted to floats on the sender thread. ``metrics`` may also be a `PackedMetrics`
        (``stability_metrics(..., packed=True)``): one device vector for all its names,
        queued without a copy and read in one transfer. Logging the same step twice merges the two
        dicts; a metric given a value at a step that already has one keeps the first (as the
        server does, whenever the second arrives), with a warning once a metric, and the later
        value counts in `ignored_points`. A value that is not a real scalar is dropped with a
        warning; the others of the call are kept.
        """
        # Called every step: the common case (an int step, a dict) costs the copy, one lock
        # and no other Python call.
        try:
            if type(step) is not int or step < 0:
                step = _as_step(step)
            if type(metrics) is PackedMetrics:
                # Immutable (a device vector, static names): kept as it is, read later.
                values: Mapping[str, object] = metrics
                points = metrics.count
            else:
                values = dict(metrics)
                points = len(values)
        except Exception as exc:
            self._warn_once(f"log:{type(exc).__name__}", "dropped a log() call: %s", exc)
            return
        shed = self._queue.put((step, values), points)
        if shed != 0:
            self._after_put(shed)

    def event(self, text: str, *, step: int, kind: str = "note") -> None:
        """Queue an annotation (a config change, a restart) drawn on the charts at ``step``."""
        try:
            record = EventRecord(_as_step(step), str(kind), str(text))
        except Exception as exc:
            self._warn_once(f"event:{type(exc).__name__}", "dropped an event() call: %s", exc)
            return
        self._after_put(self._queue.put(record, 0))

    def should_stop(self) -> bool:
        """True once the server has asked this run to stop (an admin on the dashboard or the
        API, or an alert rule); it stays True. Cheap enough for every step: it reads what the
        answers to earlier batches said, and never waits on the network.

        >>> if run.should_stop():  # doctest: +SKIP
        ...     save_checkpoint(step)
        ...     run.finish()
        ...     break
        """
        return self._control.stop is not None

    def should_checkpoint(self) -> bool:
        """True once for each time the server asked for a checkpoint (requests that came
        while none was taken count as one); as cheap as `should_stop`."""
        return self._control.take_checkpoint() is not None

    @property
    def control_requests(self) -> tuple[ControlRequest, ...]:
        """Every request the server sent this process, oldest first: action, reason, source
        (``"admin"`` or ``"rule"``), and the step the server knew of then."""
        return self._control.received

    def finish(self, timeout: float = 30.0, status: FinalStatus = "finished") -> None:
        """Send what is queued, mark the run ``status`` ("finished" or "failed") on the server
        and stop the background threads, waiting at most ``timeout`` seconds.

        Points the server has not taken when the time is up stay in the spool (and counted
        in `pending_points`), for the next `Run` of this name or ``normwatch sync``. Calling
        it again does nothing; `log` after `finish` drops its metrics with a warning.
        """
        if status not in FINAL_STATUSES:
            raise ValueError(f"status must be one of {', '.join(FINAL_STATUSES)}, got {status!r}")
        if not self._queue.close():
            return
        try:
            timeout = max(float(timeout), 0.0)
            deadline = time.monotonic() + timeout
            self._writer.stop(status)
            self._sender.stop(timeout)
            for thread in (self._writer_thread, self._thread):
                if thread is not threading.current_thread():
                    thread.join(max(deadline - time.monotonic(), 0.0))
            atexit.unregister(self._flush_at_exit)
            if self.pending_points:
                self._warn_undelivered(timeout)
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
        self.finish(status="finished" if exc_type is None else "failed")

    def __repr__(self) -> str:
        return (
            f"Run(name={self._name!r}, run_id={self.run_id!r}, segment={self.segment}, "
            f"sent_points={self.sent_points}, ignored_points={self.ignored_points}, "
            f"pending_points={self.pending_points})"
        )

    @property
    def run_id(self) -> str | None:
        """The server's id for this run; None until the server has created it."""
        return self._sender.run_id

    @property
    def segment(self) -> int | None:
        """The segment this process writes to (a restart opens a new one); None until known."""
        return self._sender.segment

    @property
    def sent_points(self) -> int:
        """(step, metric) values the server has stored."""
        return self._queue.sent_points

    @property
    def ignored_points(self) -> int:
        """Values not stored because their point (step, metric) had a value already: logged
        again at a step here, or stored before on the server. The first value stands; each
        metric this happens to is named once in a warning."""
        return self._queue.ignored_points

    @property
    def dropped_points(self) -> int:
        """Values given up on: invalid, or dropped from a full spool or queue."""
        return self._queue.dropped_points

    @property
    def dead_lettered_points(self) -> int:
        """Values the server refused for good, kept in the run's ``deadletter.jsonl``."""
        return self._queue.dead_points

    @property
    def pending_points(self) -> int:
        """Values logged but not yet accepted by the server (in memory or in the spool)."""
        queue = self._queue
        return queue.queued_points + queue.inflight_points + queue.spooled_points

    @property
    def spool_folder(self) -> Path:
        """This run's folder in the spool: its streams and its dead-letter file."""
        return self._writer.run_folder

    def _after_put(self, shed: int | None) -> None:
        """Warn of data that `SendQueue.put` dropped: None (closed) or the count shed."""
        if shed is None and not self._writer.failed:
            self._warn_once("closed", "run %r is finished; dropped data logged after", self._name)
        elif shed:
            self._warn_shed(shed)

    def _warn_shed(self, shed: int) -> None:
        self._warn_shed_every(
            "run %r: more than max_queue_points=%d values waiting to be spooled (logged faster "
            "than they can be written); dropped the oldest %d, %d dropped in all",
            self._name,
            self._max_queue_points,
            shed,
            self.dropped_points,
        )

    def _warn_undelivered(self, timeout: float) -> None:
        spool = self._writer.spool
        if spool is not None and not spool.on_disk:
            # Whatever was spooled after the disk failed lives in this process only: telling
            # the trainer to sync it later would send them looking for data that is gone.
            logger.warning(
                "run %r: %d points were not delivered within finish(timeout=%s); the spool "
                "could not be written (%s), so those held in memory are lost when this "
                "process exits (any written before that are in the spool at %s)",
                self._name,
                self.pending_points,
                timeout,
                spool.failure or "no spool folder",
                self._writer.run_folder,
            )
            return
        logger.warning(
            "run %r: %d points were not delivered within finish(timeout=%s); they are "
            "kept in the spool at %s for the next run of this name or: normwatch sync %s",
            self._name,
            self.pending_points,
            timeout,
            self._writer.run_folder,
            self._writer.run_folder,
        )

    def _flush_at_exit(self) -> None:
        # Python stores an uncaught exception in sys.last_exc (3.12+) / sys.last_value before
        # it runs atexit handlers, so a trainer that crashed is not reported as finished.
        crashed = any(getattr(sys, name, None) is not None for name in ("last_exc", "last_value"))
        self.finish(timeout=EXIT_FLUSH_TIMEOUT, status="failed" if crashed else "finished")
