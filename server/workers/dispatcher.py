"""The dispatcher: delivers the notification outbox and runs the clock for stale rules and
for repeats by the wall clock (``repeat_every_seconds``).

One daemon thread per worker process. Ingest wakes it after a commit that owed
notifications, so a crossing point reaches its webhook in well under a second; otherwise it
polls every ``tick_s`` for retries that came due, other workers' notifications, stale
runs and firing alerts due to be sent again. Notifications are leased (see
`storage.outbox.claim_notifications`), so several workers never send the same one at the
same time, and one that a killed worker had leased is sent after the lease expires. Each
try is recorded; receivers dedupe on ``X-Normwatch-Delivery``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ..alerts import delivery, payloads
from ..db import is_unavailable
from ..models import (
    utcnow,
)
from ..services import alerting, repeats
from ..storage.outbox import claim_notifications, notification_context, record_attempt

log = logging.getLogger("normwatch.alerts")


class Dispatcher:
    """Delivers owed notifications with retries and backoff; never raises out of its loop."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        deliverer: delivery.Deliverer,
        *,
        base_url: str,
        tick_s: float = 1.0,
        batch_size: int = 20,
        lease_s: float = 60.0,
        max_retry_delay_s: float = delivery.BACKOFF_CAP_S,
        rng: random.Random | None = None,
        ahead: Callable[[], AbstractContextManager[object]] | None = None,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        """``ahead`` marks the dispatcher's deliveries as work that large metric batches in
        this worker stand aside for (a crossing point's notification, not bulk upload).
        ``now`` is the clock that leases, schedules retries, stamps deliveries and decides
        which runs went stale and which alerts are due to be sent again (a test's own, to
        play minutes in seconds)."""
        self._ahead = ahead or contextlib.nullcontext
        self._sessions = sessions
        self._deliverer = deliverer
        self._base_url = base_url
        self._tick_s = tick_s
        self._batch_size = batch_size
        self._lease = timedelta(seconds=lease_s)
        self._max_retry_delay = max_retry_delay_s
        self._rng = rng or random.Random()
        self._now = now
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def deliverer(self) -> delivery.Deliverer:
        return self._deliverer

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="normwatch-dispatcher", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._deliverer.close()

    def wake(self) -> None:
        """Deliver now rather than at the next tick."""
        self._wake.set()

    def _run(self) -> None:
        clock_due = 0.0
        while not self._stop.is_set():
            woken = self._wake.wait(self._tick_s)
            self._wake.clear()
            try:
                # What ingest woke it for goes out first; the clock's checks (stale runs,
                # repeats by the clock) keep to the tick, off the path of a crossing point.
                self._deliver_all()
                if not woken or time.monotonic() >= clock_due:
                    clock_due = time.monotonic() + self._tick_s
                    if self.check_stale() + self.check_repeats():
                        self._deliver_all()
            except Exception as exc:
                if is_unavailable(exc):
                    log.warning("dispatcher pass: database unavailable (%s); next tick", exc)
                else:
                    log.exception("dispatcher pass failed; retrying at the next tick")

    def _deliver_all(self) -> None:
        with self._ahead():
            while self.deliver_due() and not self._stop.is_set():
                pass

    def check_stale(self) -> int:
        try:
            with self._sessions() as session, session.begin():
                owed = alerting.check_stale_runs(session, self._now().timestamp())
        except SQLAlchemyError as exc:  # e.g. two workers creating the same state row
            log.debug("stale check skipped: %s", exc)
            return 0
        return owed

    def check_repeats(self) -> int:
        """Send again the firing alerts that went ``repeat_every_seconds`` without a
        notification; returns how many notifications that owes."""
        try:
            with self._sessions() as session, session.begin():
                owed = repeats.send_due_repeats(session, self._now().timestamp())
        except SQLAlchemyError as exc:  # e.g. a lock wait that ended in a deadlock
            log.debug("repeat check skipped: %s", exc)
            return 0
        return owed

    def deliver_due(self) -> int:
        """Lease and try every due notification once; returns how many were tried."""
        now = self._now()
        with self._sessions() as session, session.begin():
            claimed = claim_notifications(session, now, now + self._lease, self._batch_size)
        for notification_id in claimed:
            self._deliver_one(notification_id)
        return len(claimed)

    def _deliver_one(self, notification_id: int) -> None:
        with self._sessions() as session:
            found = self._context(session, notification_id)
        if found is None:
            return
        channel, message = found
        attempt = self._deliverer.deliver(channel, message)
        with self._sessions() as session, session.begin():
            row = record_attempt(
                session,
                notification_id,
                attempt.status_code,
                attempt.error,
                attempt.duration_s * 1000.0,
            )
            if row is None:
                return
            if attempt.ok:
                row.status = "delivered"
                row.delivered_at = self._now()
                row.last_error = None
            elif attempt.retryable:
                delay = delivery.next_attempt_delay(
                    row.attempts, attempt.retry_after_s, self._rng, max_delay=self._max_retry_delay
                )
                row.next_attempt_at = self._now() + timedelta(seconds=delay)
                row.last_error = attempt.error or f"HTTP {attempt.status_code}"
            else:
                row.status = "failed"
                row.last_error = attempt.error or f"HTTP {attempt.status_code}"
                log.warning("notification %d failed for good: %s", notification_id, row.last_error)

    def _context(
        self, session: Session, notification_id: int
    ) -> tuple[dict[str, object], payloads.Notification] | None:
        row = notification_context(session, notification_id)
        if row is None:
            return None
        notification, alert, rule, run, project = row
        channels = rule.channels or []
        if notification.channel_index >= len(channels):
            return None
        step = alert.step if alert.step is not None else (run.last_step or 0)
        message = payloads.Notification(
            id=str(notification.id),
            state=alert.state,  # type: ignore[arg-type]
            rule_id=str(rule.id),
            rule_name=rule.name,
            condition=rule.condition,
            run_id=run.id,
            run_name=run.name,
            project=project,
            metric=alert.metric,
            step=step,
            value=math.nan if alert.value is None else alert.value,  # NaN is stored as NULL
            threshold=alert.threshold,
            reason=alert.reason,
            fired_at=alert.created_at,
            url=payloads.dashboard_link(self._base_url, run.id, alert.metric, step),
            repeat=alert.repeat or 0,
            worst=alert.worst,
            members=tuple(alert.members or ()),
            rule_metric=rule.metric or "",
        )
        return dict(channels[notification.channel_index]), message
