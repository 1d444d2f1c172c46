"""HTTP calls to the ingest API, with bounded, jittered retries.

Outcome of one delivery, never an exception:

* ``delivered`` - a 2xx answer; ``body`` holds its parsed JSON (or ``None``).
* ``rejected``  - a permanent failure (a 4xx other than 408/429, or an answer that cannot be
  understood); retrying would fail the same way, so the caller drops the payload.
* ``abandoned`` - still failing when the caller ran out of time (``finish`` deadline).

Transport errors (anything the HTTP stack raises), 408, 429 and 5xx are retried with
exponential backoff and full jitter, capped at `MAX_BACKOFF` seconds, honouring the
server's ``Retry-After``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import httpx

from .retry import full_jitter, parse_retry_after

BASE_BACKOFF = 0.5
MAX_BACKOFF = 30.0
MAX_RETRY_AFTER = 300.0
"""Longest ``Retry-After`` obeyed; a larger value is treated as this many seconds."""

RETRYABLE_STATUS = frozenset({408, 429})

Pause = Callable[[float], bool]
"""Sleep for the given seconds; return False when the caller must give up instead."""

Budget = Callable[[], float | None]
"""Seconds the next request may take, or None when no time is left."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What became of one request after retries."""

    outcome: Literal["delivered", "rejected", "abandoned"]
    status_code: int | None = None
    body: object = None
    message: str = ""
    retried: bool = False
    """Sent more than once: an earlier attempt may have reached the server unanswered."""


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Full-jitter exponential backoff: uniform in ``[0, min(cap, base * 2**attempt)]``."""
    return full_jitter(attempt, rng, base=BASE_BACKOFF, cap=MAX_BACKOFF)


def retry_after(response: httpx.Response) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (delta-seconds or HTTP date), if any."""
    return parse_retry_after(
        response.headers.get("retry-after"), now=time.time(), cap=MAX_RETRY_AFTER
    )


def error_message(response: httpx.Response) -> str:
    """The server's explanation: FastAPI's ``detail`` when present, else the raw text."""
    text = response.text
    try:
        document = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(document, dict) and "detail" in document:
        detail = document["detail"]
        return detail if isinstance(detail, str) else json.dumps(detail)[:500]
    return text[:500]


def is_retryable(status_code: int) -> bool:
    """Overload and server faults are worth retrying; other 4xx answers are final."""
    return status_code in RETRYABLE_STATUS or status_code >= 500


class IngestApi:
    """The ingest endpoints over one `httpx.Client`.

    ``transport`` is passed straight to httpx, so tests hand in `httpx.MockTransport`.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str,
        timeout: float,
        transport: httpx.BaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )
        self._rng = rng or random.Random()

    def close(self) -> None:
        """Release the connection pool."""
        self._client.close()

    def create_run(self, document: bytes, *, pause: Pause, budget: Budget) -> Delivery:
        """``POST /api/v1/runs``: create or resume the run."""
        return self._send("POST", "/api/v1/runs", document, {}, pause=pause, budget=budget)

    def update_run(
        self,
        run_id: str,
        document: bytes,
        *,
        pause: Pause,
        budget: Budget,
        control_read: Callable[[], int] | None = None,
    ) -> Delivery:
        """``PATCH /api/v1/runs/{id}``: change the run's status; with ``control_read``, also
        say which control requests the trainer read."""
        return self._send(
            "PATCH",
            f"/api/v1/runs/{run_id}",
            document,
            {},
            pause=pause,
            budget=budget,
            control_read=control_read,
        )

    def post_metrics(
        self,
        run_id: str,
        gzipped: bytes,
        *,
        pause: Pause,
        budget: Budget,
        control_read: Callable[[], int] | None = None,
    ) -> Delivery:
        """``POST /api/v1/runs/{id}/metrics`` with a gzip-compressed columnar batch; with
        ``control_read`` (the newest control request read, asked again on each attempt)
        the answer carries the run's unread requests to its trainer."""
        return self._send(
            "POST",
            f"/api/v1/runs/{run_id}/metrics",
            gzipped,
            {"Content-Encoding": "gzip"},
            pause=pause,
            budget=budget,
            control_read=control_read,
        )

    def post_event(self, run_id: str, document: bytes, *, pause: Pause, budget: Budget) -> Delivery:
        """``POST /api/v1/runs/{id}/events``."""
        return self._send(
            "POST", f"/api/v1/runs/{run_id}/events", document, {}, pause=pause, budget=budget
        )

    def _send(
        self,
        method: str,
        path: str,
        content: bytes,
        headers: dict[str, str],
        *,
        pause: Pause,
        budget: Budget,
        control_read: Callable[[], int] | None = None,
    ) -> Delivery:
        """One request, retried; ``control_read`` is asked again on every attempt, so a
        retry says how far the trainer has read by then."""
        headers = {"Content-Type": "application/json", **headers}
        attempt = 0
        while True:
            request_timeout = budget()
            if request_timeout is None:
                return Delivery("abandoned")
            wait: float | None = None
            status_code: int | None = None
            message = ""
            try:
                response = self._client.request(
                    method,
                    path,
                    content=content,
                    headers=headers,
                    params=None if control_read is None else {"control_read": control_read()},
                    timeout=request_timeout,
                )
            except Exception as exc:
                # Whatever the HTTP stack raises (a network error, a proxy, a custom
                # transport), this attempt failed and nothing was stored twice by trying again.
                message = f"{type(exc).__name__}: {exc}"
            else:
                status_code = response.status_code
                if response.is_success:
                    return Delivery(
                        "delivered", status_code, _json_or_none(response), retried=attempt > 0
                    )
                if not is_retryable(status_code):
                    return Delivery("rejected", status_code, message=error_message(response))
                wait = retry_after(response)
            if wait is None:
                wait = backoff_delay(attempt, self._rng)
            if not pause(wait):
                return Delivery("abandoned", status_code, message=message)
            attempt += 1


def _json_or_none(response: httpx.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return None
