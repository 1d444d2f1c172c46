"""Requests from the server that the trainer checkpoint or stop, read from the answers to
its metric batches.

The sender thread hands every answer to the run's `ControlInbox`; the training thread asks
`Run.should_stop() <normwatch.client.Run.should_stop>` and `should_checkpoint` between steps,
which read a flag and never wait on the network. The next batch tells the server the newest
request read (``control_read``), so a request is read once, however often a batch is
retried, and the server shows it as seen.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Literal

from ._reporting import logger

Action = Literal["checkpoint", "stop"]


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """A request from an admin (the dashboard, the API) or from an alert rule."""

    id: int
    action: Action
    reason: str
    source: str
    """"admin" or "rule"."""
    step: int | None
    """The run's last step the server knew of when the request was made."""
    received_at: float
    """When the answer that carried it arrived (Unix seconds)."""


class ControlInbox:
    """What the server asked of this run, as far as its answers have said. Thread-safe:
    the sender writes, the training thread reads."""

    def __init__(self, run_name: str) -> None:
        self._run_name = run_name
        self._lock = threading.Lock()
        self.read_up_to = 0
        """The newest request id read, sent with every batch."""
        self.received: tuple[ControlRequest, ...] = ()
        self.stop: ControlRequest | None = None
        self._checkpoint: ControlRequest | None = None

    def receive(self, answer: object) -> None:
        """Take the ``control`` list of a metric batch's answer; anything malformed is
        ignored (an older or a foreign server), never raised."""
        if not isinstance(answer, dict):
            return
        requests = answer.get("control")
        if not isinstance(requests, list):
            return
        for raw in requests:
            request = _parse(raw)
            if request is None:
                continue
            with self._lock:
                if request.id <= self.read_up_to:
                    continue
                self.read_up_to = request.id
                self.received += (request,)
                if request.action == "stop":
                    self.stop = self.stop or request
                else:
                    self._checkpoint = request
            logger.warning(
                "run %r: the server asks the trainer to %s (%s, request %d)%s",
                self._run_name,
                request.action,
                request.source,
                request.id,
                f": {request.reason}" if request.reason else "",
            )

    def take_checkpoint(self) -> ControlRequest | None:
        """The newest checkpoint request not taken yet (several unread count as one)."""
        if self._checkpoint is None:
            return None
        with self._lock:
            request, self._checkpoint = self._checkpoint, None
        return request


def _parse(raw: object) -> ControlRequest | None:
    if not isinstance(raw, dict):
        return None
    request_id, action = raw.get("id"), raw.get("action")
    if type(request_id) is not int or request_id <= 0 or action not in ("checkpoint", "stop"):
        return None
    step = raw.get("step")
    return ControlRequest(
        id=request_id,
        action=action,
        reason=str(raw.get("reason") or ""),
        source=str(raw.get("source") or ""),
        step=step if type(step) is int else None,
        received_at=time.time(),
    )
