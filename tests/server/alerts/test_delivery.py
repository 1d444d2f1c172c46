"""Alert delivery against a real HTTP receiver on 127.0.0.1, and the guard on alert targets."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import json
import math
import random
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from normwatch.server.alerts.channels import mask_channel, validate_channel
from normwatch.server.alerts.delivery import (
    Attempt,
    Deliverer,
    next_attempt_delay,
    parse_retry_after,
)
from normwatch.server.alerts.payloads import (
    Notification,
    dashboard_link,
    encode_body,
    slack_payload,
    webhook_payload,
)
from normwatch.server.alerts.signing import sign, verify
from normwatch.server.alerts.targets import (
    TargetRefused,
    TargetUnresolved,
    check_target,
    parse_allow,
    resolve_target,
)

from normwatch import __version__

NOW = 1_700_000_000.0
SECRET = "s3cret"
LOCAL = parse_allow("127.0.0.1")


# --- a real receiver -------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay_s: float = 0.0
    body_delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver(ThreadingHTTPServer):
    """Records every POST and answers with the ``Reply`` configured for its path."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[Received] = []
        self.replies: dict[str, Reply] = {}
        self.release = threading.Event()  # ends a slow reply's wait at teardown

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected here


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.received.append(Received(self.path, headers, body))
        reply = self.server.replies.get(self.path, Reply())
        if reply.delay_s:
            self.server.release.wait(reply.delay_s)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if reply.body_delay_s:
            self.wfile.flush()
            self.server.release.wait(reply.body_delay_s)
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def deliverer() -> Iterator[Deliverer]:
    with Deliverer(allow=LOCAL, clock=lambda: NOW) as d:
        yield d


def notification(**changes: Any) -> Notification:
    base = Notification(
        id="ntf_01",
        state="firing",
        rule_id="rule_7",
        rule_name="grad norm 5+",
        condition={"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 1},
        run_id="run_42",
        run_name="32b-exp1295",
        project="marin",
        metric="grad/norm/total",
        step=81000,
        value=7.25,
        threshold=5.0,
        reason="grad/norm/total = 7.25 >= 5 for 1 step",
        fired_at=datetime(2024, 5, 1, 12, 30, tzinfo=UTC),
        url=dashboard_link("https://nw.example", "run_42", "grad/norm/total", 81000),
    )
    return dataclasses.replace(base, **changes)


SENT = notification()


def resolver(table: Mapping[str, list[str]]) -> Callable[[str, int], list[tuple[Any, ...]]]:
    """A stand-in for getaddrinfo answering from ``table``; unknown names do not resolve."""

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        out: list[tuple[Any, ...]] = []
        for address in table[host]:
            if ipaddress.ip_address(address).version == 6:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return out

    return resolve


# --- webhook ---------------------------------------------------------------------------------


def test_webhook_body_headers_and_signature(receiver: Receiver, deliverer: Deliverer) -> None:
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
    }
    headers = request.headers
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == f"normwatch/{__version__}"
    assert headers["x-normwatch-delivery"] == "ntf_01"
    assert headers["x-normwatch-timestamp"] == "1700000000"
    assert headers["host"] == f"127.0.0.1:{receiver.server_address[1]}"
    # An independent HMAC over "<timestamp>.<raw body>", as a receiver would compute it.
    reference = hmac.new(SECRET.encode(), b"1700000000." + request.body, hashlib.sha256)
    assert headers["x-normwatch-signature"] == "sha256=" + reference.hexdigest()
    stamp, signature = headers["x-normwatch-timestamp"], headers["x-normwatch-signature"]
    assert verify(SECRET, stamp, signature, request.body, now=NOW)


def test_webhook_without_secret_is_not_signed(receiver: Receiver, deliverer: Deliverer) -> None:
    attempt = deliverer.deliver({"type": "webhook", "url": receiver.url("/h")}, notification())
    assert attempt.ok
    [request] = receiver.received
    assert "x-normwatch-signature" not in request.headers
    assert request.headers["x-normwatch-timestamp"] == "1700000000"


