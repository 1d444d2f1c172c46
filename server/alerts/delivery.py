"""Sending alert notifications to generic webhooks and Slack.

One call to :meth:`Deliverer.deliver` is one attempt: it builds the body, signs it, checks the
target again, POSTs once with a timeout and reports an :class:`Attempt` without raising. The
outbox that stores notifications decides when to try again, with :func:`next_attempt_delay`,
for as long as attempts come back ``retryable``.

A webhook receives the JSON of :func:`webhook_payload` with these headers::

    X-Normwatch-Timestamp: <unix seconds>
    X-Normwatch-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>">  (with a secret)
    X-Normwatch-Delivery:  <notification id>   (the same on every retry: dedupe on it)

Receivers check the signature with :func:`verify`. Slack receives :func:`slack_payload`.

Channels are dicts ``{"type": "webhook"|"slack", "url": ..., "secret": ...}``, checked on
the way in by :func:`validate_channel` and shown on the way out by :func:`mask_channel`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import random
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

import httpx

from normwatch import __version__

from ..config import Settings
from .targets import (
    Resolver,
    Target,
    TargetRefused,
    TargetUnresolved,
    as_allow_list,
    parse_allow,
    resolve_target,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Attempt",
    "Deliverer",
    "Notification",
    "dashboard_link",
    "encode_body",
    "encode_number",
    "mask_channel",
    "next_attempt_delay",
    "parse_retry_after",
    "sign",
    "slack_payload",
    "validate_channel",
    "verify",
    "webhook_payload",
]

State = Literal["firing", "resolved"]

TIMESTAMP_HEADER = "X-Normwatch-Timestamp"
SIGNATURE_HEADER = "X-Normwatch-Signature"
DELIVERY_HEADER = "X-Normwatch-Delivery"
USER_AGENT = f"normwatch/{__version__}"
#: connect within 3 s; then at most 5 s for each read or write of the exchange.
DEFAULT_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
CHANNEL_TYPES = ("webhook", "slack")
SLACK_HOST = "hooks.slack.com"
MASK = "••••"
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 300.0
#: A receiver may ask for a pause, but not for one long enough to lose the alert's point.
RETRY_AFTER_CAP_S = 3600.0
#: Addresses of one host tried in turn when connecting fails outright (dual-stack hosts).
MAX_ADDRESSES = 4
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 512
_EXCERPT_BYTES = 2048
_RETRYABLE_STATUS = frozenset({408, 425, 429})


@dataclass(frozen=True)
class Notification:
    """One state change of one rule on one run's metric, as it is sent out.

    ``id`` is the idempotency key: the same on every retry, so receivers can drop repeats.
    ``fired_at`` is when this state change happened (a naive time is taken as UTC).
    ``url`` is the dashboard deep link, usually from :func:`dashboard_link`.
    """

    id: str
    state: State
    rule_id: str
    rule_name: str
    condition: Mapping[str, Any] = field(hash=False)
    run_id: str
    run_name: str
    project: str
    metric: str
    step: int
    value: float | None
    threshold: float | None
    reason: str
    fired_at: datetime
    url: str

    def __post_init__(self) -> None:
        if self.state not in ("firing", "resolved"):
            raise ValueError(f"state: must be 'firing' or 'resolved', got {self.state!r}")


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


def encode_number(value: float | None) -> float | str | None:
    """JSON has no NaN or Infinity: spell them ``"NaN"``/``"Infinity"``/``"-Infinity"``."""
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return encode_number(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def dashboard_link(base_url: str, run_id: str, metric: str, step: int, *, window: int = 200) -> str:
    """The run page zoomed on ``[step - window, step + window]`` with ``metric`` on the left.

    >>> dashboard_link("https://nw.example/", "r1", "grad/norm/total", 81000, window=100)
    'https://nw.example/runs/r1?left=grad%2Fnorm%2Ftotal&start=80900&end=81100'
    """
    query = urlencode({"left": metric, "start": max(0, step - window), "end": step + window})
    return f"{base_url.rstrip('/')}/runs/{quote(run_id, safe='')}?{query}"


def webhook_payload(notification: Notification) -> dict[str, Any]:
    """The generic webhook body: what changed, on which run, and where to look."""
    n = notification
    return {
        "id": n.id,
        "state": n.state,
        "rule": {
            "id": n.rule_id,
            "name": n.rule_name,
            "metric": n.metric,
            "condition": _json_safe(n.condition),
        },
        "run": {"id": n.run_id, "name": n.run_name, "project": n.project},
        "metric": n.metric,
        "step": n.step,
        "value": encode_number(n.value),
        "threshold": encode_number(n.threshold),
        "reason": n.reason,
        "url": n.url,
        "fired_at": _iso(n.fired_at),
    }


def _shown(value: float | None) -> str:
    if value is None:
        return "—"
    encoded = encode_number(value)
    return encoded if isinstance(encoded, str) else f"{value:.6g}"


def _mrkdwn(text: str, limit: int = 2000) -> str:
    """Slack reads ``&``, ``<`` and ``>`` as markup; names come from users."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped if len(escaped) <= limit else escaped[: limit - 1] + "…"


