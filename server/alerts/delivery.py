"""Sending alert notifications to generic webhooks, Slack, Alertmanager and PagerDuty.

One call to :meth:`Deliverer.deliver` is one attempt: it builds the body, signs it, checks the
target again, POSTs once with a timeout and reports an :class:`Attempt` without raising. The
outbox that stores notifications decides when to try again, with :func:`next_attempt_delay`,
for as long as attempts come back ``retryable``.

A webhook receives the JSON of :func:`.payloads.webhook_payload` with these headers::

    X-Normwatch-Timestamp: <unix seconds>
    X-Normwatch-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>">  (with a secret)
    X-Normwatch-Delivery:  <notification id>   (the same on every retry: dedupe on it)

Receivers check the signature with :func:`.signing.verify`. Slack receives
:func:`.payloads.slack_payload`, an Alertmanager :func:`.payloads.alertmanager_payload`,
PagerDuty :func:`.payloads.pagerduty_payload`.

Channels are checked and masked by :mod:`.channels`.
"""

from __future__ import annotations

import importlib.metadata
import random
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from normwatch.client import retry

from .channels import CHANNEL_TYPES
from .payloads import (
    Notification,
    alertmanager_payload,
    encode_body,
    pagerduty_payload,
    slack_payload,
    webhook_payload,
)
from .signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from .targets import (
    Resolver,
    Target,
    TargetRefused,
    TargetUnresolved,
    as_allow_list,
    resolve_target,
)

__all__ = [
    "Attempt",
    "DEFAULT_TIMEOUT",
    "DELIVERY_HEADER",
    "Deliverer",
    "error_summary",
    "next_attempt_delay",
    "parse_retry_after",
]