@pytest.mark.parametrize(
    ("value", "spelled"), [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")]
)
def test_non_finite_values_are_strings(
    receiver: Receiver, deliverer: Deliverer, value: float, spelled: str
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


def test_missing_value_and_threshold_are_null() -> None:
    body = webhook_payload(notification(value=None, threshold=None, state="resolved"))
    assert body["value"] is None and body["threshold"] is None and body["state"] == "resolved"
    assert json.loads(encode_body(body)) == body


def test_naive_fired_at_is_utc() -> None:
    body = webhook_payload(notification(fired_at=datetime(2024, 5, 1, 12, 30)))
    assert body["fired_at"] == "2024-05-01T12:30:00Z"


def test_notification_state_is_checked() -> None:
    with pytest.raises(ValueError, match="state"):
        notification(state="pending")


# --- Slack -----------------------------------------------------------------------------------


def slack_texts(body: dict[str, Any]) -> str:
    return json.dumps(body["blocks"], ensure_ascii=False)


def test_slack_body_names_everything_and_links_the_zoom(
    receiver: Receiver, deliverer: Deliverer
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


def test_slack_resolved_is_green_and_non_finite_readable() -> None:
    body = slack_payload(notification(state="resolved", value=math.nan, threshold=None))
    assert body["text"].startswith(":large_green_circle: Resolved:")
    assert "NaN" in body["text"]
    blocks = slack_texts(body)
    assert "*Value*\\nNaN" in blocks and "*Threshold*\\n—" in blocks
    assert body["blocks"][3]["elements"][0]["style"] == "primary"
    encode_body(body)  # strict JSON: raises on a bare NaN


def test_dashboard_link() -> None:
    assert (
        dashboard_link("http://127.0.0.1:8000/", "r/1", "params/norm/w", 50, window=100)
        == "http://127.0.0.1:8000/runs/r%2F1?left=params%2Fnorm%2Fw&start=0&end=150"
    )


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
    receiver: Receiver, deliverer: Deliverer, reply: Reply, ok: bool, retryable: bool
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
    receiver: Receiver, deliverer: Deliverer, header: str, seconds: float
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


def test_timeout_is_retryable_and_bounded(receiver: Receiver) -> None:
    receiver.replies["/slow"] = Reply(delay_s=10.0)
    with Deliverer(allow=LOCAL, timeout=httpx.Timeout(0.5)) as deliverer:
        attempt = deliverer.deliver({"type": "webhook", "url": receiver.url("/slow")}, SENT)
    assert (attempt.ok, attempt.retryable, attempt.status_code) == (False, True, None)
    assert attempt.error is not None and "timed out" in attempt.error
    assert 0.4 < attempt.duration_s < 2.0


def test_a_status_that_arrived_decides_even_if_the_body_stalls(receiver: Receiver) -> None:
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


# --- where requests may go -------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.1.2.3:8080/x",
        "http://localhost:8000/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://[::1]/",
        "http://[::]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://[2002:7f00:1::]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://a.example\\@127.0.0.1/",
    ],
)
def test_private_targets_are_refused(url: str) -> None:
    with pytest.raises(TargetRefused) as refused:
        check_target(url, ())
    assert not isinstance(refused.value, TargetUnresolved)
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://files.example/x", "scheme must be http or https"),
        ("file:///etc/passwd", "scheme must be http or https"),
        ("gopher://127.0.0.1:25/", "scheme must be http or https"),
        ("http:///nohost", "has no host"),
    ],
)
def test_malformed_targets_are_refused(url: str, message: str) -> None:
    with pytest.raises(TargetRefused, match=message):
        check_target(url, ())


def test_refusal_says_what_and_how_to_allow() -> None:
    with pytest.raises(TargetRefused) as refused:
        check_target("http://localhost:9/", ())
    message = str(refused.value)
    assert "localhost resolves to 127.0.0.1" in message and "loopback" in message
    assert "NORMWATCH_WEBHOOK_ALLOW" in message


DNS = resolver(
    {
        "hooks.example": ["93.184.216.34", "2606:2800:220:1::248"],
        "internal.example": ["10.1.2.3"],
        "split.example": ["93.184.216.34", "192.168.0.10"],
        "v6private.example": ["fd00::5"],
        "sixtofour.example": ["2002:a00:1::"],
        "metadata.example": ["::ffff:169.254.169.254"],
        "hooks.slack.com": ["34.199.1.1"],
    }
)


@pytest.mark.parametrize(
    "host",
    [
        "internal.example",
        "split.example",
        "v6private.example",
        "sixtofour.example",
        "metadata.example",
    ],
)
def test_names_resolving_to_private_addresses_are_refused(host: str) -> None:
    with pytest.raises(TargetRefused, match="resolves to"):
        check_target(f"https://{host}/hook", (), resolve=DNS)


