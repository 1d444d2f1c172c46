"""The guard on alert targets: private, malformed and unresolvable URLs refused; allow lists."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from normwatch.server.alerts.targets import (
    TargetRefused,
    check_target,
    parse_allow,
    resolve_target,
)
from tests.helpers.dns import DNS

LOOPBACK = ipaddress.ip_address("127.0.0.1")


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
    with pytest.raises(ValueError) as refused:  # what validating callers catch
        check_target(url, ())
    assert type(refused.value) is TargetRefused  # refused for good, not TargetUnresolved


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


LOCALHOST = sorted({str(info[4][0]) for info in socket.getaddrinfo("localhost", 0)})
"""What this machine resolves localhost to: 127.0.0.1, and ::1 on some."""


PERMITTED = [
    ("127.0.0.1", "http://127.0.0.1:1234/", "127.0.0.1", 1234, ["127.0.0.1"]),
    ("localhost", "http://localhost:8000/", "localhost", 8000, LOCALHOST),
    ("LOCALHOST.", "http://localhost/", "localhost", 80, LOCALHOST),
    ("127.0.0.0/8", "http://0x7f.1/", "0x7f.1", 80, ["127.0.0.1"]),
    ("::1", "http://[::1]:9000/", "::1", 9000, ["::1"]),
    ("[::1]:8080", "http://[::1]:8080/", "::1", 8080, ["::1"]),
    ("10.0.0.0/8", "https://internal.example/hook", "internal.example", 443, ["10.1.2.3"]),
    (
        "internal.example",
        "https://internal.example/hook",
        "internal.example",
        443,
        ["10.1.2.3"],
    ),
    (
        "internal.example:8443",
        "https://internal.example:8443/hook",
        "internal.example",
        8443,
        ["10.1.2.3"],
    ),
    (
        "internal.example:443",
        "https://internal.example/hook",
        "internal.example",
        443,
        ["10.1.2.3"],
    ),
    (
        " other.example , 10.1.2.3 ",
        "https://internal.example/hook",
        "internal.example",
        443,
        ["10.1.2.3"],
    ),
]
"""(allow list, URL, and the host, port and addresses the target is checked at)."""


@pytest.mark.parametrize(
    ("allow", "url", "host", "port", "addresses"),
    PERMITTED,
    ids=[f"{allow}-{url}" for allow, url, *_ in PERMITTED],
)
def test_allow_list_permits(
    allow: str, url: str, host: str, port: int, addresses: list[str]
) -> None:
    def resolve(host: str, port: int) -> Any:
        return DNS(host, port) if host.endswith(".example") else socket.getaddrinfo(host, port)

    target = resolve_target(url, parse_allow(allow), resolve=resolve)
    assert (target.host, target.port) == (host, port)
    assert sorted(str(a) for a in target.addresses) == addresses


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
    for allow in (["127.0.0.1"], {"127.0.0.1"}):
        target = resolve_target("http://127.0.0.1:1/", allow)
        assert (target.host, target.port, target.addresses) == ("127.0.0.1", 1, (LOOPBACK,))


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "http://x/y", "a b", "user@host", "h:99999"])
def test_bad_allow_entries_are_named(entry: str) -> None:
    with pytest.raises(ValueError, match="NORMWATCH_WEBHOOK_ALLOW"):
        parse_allow(f"ok.example,{entry}")


def test_empty_allow_list() -> None:
    assert len(parse_allow("")) == 0 and len(parse_allow(" , ,")) == 0
    assert "a.example" in parse_allow("a.example, b.example")
