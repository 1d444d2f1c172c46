"""Alert delivery against a real HTTP receiver on 127.0.0.1: bodies, headers, signatures,
statuses, timeouts, the address connected to, and retry timing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import random
import socket
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from normwatch import __version__
from normwatch.server.alerts.channels import validate_channel
from normwatch.server.alerts.delivery import (
    Attempt,
    Deliverer,
    next_attempt_delay,
    parse_retry_after,
)
from normwatch.server.alerts.signing import verify
from normwatch.server.alerts.targets import parse_allow
from tests.helpers.dns import DNS, resolver
from tests.helpers.notifications import NOW, notification
from tests.helpers.receivers import Reply, WebhookReceiver

SECRET = "s3cret"
LOCAL = parse_allow("127.0.0.1")
SENT = notification()


# --- webhook ---------------------------------------------------------------------------------


def test_webhook_body_headers_and_signature(
    receiver: WebhookReceiver, deliverer: Deliverer
) -> None:
    channel = {"type": "webhook", "url": receiver.url("/hook"), "secret": SECRET}
    attempt = deliverer.deliver(channel, notification())
    assert attempt.ok and attempt.status_code == 200 and attempt.error is None
    [request] = receiver.received
    assert request.path == "/hook"
    assert json.loads(request.body) == {
        "id": "ntf_01",
        "state": "firing",
        "rule": {
            "id": "rule_7",
            "name": "grad norm 5+",
            "metric": "grad/norm/total",
            "condition": {"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 1},
        },
        "run": {"id": "run_42", "name": "32b-exp1295", "project": "marin"},
        "metric": "grad/norm/total",
        "step": 81000,
        "value": 7.25,
        "threshold": 5.0,
        "reason": "grad/norm/total = 7.25 >= 5 for 1 step",
        "url": "https://nw.example/runs/run_42?left=grad%2Fnorm%2Ftotal&start=80800&end=81200",
        "fired_at": "2024-05-01T12:30:00Z",
        "repeat": 0,
        "worst": None,
    }
    headers = request.headers
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == f"normwatch/{__version__}"
    assert headers["x-normwatch-delivery"] == "ntf_01"
    assert headers["x-normwatch-timestamp"] == "1700000000"
    assert headers["host"] == f"127.0.0.1:{receiver.port}"
    # An independent HMAC over "<timestamp>.<raw body>", as a receiver would compute it.
    reference = hmac.new(SECRET.encode(), b"1700000000." + request.body, hashlib.sha256)
    assert headers["x-normwatch-signature"] == "sha256=" + reference.hexdigest()
    stamp, signature = headers["x-normwatch-timestamp"], headers["x-normwatch-signature"]
    assert verify(SECRET, stamp, signature, request.body, now=NOW)


def test_webhook_without_secret_is_not_signed(
    receiver: WebhookReceiver, deliverer: Deliverer
) -> None:
    attempt = deliverer.deliver({"type": "webhook", "url": receiver.url("/h")}, notification())
    assert attempt.ok
    [request] = receiver.received
    assert "x-normwatch-signature" not in request.headers
    assert request.headers["x-normwatch-timestamp"] == "1700000000"


@pytest.mark.parametrize(
    ("value", "spelled"), [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")]
)
def test_non_finite_values_are_strings(
    receiver: WebhookReceiver, deliverer: Deliverer, value: float, spelled: str
) -> None:
    condition = {"kind": "spike", "ratio": value, "window": [1.0, value]}
    sent = notification(value=value, threshold=value, condition=condition)
    assert deliverer.deliver({"type": "webhook", "url": receiver.url("/h")}, sent).ok

    def no_bare_constants(token: str) -> None:
        raise AssertionError(f"bare {token} in the body")

    body = json.loads(receiver.received[0].body, parse_constant=no_bare_constants)
    assert body["value"] == spelled
    assert body["threshold"] == spelled
    assert body["rule"]["condition"] == {
        "kind": "spike",
        "ratio": spelled,
        "window": [1.0, spelled],
    }


def test_slack_body_names_everything_and_links_the_zoom(
    receiver: WebhookReceiver, deliverer: Deliverer
) -> None:
    url = receiver.url("/services/T000/B000/XXXX")
    channel = validate_channel({"type": "slack", "url": url}, LOCAL)
    sent = notification(run_name="a<b>&c")
    attempt = deliverer.deliver(channel, sent)
    assert attempt.ok
    [request] = receiver.received
    assert "x-normwatch-signature" not in request.headers
    assert request.headers["x-normwatch-delivery"] == "ntf_01"
    body = json.loads(request.body)
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith(":red_circle: Firing: grad norm 5+")
    for part in ("7.25", "threshold 5", "81,000", "marin/a&lt;b&gt;&amp;c"):
        assert part in body["text"]
    header, reason, facts, actions, context = body["blocks"]
    assert header == {
        "type": "header",
        "text": {"type": "plain_text", "text": ":red_circle: Firing: grad norm 5+", "emoji": True},
    }
    assert reason["text"]["text"] == "grad/norm/total = 7.25 &gt;= 5 for 1 step"
    assert [f["text"] for f in facts["fields"]] == [
        "*Run*\nmarin/a&lt;b&gt;&amp;c",
        "*Metric*\n`grad/norm/total`",
        "*Value*\n7.25",
        "*Threshold*\n5",
        "*Step*\n81,000",
        "*State*\n:red_circle: Firing",
    ]
    [button] = actions["elements"]
    assert button["text"]["text"] == "Open in normwatch" and button["style"] == "danger"
    link = urlsplit(button["url"])
    query = {k: v[0] for k, v in parse_qs(link.query).items()}
    assert link.path == "/runs/run_42" and query["left"] == "grad/norm/total"
    assert int(query["start"]) < 81000 < int(query["end"])
    assert f"<{button['url']}|Open in normwatch>" in body["text"]
    assert "2024-05-01T12:30:00Z" in context["elements"][0]["text"]


# --- statuses, failures, timeouts ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "ok", "retryable"),
    [
        (Reply(204, body=b""), True, False),
        (Reply(500, body=b"boom"), False, True),
        (Reply(502), False, True),
        (Reply(408), False, True),
        (Reply(425), False, True),
        (Reply(400, body=b"invalid_payload"), False, False),
        (Reply(404, body=b"no_service"), False, False),
        (Reply(410), False, False),
        (Reply(302, headers={"Location": "http://127.0.0.1:1/x"}), False, False),
    ],
)
def test_status_decides_retry(
    receiver: WebhookReceiver, deliverer: Deliverer, reply: Reply, ok: bool, retryable: bool
) -> None:
    receiver.replies["/h"] = reply
    attempt = deliverer.deliver({"type": "webhook", "url": receiver.url("/h")}, notification())
    assert (attempt.ok, attempt.retryable, attempt.status_code) == (ok, retryable, reply.status)
    assert len(receiver.received) == 1  # one attempt is one request; redirects not followed
    if not ok:
        assert attempt.error is not None and attempt.error.startswith(f"HTTP {reply.status}")
        if reply.body and reply.status != 302:
            assert reply.body.decode() in attempt.error


@pytest.mark.parametrize(
    ("header", "seconds"), [("7", 7.0), (formatdate(NOW + 120, usegmt=True), 120.0)]
)
def test_retry_after_is_reported(
    receiver: WebhookReceiver, deliverer: Deliverer, header: str, seconds: float
) -> None:
    receiver.replies["/h"] = Reply(429, headers={"Retry-After": header})
    attempt = deliverer.deliver({"type": "webhook", "url": receiver.url("/h")}, notification())
    assert (attempt.ok, attempt.retryable, attempt.status_code) == (False, True, 429)
    assert attempt.retry_after_s == seconds


def test_connection_refused_is_retryable(deliverer: Deliverer) -> None:
    # Bound but not listening: connecting is refused, and no one else can take the port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/h"
        attempt = deliverer.deliver({"type": "webhook", "url": url}, notification())
    assert (attempt.ok, attempt.retryable, attempt.status_code) == (False, True, None)
    assert attempt.error is not None and attempt.error.startswith("cannot connect")


def test_timeout_is_retryable_and_bounded(receiver: WebhookReceiver) -> None:
    receiver.replies["/slow"] = Reply(delay_s=10.0)
    with Deliverer(allow=LOCAL, timeout=httpx.Timeout(0.5)) as deliverer:
        attempt = deliverer.deliver({"type": "webhook", "url": receiver.url("/slow")}, SENT)
    assert (attempt.ok, attempt.retryable, attempt.status_code) == (False, True, None)
    assert attempt.error is not None and "timed out" in attempt.error
    assert 0.4 < attempt.duration_s < 2.0


def test_a_status_that_arrived_decides_even_if_the_body_stalls(receiver: WebhookReceiver) -> None:
    receiver.replies["/h"] = Reply(200, body=b"accepted", body_delay_s=10.0)
    with Deliverer(allow=LOCAL, timeout=httpx.Timeout(0.3)) as deliverer:
        attempt = deliverer.deliver({"type": "webhook", "url": receiver.url("/h")}, SENT)
    assert (attempt.ok, attempt.status_code) == (True, 200)
    assert attempt.duration_s < 2.0


def test_unresolvable_host_is_retryable() -> None:
    with Deliverer(resolve=resolver({})) as deliverer:
        attempt = deliverer.deliver({"type": "webhook", "url": "https://gone.example/h"}, SENT)
    assert (attempt.ok, attempt.retryable) == (False, True)
    assert attempt.error is not None and "does not resolve" in attempt.error


@pytest.mark.parametrize(
    "channel", [{}, {"type": "email", "url": "https://x.example"}, {"type": "webhook", "url": 3}]
)
def test_a_broken_channel_is_a_failed_attempt_not_an_exception(
    deliverer: Deliverer, channel: dict[str, Any]
) -> None:
    attempt = deliverer.deliver(channel, notification())
    assert (attempt.ok, attempt.retryable) == (False, False)


# --- the address connected to ----------------------------------------------------------------


def test_delivery_connects_to_the_checked_address(receiver: WebhookReceiver) -> None:
    port = receiver.port
    dns = resolver({"hooks.test": ["127.0.0.1"]})
    with Deliverer(allow=LOCAL, resolve=dns) as deliverer:
        channel = {"type": "webhook", "url": f"http://hooks.test:{port}/h"}
        attempt = deliverer.deliver(channel, SENT)
    assert attempt.ok
    assert receiver.received[0].headers["host"] == f"hooks.test:{port}"


def test_a_name_rebound_after_validation_is_refused_at_delivery(receiver: WebhookReceiver) -> None:
    port = receiver.port
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])

    def rebinding(host: str, port: int) -> list[tuple[Any, ...]]:
        return resolver({host: next(answers)})(host, port)

    channel = validate_channel(
        {"type": "webhook", "url": f"http://rebind.example:{port}/h"}, (), resolve=rebinding
    )
    with Deliverer(resolve=rebinding) as deliverer:
        attempt = deliverer.deliver(channel, notification())
    assert (attempt.ok, attempt.retryable) == (False, False)
    assert attempt.error is not None and "127.0.0.1" in attempt.error
    assert receiver.received == []


def test_https_keeps_host_and_tls_name_while_pinning_the_address() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    with Deliverer(transport=httpx.MockTransport(handle), resolve=DNS) as deliverer:
        attempt = deliverer.deliver(
            {"type": "webhook", "url": "https://hooks.example/in?k=v"}, notification()
        )
    assert attempt.ok
    [request] = seen
    assert str(request.url) == "https://93.184.216.34/in?k=v"
    assert request.headers["host"] == "hooks.example"
    assert request.extensions["sni_hostname"] == "hooks.example"


# --- retry timing ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_backoff_is_full_jitter_under_an_exponential_cap(seed: int) -> None:
    rng = random.Random(seed)
    for n in range(1, 40):
        ceiling = min(300.0, 0.5 * 2 ** (n - 1))
        delays = [next_attempt_delay(n, None, rng) for _ in range(50)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling / 2  # spread over the range, not pinned to its floor
    assert next_attempt_delay(10_000, None, rng) <= 300.0


def test_backoff_honours_retry_after() -> None:
    rng, same = random.Random(0), random.Random(0)
    # Each call draws its jitter, uniform(0, ceiling), whether or not a Retry-After came.
    jitter = [same.uniform(0.0, 0.5), same.uniform(0.0, 0.5), same.uniform(0.0, 300.0)]
    assert max(jitter[:2]) < 30.0
    assert next_attempt_delay(1, 30.0, rng) == 30.0
    assert next_attempt_delay(1, 10**9, rng) == 3600.0
    assert next_attempt_delay(20, 0.0, rng) == jitter[2]  # a Retry-After of 0 adds no wait
    with pytest.raises(ValueError, match="attempt_number"):
        next_attempt_delay(0, None, rng)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("0", 0.0),
        (" 12 ", 12.0),
        ("1e9", 3600.0),
        ("-5", 0.0),
        ("nan", None),
        ("soon", None),
        (formatdate(NOW + 30, usegmt=True), 30.0),
        (formatdate(NOW - 30, usegmt=True), 0.0),
    ],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def test_attempt_is_plain_data() -> None:
    attempt = Attempt(False, True, 503, "HTTP 503", 0.1, retry_after_s=2.0)
    assert dataclasses.asdict(attempt)["retry_after_s"] == 2.0
