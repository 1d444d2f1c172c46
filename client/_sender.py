"""The delivery thread of a `Run`: replays old streams, then sends this one's spool.

One daemon thread runs `Sender.run`. It waits for the writer to open the spool, replays
streams that earlier processes of the same run left in the run's spool folder (oldest
first, so that segments open in the order the trainers started), creates or resumes the
run, and then sends the spooled records as the writer appends them: metric batches and
events interleaved exactly as they were logged, the final status last. A server that is
down only delays it; the writer keeps spooling meanwhile.

Stopping: `Sender.stop` sets a deadline; from then on back-off sleeps and request timeouts
are cut so that the thread gives up by that time, leaving the rest in the spool.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

from ._control import ControlInbox
from ._delivery import Outcome, StreamDelivery, Tally, deliver_all
from ._queue import SendQueue
from ._reporting import WarnOnce, logger
from ._spool import Spool, SpoolBusy
from ._streams import stream_dirs
from ._transport import IngestApi
from ._writer import SpoolWriter


class Sender:
    """Moves spooled records to the server; owns the `IngestApi`."""

    def __init__(
        self,
        api: IngestApi,
        queue: SendQueue,
        writer: SpoolWriter,
        *,
        run_name: str,
        flush_interval: float,
        timeout: float,
        warn_once: WarnOnce,
        control: ControlInbox | None = None,
    ) -> None:
        self._api = api
        self._control = control
        self._queue = queue
        self._writer = writer
        self._run_name = run_name
        self._flush_interval = flush_interval
        self._timeout = timeout
        self._warn_once = warn_once
        self._stop_requested = threading.Event()
        self._deadline = math.inf
        self.run_id: str | None = None
        self.segment: int | None = None
        self.blocked = False
        """True once the server refused the token: the rest stays in the spool."""

    def stop(self, timeout: float) -> None:
        """Deliver what is spooled; give up ``timeout`` seconds from now."""
        self._deadline = time.monotonic() + timeout
        self._stop_requested.set()
        self._writer.written.set()

    def run(self) -> None:
        """Thread body; never raises."""
        try:
            self._deliver()
        except Exception:
            logger.exception(
                "run %r: the sender stopped; unsent metrics stay in the spool at %s",
                self._run_name,
                self._writer.run_folder,
            )
        finally:
            self._api.close()
            self._writer.release()

    def _deliver(self) -> None:
        while not self._writer.ready.wait(self._flush_interval):
            if self._time_is_up():
                return
        spool = self._writer.spool
        if spool is None or not self._replay_leftovers(spool):
            return
        delivery = self._delivery(spool)
        if not self._settle(delivery.open_run()):
            return
        self.run_id, self.segment = delivery.run_id, delivery.segment
        while True:
            # Read before looking for records: once the writer is done, nothing new comes.
            writer_done = self._writer.done.is_set()
            self._writer.written.clear()
            outcome = delivery.deliver_next()
            if outcome is not None:
                if not self._settle(outcome):
                    return
                continue
            if writer_done or self._time_is_up():
                return
            self._writer.written.wait(self._flush_interval)

    def _replay_leftovers(self, own: Spool) -> bool:
        """Deliver streams left by earlier processes of this run; False if that had to stop
        (this stream must wait: its run may open a segment only after theirs)."""
        if own.directory is None:
            return True
        for directory in stream_dirs(self._writer.run_folder):
            if directory == own.directory:
                continue
            try:
                spool = Spool.open(directory)
            except (SpoolBusy, FileNotFoundError):
                continue  # another live process owns it, or it was just delivered
            except (OSError, ValueError) as exc:
                self._warn_once(
                    f"leftover:{directory}", "cannot read the spool at %s: %s", directory, exc
                )
                continue
            tally = Tally()
            try:
                outcome = deliver_all(self._delivery(spool, replay=True), tally)
            except Exception:
                # This stream stays for `normwatch sync`; it must not hold back new data.
                logger.exception(
                    "run %r: replaying the spool at %s failed; it is left there",
                    self._run_name,
                    directory,
                )
                spool.close()
                continue
            if outcome.state == "done":
                spool.destroy()
                logger.info(
                    "run %r: replayed %d points left in the spool by an earlier process",
                    self._run_name,
                    tally.points,
                )
            else:
                spool.close()
                self._settle(outcome)
                return False
        return True

    def _delivery(self, spool: Spool, *, replay: bool = False) -> StreamDelivery:
        folder: Path | None = self._writer.run_folder if spool.directory is not None else None
        return StreamDelivery(
            self._api,
            spool,
            dead_letter_folder=folder,
            pause=self._pause,
            budget=self._budget,
            report=self._warn_once,
            control=self._control,
            replay=replay,
        )

    def _settle(self, outcome: Outcome) -> bool:
        """Count a record's fate; False when delivery has to stop."""
        if outcome.state == "done":
            self._queue.unspool(
                sent=outcome.sent_points,
                dead=outcome.dead_points,
                ignored=outcome.ignored_points,
            )
            return True
        if outcome.state == "blocked" and not self.blocked:
            self.blocked = True
            logger.error(
                "run %r: the server refused this token (%s); nothing more is sent. What was "
                "logged is kept in the spool at %s; deliver it with: normwatch sync %s "
                "--token <an ingest token>",
                self._run_name,
                outcome.message,
                self._writer.run_folder,
                self._writer.run_folder,
            )
        return False

    def _time_is_up(self) -> bool:
        return self._stop_requested.is_set() and time.monotonic() >= self._deadline

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