def _version() -> str:
    """The installed distribution's version (the server does not import the CLI package)."""
    try:
        return importlib.metadata.version("normwatch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


DELIVERY_HEADER = "X-Normwatch-Delivery"


USER_AGENT = f"normwatch/{_version()}"


#: connect within 3 s; then at most 5 s for each read or write of the exchange.
DEFAULT_TIMEOUT = httpx.Timeout(5.0, connect=3.0)


BACKOFF_BASE_S = 0.5


BACKOFF_CAP_S = 300.0


#: A receiver may ask for a pause, but not for one long enough to lose the alert's point.
RETRY_AFTER_CAP_S = 3600.0


#: Addresses of one host tried in turn when connecting fails outright (dual-stack hosts).
MAX_ADDRESSES = 4


_EXCERPT_BYTES = 2048


_RETRYABLE_STATUS = frozenset({408, 425, 429})


@dataclass(frozen=True)
class Attempt:
    """What one delivery attempt came to.

    ``retryable`` is meaningful when not ``ok``: try again later (connection failures,
    timeouts, 408, 425, 429, 5xx) or give up (other statuses, refused targets).
    ``retry_after_s`` is the receiver's ``Retry-After``, in seconds, when it sent one.
    """

    ok: bool
    retryable: bool
    status_code: int | None
    error: str | None
    duration_s: float
    retry_after_s: float | None = None


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), capped."""
    return retry.parse_retry_after(value, now=now, cap=RETRY_AFTER_CAP_S)


def next_attempt_delay(
    attempt_number: int,
    retry_after: float | None,
    rng: random.Random,
    *,
    max_delay: float = BACKOFF_CAP_S,
) -> float:
    """Seconds to wait before the next try, after ``attempt_number`` (≥ 1) failed attempts.

    Full jitter over an exponential ceiling, ``uniform(0, min(max_delay, 0.5 · 2^(n-1)))``, so
    that many notifications failing together do not retry together; never sooner than
    the receiver's ``Retry-After`` (itself capped at an hour).
    """
    if attempt_number < 1:
        raise ValueError(f"attempt_number: counts failed attempts from 1, got {attempt_number}")
    delay = retry.full_jitter(attempt_number - 1, rng, base=BACKOFF_BASE_S, cap=max_delay)
    if retry_after is not None:
        delay = max(delay, min(retry_after, RETRY_AFTER_CAP_S))
    return delay


class Deliverer:
    """Posts notifications to channels, one attempt per :meth:`deliver` call.

    ``client`` (or a ``transport`` for a client built here) carries the requests; a client
    passed in is used as it is, so give it ``trust_env=False`` unless a proxy is wanted.
    Each attempt resolves and checks the target again and connects to an address it
    checked, with the URL's host kept as ``Host`` and TLS server name: a DNS answer that
    changes after the check cannot redirect the request. Redirects are not followed.
    The timeout is per phase (connect, each read or write), not one total deadline: a
    receiver trickling bytes can hold an attempt longer than ``timeout.read``.
    """

    def __init__(
        self,
        client: httpx.Client | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        allow: Collection[str] = (),
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        resolve: Resolver = socket.getaddrinfo,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if client is not None and transport is not None:
            raise ValueError("pass a client or a transport, not both")
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.Client(transport=transport, trust_env=False, follow_redirects=False)
        )
        self._allow = as_allow_list(allow)
        self._timeout = timeout
        self._resolve = resolve
        self._clock = clock

    def close(self) -> None:
        """Close the client if it was built here."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Deliverer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def deliver(self, channel: Mapping[str, Any], notification: Notification) -> Attempt:
        """Send ``notification`` to ``channel`` once; never raises."""
        started = time.monotonic()
        try:
            return self._deliver(channel, notification, started)
        except Exception as exc:  # a bug here must not take the outbox worker down
            return _failed(started, f"unexpected {type(exc).__name__}: {exc}", retryable=True)

    def _deliver(
        self, channel: Mapping[str, Any], notification: Notification, started: float
    ) -> Attempt:
        kind, url = channel.get("type"), channel.get("url")
        if kind not in CHANNEL_TYPES or not isinstance(url, str):
            error = f"not a channel: type {kind!r}, url of type {type(url).__name__}"
            return _failed(started, error, retryable=False)
        body = encode_body(_payload(kind, channel, notification))
        timestamp = int(self._clock())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            DELIVERY_HEADER: notification.id,
            TIMESTAMP_HEADER: str(timestamp),
        }
        secret = channel.get("secret")
        if kind == "webhook" and isinstance(secret, str) and secret:
            headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
        try:
            target = resolve_target(url, self._allow, resolve=self._resolve)
        except TargetUnresolved as exc:
            return _failed(started, str(exc), retryable=True)
        except TargetRefused as exc:
            return _failed(started, f"target refused: {exc}", retryable=False)
        failures: list[str] = []
        for address in target.addresses[:MAX_ADDRESSES]:
            try:
                return self._post(target, str(address), headers, body, started)
            except httpx.ConnectError as exc:
                # Nothing was sent, so the next address of the host can be tried safely.
                failures.append(f"{address}: {exc or type(exc).__name__}")
        return _failed(started, "cannot connect: " + "; ".join(failures), retryable=True)

    def _post(
        self, target: Target, address: str, headers: dict[str, str], body: bytes, started: float
    ) -> Attempt:
        extensions = {"sni_hostname": target.host} if target.url.scheme == "https" else {}
        try:
            with self._client.stream(
                "POST",
                target.url.copy_with(host=address),
                content=body,
                headers={**headers, "Host": target.url.netloc.decode("ascii")},
                timeout=self._timeout,
                extensions=extensions,
                follow_redirects=False,
            ) as response:
                try:
                    excerpt = _read_excerpt(response)
                except httpx.TransportError:
                    excerpt = ""  # the status has arrived, and it alone decides
        except httpx.ConnectError:
            raise
        except httpx.TimeoutException as exc:
            return _failed(started, f"timed out ({type(exc).__name__})", retryable=True)
        except httpx.TransportError as exc:
            return _failed(started, f"{type(exc).__name__}: {exc}", retryable=True)
        return self._judge(response, excerpt, started)

    def _judge(self, response: httpx.Response, excerpt: str, started: float) -> Attempt:
        status = response.status_code
        retry_after = parse_retry_after(response.headers.get("Retry-After"), now=self._clock())
        if 200 <= status < 300:
            return Attempt(True, False, status, None, time.monotonic() - started)
        if 300 <= status < 400:
            location = response.headers.get("Location", "?")
            error = f"HTTP {status}: redirects are not followed (to {location}); use the final URL"
        else:
            error = f"HTTP {status}" + (f": {excerpt}" if excerpt else "")
        retryable = status in _RETRYABLE_STATUS or status >= 500
        return Attempt(False, retryable, status, error, time.monotonic() - started, retry_after)


def error_summary(error: str | None) -> str | None:
    """A delivery error without what the receiver said or where it pointed: the part
    before the first colon (``"HTTP 500: <body>"`` → ``"HTTP 500"``).

    >>> error_summary("HTTP 502: upstream token=abc expired")
    'HTTP 502'
    >>> error_summary("timed out (ReadTimeout)")
    'timed out (ReadTimeout)'
    """
    if error is None:
        return None
    return error.split(":", 1)[0].strip()


def _read_excerpt(response: httpx.Response) -> str:
    """The start of the response body, for the error message; the rest is not waited for."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= _EXCERPT_BYTES:
            break
    text = b"".join(chunks)[:_EXCERPT_BYTES].decode("utf-8", "replace")
    return " ".join(text.split())[:200]


def _failed(started: float, error: str, *, retryable: bool) -> Attempt:
    return Attempt(False, retryable, None, error, time.monotonic() - started)


def _payload(kind: str, channel: Mapping[str, Any], notification: Notification) -> Any:
    """What a channel of ``kind`` is sent for ``notification``."""
    if kind == "slack":
        return slack_payload(notification)
    if kind == "alertmanager":
        return alertmanager_payload(notification)
    if kind == "pagerduty":
        key = channel.get("routing_key")
        severity = channel.get("severity", "error")
        return pagerduty_payload(notification, str(key), str(severity))
    return webhook_payload(notification)