def slack_payload(notification: Notification) -> dict[str, Any]:
    """A Slack incoming-webhook body: ``text`` for notifications, ``blocks`` for the message."""
    n = notification
    firing = n.state == "firing"
    icon = ":red_circle:" if firing else ":large_green_circle:"
    word = "Firing" if firing else "Resolved"
    value, threshold = _shown(n.value), _shown(n.threshold)
    run = f"{n.project}/{n.run_name}"
    metric_code = _mrkdwn(n.metric).replace("`", "'")  # a backtick would end the code span
    summary = (
        f"{icon} {word}: {_mrkdwn(n.rule_name, 200)} — {_mrkdwn(n.metric, 200)} = {value} "
        f"(threshold {threshold}) at step {n.step:,} on {_mrkdwn(run, 200)}"
    )
    title = f"{icon} {word}: {n.rule_name}"
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": title[:150], "emoji": True},
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(n.reason) or summary}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Run*\n{_mrkdwn(run)}"},
                {"type": "mrkdwn", "text": f"*Metric*\n`{metric_code}`"},
                {"type": "mrkdwn", "text": f"*Value*\n{value}"},
                {"type": "mrkdwn", "text": f"*Threshold*\n{threshold}"},
                {"type": "mrkdwn", "text": f"*Step*\n{n.step:,}"},
                {"type": "mrkdwn", "text": f"*State*\n{icon} {word}"},
            ],
        },
    ]
    if n.url:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open in normwatch"},
                        "url": n.url,
                        "style": "danger" if firing else "primary",
                    }
                ],
            }
        )
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"{word} at {_iso(n.fired_at)} · {n.id}"}],
        }
    )
    text = f"{summary}. <{n.url}|Open in normwatch>" if n.url else summary
    return {"text": text, "blocks": blocks}


def encode_body(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes sent and signed: compact UTF-8 JSON, never a bare NaN."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`` keyed with ``secret``."""
    message = f"{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(
    secret: str,
    timestamp: str | int,
    signature: str,
    body: bytes,
    *,
    max_age_s: float = 300.0,
    now: float | None = None,
) -> bool:
    """Whether ``signature`` (the header value) signs ``body`` at ``timestamp``, for receivers.

    Timestamps further than ``max_age_s`` from ``now`` are refused, so that a captured
    request cannot be replayed later; the digests are compared in constant time.
    """
    try:
        stamp = int(timestamp)
    except (TypeError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - stamp) > max_age_s:
        return False
    expected = sign(secret, stamp, body).encode()
    return hmac.compare_digest(expected, signature.strip().encode())


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), capped."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


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
    ceiling = min(max_delay, BACKOFF_BASE_S * 2.0 ** min(attempt_number - 1, 64))
    delay = rng.uniform(0.0, ceiling)
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

    @classmethod
    def from_settings(
        cls, settings: Settings, *, transport: httpx.BaseTransport | None = None
    ) -> Deliverer:
        """A deliverer honouring ``NORMWATCH_WEBHOOK_ALLOW``."""
        return cls(transport=transport, allow=parse_allow(settings.webhook_allow))

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
        payload = slack_payload(notification) if kind == "slack" else webhook_payload(notification)
        body = encode_body(payload)
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


