"""Streaming parsed records into a `Run`, at the pace the server takes them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .._run import Run
from ._errors import ImportAborted
from ._progress import ProgressBar

MAX_PENDING_POINTS = 1_000_000
"""Values allowed to wait for the server before the import pauses.

A file is read much faster than a server stores it, and `Run` sheds the oldest values
when more than its ``max_queue_points`` (5 million by default) wait; pausing well below
that keeps every value and bounds memory."""

STALL_TIMEOUT = 120.0
"""Seconds without any value taken (or given up on) by the client before giving up."""


@dataclass(frozen=True)
class ImportSummary:
    """What an import did. Point counts cover this import only, not earlier use of the run."""

    records: int
    """``(step, metrics)`` records read and logged."""
    steps: int
    """Distinct steps among them."""
    first_step: int | None
    last_step: int | None
    points: int
    """(step, metric) values logged."""
    sent_points: int
    """Values the server stored."""
    ignored_points: int
    """Values not stored because their step already had one for that metric (a file
    imported again, steps the run holds already): the first value stands."""
    dropped_points: int
    """Values the client gave up on (see its log for why)."""
    pending_points: int
    """Values still unsent when the import returned (0 unless it was cut short)."""
    seconds: float
    run_id: str | None
    segment: int | None


class _Delivery:
    """Watches the run's counters while the import waits for the server."""

    def __init__(
        self,
        run: Run,
        *,
        stall_timeout: float,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.run = run
        self.start_sent = run.sent_points
        self.start_ignored = run.ignored_points
        self.start_dropped = run.dropped_points
        self._stall_timeout = stall_timeout
        self._clock = clock
        self._sleep = sleep

    def wait_until_at_most(
        self, limit: int, on_wait: Callable[[int], None], *, poll: float = 0.05
    ) -> None:
        """Sleep until no more than ``limit`` values are pending; `ImportAborted` on a stall."""
        settled = self._settled()
        moved_at = self._clock()
        while (pending := self.run.pending_points) > limit:
            now = self._clock()
            current = self._settled()
            if current != settled:
                settled, moved_at = current, now
            elif now - moved_at > self._stall_timeout:
                raise ImportAborted(self._stall_reason(pending))
            on_wait(pending)
            self._sleep(poll)

    def _settled(self) -> int:
        """Values the server has answered for (stored or ignored) or the client gave up on."""
        return self.run.sent_points + self.run.ignored_points + self.run.dropped_points

    def _stall_reason(self, pending: int) -> str:
        waited = f"{self._stall_timeout:.0f} s"
        if self.run.run_id is None:
            # The client retries an unreachable server, and stops for good on a refused
            # token; either way the run was never opened.
            return (
                f"the server did not open the run within {waited} (is the URL right, and the "
                "token an ingest token of this project? see the messages above)"
            )
        return f"the server took no data for {waited} with {pending:,} values waiting"


def import_records(
    records: Iterable[tuple[int, Mapping[str, float]]],
    run: Run,
    *,
    total: int | None = None,
    progress: ProgressBar | None = None,
    max_pending: int = MAX_PENDING_POINTS,
    stall_timeout: float = STALL_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ImportSummary:
    """Log every ``(step, metrics)`` of ``records`` through ``run.log``, then wait until the
    server has taken them all; return what happened.

    ``total`` (the expected number of records, an estimate is fine) and ``progress`` drive
    the progress bar. Reading pauses while more than ``max_pending`` values wait to be
    sent. Raises `ImportAborted` when the server takes nothing for ``stall_timeout``
    seconds (unreachable, or the token refused); errors of ``records`` (a bad line)
    propagate as they are, after the values before them were logged. The run is not
    finished here: its owner does that (``with Run(...) as run:``).

    >>> with Run(url, token=token, name="gpt2") as run:  # doctest: +SKIP
    ...     summary = import_records(parse_jsonl("metrics.jsonl"), run)
    """
    started = clock()
    delivery = _Delivery(run, stall_timeout=stall_timeout, clock=clock, sleep=sleep)
    steps: set[int] = set()
    count = points = 0

    def show_wait(pending: int) -> None:
        if progress is not None:
            progress.update(count, total=total, status=f"sending: {pending:,} values waiting")

    for step, metrics in records:
        run.log(metrics, step=step)
        count += 1
        points += len(metrics)
        steps.add(step)
        if progress is not None:
            progress.update(count, total=total)
        if run.pending_points > max_pending:
            delivery.wait_until_at_most(max_pending // 2, show_wait)
    delivery.wait_until_at_most(0, show_wait)
    if progress is not None:
        progress.update(count, total=total)
    return ImportSummary(
        records=count,
        steps=len(steps),
        first_step=min(steps, default=None),
        last_step=max(steps, default=None),
        points=points,
        sent_points=run.sent_points - delivery.start_sent,
        ignored_points=run.ignored_points - delivery.start_ignored,
        dropped_points=run.dropped_points - delivery.start_dropped,
        pending_points=run.pending_points,
        seconds=clock() - started,
        run_id=run.run_id,
        segment=run.segment,
    )