def test_public_names_pass_with_all_their_addresses() -> None:
    target = resolve_target("https://hooks.example/x?y=1", (), resolve=DNS)
    assert (target.host, target.port) == ("hooks.example", 443)
    assert [str(a) for a in target.addresses] == ["93.184.216.34", "2606:2800:220:1::248"]


@pytest.mark.parametrize(
    ("allow", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:1234/"),
        ("localhost", "http://localhost:8000/"),
        ("LOCALHOST.", "http://localhost/"),
        ("127.0.0.0/8", "http://0x7f.1/"),
        ("::1", "http://[::1]:9000/"),
        ("[::1]:8080", "http://[::1]:8080/"),
        ("10.0.0.0/8", "https://internal.example/hook"),
        ("internal.example", "https://internal.example/hook"),
        ("internal.example:8443", "https://internal.example:8443/hook"),
        ("internal.example:443", "https://internal.example/hook"),
        (" other.example , 10.1.2.3 ", "https://internal.example/hook"),
    ],
)
def test_allow_list_permits(allow: str, url: str) -> None:
    def resolve(host: str, port: int) -> Any:
        return DNS(host, port) if host.endswith(".example") else socket.getaddrinfo(host, port)

    check_target(url, parse_allow(allow), resolve=resolve)


@pytest.mark.parametrize(
    ("allow", "url"),
    [
        ("127.0.0.1", "http://127.0.0.2/"),
        ("[::1]:8080", "http://[::1]:9090/"),
        ("internal.example:8443", "https://internal.example/hook"),
        ("internal.example:80", "https://internal.example/hook"),
        ("10.0.0.0/8", "https://split.example/"),  # 192.168.0.10 is not listed
        ("hooks.example", "https://internal.example/"),
    ],
)
def test_allow_list_permits_only_what_it_lists(allow: str, url: str) -> None:
    with pytest.raises(TargetRefused):
        check_target(url, parse_allow(allow), resolve=DNS)


def test_allow_list_accepts_plain_collections() -> None:
    check_target("http://127.0.0.1:1/", ["127.0.0.1"])
    check_target("http://127.0.0.1:1/", {"127.0.0.1"})


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "http://x/y", "a b", "user@host", "h:99999"])
def test_bad_allow_entries_are_named(entry: str) -> None:
    with pytest.raises(ValueError, match="NORMWATCH_WEBHOOK_ALLOW"):
        parse_allow(f"ok.example,{entry}")


def test_empty_allow_list() -> None:
    assert len(parse_allow("")) == 0 and len(parse_allow(" , ,")) == 0
    assert "a.example" in parse_allow("a.example, b.example")


def test_delivery_connects_to_the_checked_address(receiver: Receiver) -> None:
    port = receiver.server_address[1]
    dns = resolver({"hooks.test": ["127.0.0.1"]})
    with Deliverer(allow=LOCAL, resolve=dns) as deliverer:
        channel = {"type": "webhook", "url": f"http://hooks.test:{port}/h"}
        attempt = deliverer.deliver(channel, SENT)
    assert attempt.ok
    assert receiver.received[0].headers["host"] == f"hooks.test:{port}"


def test_a_name_rebound_after_validation_is_refused_at_delivery(receiver: Receiver) -> None:
    port = receiver.server_address[1]
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


# --- channels in and out ---------------------------------------------------------------------


def test_validate_channel_cleans() -> None:
    assert validate_channel(
        {"type": "webhook", "url": " https://hooks.example/x ", "secret": SECRET}, (), resolve=DNS
    ) == {"type": "webhook", "url": "https://hooks.example/x", "secret": SECRET}
    assert validate_channel(
        {"type": "slack", "url": "https://hooks.slack.com/services/T/B/X"}, (), resolve=DNS
    ) == {"type": "slack", "url": "https://hooks.slack.com/services/T/B/X"}


def test_validate_channel_accepts_names_that_do_not_resolve_now() -> None:
    channel = {"type": "webhook", "url": "https://hooks.invalid/x"}
    assert validate_channel(channel, (), resolve=resolver({})) == channel