def mask_channel(channel: Mapping[str, Any], *, show_path: bool = True) -> dict[str, Any]:
    """``channel`` as API responses show it: no secret, no Slack token, no query values.

    With ``show_path`` false (what callers without the admin scope see), a webhook URL's
    path is masked too: many receivers put their credential there.

    >>> mask_channel({"type": "slack", "url": "https://hooks.slack.com/services/T/B/X"})
    {'type': 'slack', 'url': 'https://hooks.slack.com/services/••••'}
    >>> mask_channel({"type": "webhook", "url": "https://x.example/hook/T0k3n"}, show_path=False)
    {'type': 'webhook', 'url': 'https://x.example/••••'}
    """
    masked = dict(channel)
    if masked.get("secret") is not None:
        masked["secret"] = MASK
    url = masked.get("url")
    if isinstance(url, str):
        masked["url"] = _mask_url(url, slack=masked.get("type") == "slack", show_path=show_path)
    return masked


def _mask_url(url: str, *, slack: bool, show_path: bool = True) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    if not parts.scheme or not host:
        return MASK
    if ":" in host:
        host = f"[{host}]"
    origin = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    if slack:
        # The path of a Slack incoming webhook is its credential.
        prefix = "/services/" if parts.path.startswith("/services/") else "/"
        return f"{origin}{prefix}{MASK}"
    if parts.username is not None:
        userinfo = parts.username + (f":{MASK}" if parts.password is not None else "")
        origin = f"{parts.scheme}://{userinfo}@{origin.split('://', 1)[1]}"
    if not show_path:
        hidden = parts.path.strip("/") or parts.query or parts.fragment
        return origin + (f"/{MASK}" if hidden else parts.path)
    query = "&".join(f"{item.split('=', 1)[0]}={MASK}" for item in parts.query.split("&") if item)
    fragment = f"#{MASK}" if parts.fragment else ""
    return origin + parts.path + (f"?{query}" if query else "") + fragment


def validate_channel(
    channel: Mapping[str, Any],
    allow: Collection[str],
    *,
    field: str = "channel",
    resolve: Resolver = socket.getaddrinfo,
) -> dict[str, Any]:
    """Check a channel given to a rule and return it cleaned; ``ValueError`` names the field.

    ``field`` prefixes the messages (``"channels[1]"`` → ``"channels[1].url: ..."``). A host
    that does not resolve from here is accepted: it can reach nothing now, and every
    delivery checks it again.
    """
    if not isinstance(channel, Mapping):
        raise ValueError(f"{field}: must be an object with type and url")
    unknown = sorted(set(channel) - {"type", "url", "secret"})
    if unknown:
        raise ValueError(f"{field}: unknown field(s) {', '.join(unknown)}; use type, url, secret")
    kind = channel.get("type")
    if kind not in CHANNEL_TYPES:
        raise ValueError(f"{field}.type: must be 'webhook' or 'slack', got {kind!r}")
    url = channel.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"{field}.url: required, an http(s) URL")
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"{field}.url: longer than {MAX_URL_LENGTH} characters")
    allow_list = as_allow_list(allow)
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{field}.url: not a valid URL ({exc})") from None
    if kind == "slack":
        port = target.port or (443 if target.scheme == "https" else 80)
        official = target.host == SLACK_HOST and target.scheme == "https"
        if not official and not allow_list.permits_host(target.host, port):
            raise ValueError(
                f"{field}.url: Slack incoming webhooks are "
                f"https://{SLACK_HOST}/services/..., got {_mask_url(url, slack=True)}"
            )
    try:
        resolve_target(url, allow_list, resolve=resolve)
    except TargetUnresolved:
        pass
    except TargetRefused as exc:
        raise ValueError(f"{field}.url: {exc}") from None
    cleaned: dict[str, Any] = {"type": kind, "url": url}
    secret = channel.get("secret")
    if secret is not None:
        if kind != "webhook":
            raise ValueError(f"{field}.secret: only webhook channels are signed; remove it")
        if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_LENGTH:
            raise ValueError(f"{field}.secret: must be a string of 1 to {MAX_SECRET_LENGTH} chars")
        cleaned["secret"] = secret
    return cleaned
