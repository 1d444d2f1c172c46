"""The spool writer thread: moves what the trainer logged from memory to the spool.

Every ``flush_interval`` seconds, or as soon as a full batch waits, it takes everything
queued, converts device scalars to floats, merges records into columnar batches, appends
them and the events between them to the spool in logged order, and fsyncs. It never touches
the network, so its pace does not depend on the server: whatever was logged more than one
flush interval (plus one write) ago is on disk, and survives a SIGKILL of the trainer.

On `SpoolWriter.stop` it writes what is left, then a final status record, and is done.
"""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ._batch import dumps, fetch_from_device, merge_records
from ._queue import EventRecord, Record, SendQueue
from ._reporting import WarnEvery, WarnOnce, ignored_key, logger
from ._spool import Dropped, Kind, Spool
from ._streams import new_stream_dir, remove_if_empty

FinalStatus = Literal["finished", "failed"]
"""What the run is marked as on the server when it ends."""
FINAL_STATUSES: tuple[FinalStatus, ...] = ("finished", "failed")

FLUSH_BYTES = 8 * 2**20
"""fsync at least this often while draining a long backlog, not only once it is drained."""

_OVERFLOW_WARNING_INTERVAL = 10.0


class SpoolWriter:
    """Thread body (`run`) that owns the writing end of one stream's spool.

    The stream is created in ``run_folder`` (this run's folder in the spool folder); if
    that fails, the spool lives in memory, with a warning.
    """

    def __init__(
        self,
        queue: SendQueue,
        *,
        run_folder: Path,
        metadata: dict[str, Any],
        max_bytes: int,
        flush_interval: float,
        run_name: str,
        warn_once: WarnOnce,
    ) -> None:
        self._queue = queue
        self.run_folder = run_folder
        self._metadata = metadata
        self._max_bytes = max_bytes
        self._flush_interval = flush_interval
        self._run_name = run_name
        self._warn_once = warn_once
        self._wake = threading.Event()
        self._stop_requested = threading.Event()
        self._status: FinalStatus = "finished"
        self._unflushed = 0
        self._newest: Record | None = None
        self._warn_overflow_every = WarnEvery(_OVERFLOW_WARNING_INTERVAL)
        self._users = 2
        self._users_lock = threading.Lock()
        self.spool: Spool | None = None
        self.ready = threading.Event()
        """Set once `spool` is open (or opening failed and the writer stopped)."""
        self.written = threading.Event()
        """Set after every flush: new records may be waiting."""
        self.done = threading.Event()
        """Set when the writer will append nothing more."""
        self.complete = False
        """True once everything logged, and the final status, is in the spool."""
        self.failed = False
        """True when an internal fault stopped the writer: later logs are dropped."""

    def wake(self) -> None:
        """Write now instead of at the next tick (a full batch is waiting)."""
        self._wake.set()

    def stop(self, status: FinalStatus) -> None:
        """Write what is queued and the final ``status``, then stop."""
        self._status = status
        self._stop_requested.set()
        self._wake.set()

    def run(self) -> None:
        """Thread body; never raises."""
        try:
            self.spool = self._open()
            self.ready.set()
            self._write_loop()
        except Exception:
            logger.exception(
                "run %r: the spool writer stopped; later metrics are dropped", self._run_name
            )
            self.failed = True
            self._queue.discard()
        finally:
            self.done.set()
            self.ready.set()
            self.written.set()
            self.release()

    def release(self) -> None:
        """Called once by the writer and once by the sender as each ends; the last one out
        deletes the stream if everything reached the server, or else closes it (keeping
        what is pending on disk for the next `Run` of this name or ``normwatch sync``)."""
        with self._users_lock:
            self._users -= 1
            if self._users:
                return
        spool = self.spool
        if spool is None:
            return
        if self.complete and spool.pending_records == 0:
            spool.destroy()
            if spool.directory is not None:
                # The spool folder itself stays: other runs may be creating theirs in it.
                remove_if_empty(self.run_folder)
        else:
            spool.close()

    def _open(self) -> Spool:
        metadata = {**self._metadata, "created_at": datetime.now(UTC).isoformat()}
        if sys.platform == "win32":
            # The on-disk spool relies on flock() and pread(); Windows keeps it in memory.
            return Spool.in_memory(metadata, max_bytes=self._max_bytes)
        problem: OSError | None = None
        for _ in range(3):  # a run of the same name may be removing an empty folder
            try:
                return Spool.create(
                    new_stream_dir(self.run_folder), metadata, max_bytes=self._max_bytes
                )
            except (FileNotFoundError, FileExistsError) as exc:
                problem = exc
            except OSError as exc:
                problem = exc
                break
        logger.warning(
            "run %r: cannot write a spool in %s (%s); unsent metrics are kept in memory only, "
            "so a crash of this process loses what the server has not yet taken",
            self._run_name,
            self.run_folder,
            problem,
        )
        return Spool.in_memory(metadata, max_bytes=self._max_bytes)

    def _write_loop(self) -> None:
        while True:
            finishing = self._stop_requested.is_set()
            if not finishing and not self._queue.batch_ready:
                self._wake.wait(self._flush_interval)
                self._wake.clear()
                finishing = self._stop_requested.is_set()
            while (item := self._queue.take()) is not None:
                if isinstance(item, EventRecord):
                    document = {"step": item.step, "kind": item.kind, "text": item.text}
                    self._append(Kind.EVENT, 0, dumps(document))
                else:
                    self._write_records(item)
                if self._unflushed >= FLUSH_BYTES:
                    self._flush()
            if finishing:
                self._append(Kind.STATUS, 0, dumps({"status": self._status}))
                self._flush()
                self._newest = None  # nothing more comes: let its values (device arrays) go
                self.complete = True
                return
            if self._unflushed:
                self._flush()

    def _write_records(self, records: list[Record]) -> None:
        taken = sum(len(metrics) for _, metrics in records)
        # The newest record taken stays referenced until the next batch: allocated last, it
        # usually sits above the others, so the memory of those freed here stays below it in
        # the heap instead of being trimmed, and the trainer's next copies reuse it warm. In a
        # plain loop of 2,000-name dict copies that was 7 µs a copy against 28 µs.
        self._newest = records[-1]
        fetch_from_device(records)
        merged = merge_records(records)
        for name, reason in merged.rejected.items():
            self._warn_once(
                f"value:{name}", "run %r: dropped values of %s: %s", self._run_name, name, reason
            )
        for name, (count, step) in merged.repeated.items():
            self._warn_once(
                ignored_key(name),
                "run %r: %r was logged more than once at step %d (%d later value(s) in this "
                "flush); the first value of a step stands and later ones are not stored",
                self._run_name,
                name,
                step,
                count,
            )
        if merged.points:
            self._append(Kind.METRICS, merged.points, dumps(merged.document))
        self._queue.settle(
            taken=taken,
            spooled=merged.points,
            dropped=merged.rejected_points,
            ignored=merged.repeated_points,
        )

    def _append(self, kind: Kind, points: int, payload: bytes) -> None:
        assert self.spool is not None
        dropped = self.spool.append(kind, points, payload)
        self._unflushed += len(payload)
        if dropped.records:
            self._queue.unspool(dropped=dropped.points)
            self._warn_overflow(dropped)
        self._check_disk()

    def _flush(self) -> None:
        assert self.spool is not None
        self.spool.flush()
        self._unflushed = 0
        self._check_disk()
        self.written.set()

    def _check_disk(self) -> None:
        assert self.spool is not None
        if self.spool.failure is not None:
            self._warn_once(
                "disk",
                "run %r: writing the spool in %s failed (%s); unsent metrics are kept in "
                "memory from now on",
                self._run_name,
                self.spool.directory,
                self.spool.failure,
            )

    def _warn_overflow(self, dropped: Dropped) -> None:
        assert self.spool is not None
        if self.spool.failure is not None:
            # The bound was reached in memory because the disk refused the spool: say so, or
            # a trainer whose disk is full reads only that a setting was too small.
            self._warn_overflow_every(
                "run %r: the spool's disk failed (%s), so unsent metrics are held in memory, "
                "which is full (spool_max_bytes=%d), and the server is not taking data: "
                "dropped the oldest %d points (%d records); %d points dropped in all",
                self._run_name,
                self.spool.failure,
                self._max_bytes,
                dropped.points,
                dropped.records,
                self._queue.dropped_points,
            )
            return
        self._warn_overflow_every(
            "run %r: the spool is full (spool_max_bytes=%d) and the server is not taking data: "
            "dropped the oldest %d points (%d records); %d points dropped in all",
            self._run_name,
            self._max_bytes,
            dropped.points,
            dropped.records,
            self._queue.dropped_points,
        )