@pytest.mark.parametrize(
    ("channel", "message"),
    [
        ({"url": "https://hooks.example/x"}, r"channels\[1\]\.type: must be 'webhook' or 'slack'"),
        ({"type": "email", "url": "https://hooks.example/x"}, r"channels\[1\]\.type"),
        ({"type": "webhook"}, r"channels\[1\]\.url: required"),
        ({"type": "webhook", "url": ""}, r"channels\[1\]\.url: required"),
        ({"type": "webhook", "url": "hooks.example/x"}, r"channels\[1\]\.url: .*scheme"),
        ({"type": "webhook", "url": "http://10.0.0.8/x"}, r"channels\[1\]\.url: .*private"),
        ({"type": "webhook", "url": "https://internal.example/"}, r"channels\[1\]\.url: .*10\.1"),
        (
            {"type": "slack", "url": "https://hooks.example/services/T"},
            r"channels\[1\]\.url: Slack",
        ),
        ({"type": "slack", "url": "http://hooks.slack.com/services/T"}, r"channels\[1\]\.url: Sla"),
        (
            {"type": "slack", "url": "https://hooks.slack.com/services/T", "secret": "x"},
            r"channels\[1\]\.secret: only webhook",
        ),
        ({"type": "webhook", "url": "https://hooks.example/", "secret": ""}, r"\.secret: must"),
        ({"type": "webhook", "url": "https://hooks.example/", "secret": 5}, r"\.secret: must"),
        ({"type": "webhook", "url": "https://hooks.example/", "token": "x"}, r"unknown.*token"),
    ],
)
def test_validate_channel_names_the_field(channel: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_channel(channel, (), field="channels[1]", resolve=DNS)


def test_slack_channel_may_point_at_an_allow_listed_host(receiver: Receiver) -> None:
    url = receiver.url("/services/T/B/X")
    assert validate_channel({"type": "slack", "url": url}, LOCAL)["url"] == url
    with pytest.raises(ValueError, match="Slack"):
        validate_channel({"type": "slack", "url": url}, ())


@pytest.mark.parametrize(
    ("channel", "shown"),
    [
        (
            {"type": "webhook", "url": "https://hooks.example/x?token=abc&v=2", "secret": "s3"},
            {
                "type": "webhook",
                "url": "https://hooks.example/x?token=••••&v=••••",
                "secret": "••••",
            },
        ),
        (
            {"type": "webhook", "url": "https://bot:pw@hooks.example:8443/x#frag"},
            {"type": "webhook", "url": "https://bot:••••@hooks.example:8443/x#••••"},
        ),
        (
            {"type": "webhook", "url": "http://[::1]:8080/x"},
            {"type": "webhook", "url": "http://[::1]:8080/x"},
        ),
        (
            {"type": "slack", "url": "https://hooks.slack.com/services/T0/B0/XyZ"},
            {"type": "slack", "url": "https://hooks.slack.com/services/••••"},
        ),
        (
            {"type": "slack", "url": "http://127.0.0.1:9/hook/T0/B0/XyZ"},
            {"type": "slack", "url": "http://127.0.0.1:9/••••"},
        ),
        ({"type": "webhook", "url": "http://[bad/x"}, {"type": "webhook", "url": "••••"}),
    ],
)
def test_mask_channel(channel: dict[str, Any], shown: dict[str, Any]) -> None:
    original = dict(channel)
    assert mask_channel(channel) == shown
    assert channel == original
    assert mask_channel(shown) == shown  # masking a masked channel changes nothing


# --- signatures and retry timing -------------------------------------------------------------


def test_verify_refuses_what_it_should() -> None:
    body = b'{"state":"firing"}'
    good = sign(SECRET, 1_700_000_000, body)
    assert verify(SECRET, "1700000000", good, body, now=NOW + 299)
    assert verify(SECRET, 1_700_000_000, f" {good} ", body, now=NOW)
    assert not verify("other", "1700000000", good, body, now=NOW)
    assert not verify(SECRET, "1700000000", good, body + b" ", now=NOW)
    assert not verify(SECRET, "1700000001", good, body, now=NOW)
    assert not verify(SECRET, "1700000000", good, body, now=NOW + 301)
    assert not verify(SECRET, "1700000000", good, body, now=NOW - 301)
    assert not verify(SECRET, "soon", good, body, now=NOW)
    assert not verify(SECRET, "1700000000", "sha256=zz", body, now=NOW)
    assert not verify(SECRET, "1700000000", "sha256=é", body, now=NOW)


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
    rng = random.Random(0)
    assert next_attempt_delay(1, 30.0, rng) == 30.0
    assert next_attempt_delay(1, 10**9, rng) == 3600.0
    assert 0.0 <= next_attempt_delay(20, 0.0, rng) <= 300.0
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
