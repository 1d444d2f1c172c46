"""Which URLs alert notifications may be posted to: a guard against server-side request forgery.

A channel URL is chosen by whoever holds an admin token, and the service POSTs to it from
inside the network it runs in. Unguarded, a channel pointed at ``http://169.254.169.254/``
(cloud metadata) or ``http://localhost:5432/`` would turn the service into a proxy into
that network. So a target is refused unless every address its host resolves to is globally
routable, or the operator listed the host, the ``host:port``, the address or a network
containing it in ``NORMWATCH_WEBHOOK_ALLOW``.

Addresses are judged after resolution through ``getaddrinfo``, which is what the HTTP client
would connect to: spellings such as ``http://2130706433/`` or ``http://0x7f.1/`` resolve to
127.0.0.1 and are refused like it. IPv6 forms that carry an IPv4 address (``::ffff:a.b.c.d``,
6to4, Teredo, NAT64) are judged by the IPv4 address too.

Exceptions::

    ValueError
    └── TargetRefused          the URL may not be posted to
        └── TargetUnresolved   its host does not resolve now; it may later

Checking a name and letting the HTTP client look it up again leaves a window for DNS
rebinding: the name answers the check with a public address and the connection with a
private one. :func:`resolve_target` therefore returns the addresses it checked, and the
sender connects to one of those rather than to a fresh lookup (``delivery.Deliverer``).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = [
    "AllowList",
    "IPAddress",
    "Resolver",
    "Target",
    "TargetRefused",
    "TargetUnresolved",
    "as_allow_list",
    "check_target",
    "non_global_reason",
    "parse_allow",
    "resolve_target",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: ``socket.getaddrinfo`` or a stand-in with its shape, called as ``resolve(host, port)``.
Resolver = Callable[[str, int], Sequence[tuple[Any, Any, Any, Any, tuple[Any, ...]]]]

ALLOW_SETTING = "NORMWATCH_WEBHOOK_ALLOW"
DEFAULT_PORTS = {"http": 80, "https": 443}

# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway will forward to.
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# A host name as httpx spells it (IDNA names arrive as punycode).
_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?")


class TargetRefused(ValueError):
    """The URL may not be posted to; the message says why and how to allow it."""


class TargetUnresolved(TargetRefused):
    """The URL's host does not resolve (now); DNS failures are often transient."""


@dataclass(frozen=True)
class _Entry:
    """One allow-list entry: a host name or a network, optionally limited to one port."""

    host: str | None
    network: IPNetwork | None
    port: int | None

    def permits_port(self, port: int) -> bool:
        return self.port is None or self.port == port


class AllowList(Collection[str]):
    """Targets the operator trusts although they are not globally routable.

    Entries are host names (``hooks.internal``), ``host:port``, IP addresses (``10.0.0.7``,
    ``::1``, ``[::1]:8080``) and networks in CIDR form (``10.0.0.0/8``). A listed name
    permits that name whatever it resolves to; a listed address or network permits the
    addresses in it, whichever name led there.
    """

    def __init__(self, entries: Iterable[str] = ()) -> None:
        raw = tuple(e.strip() for e in entries if e.strip())
        self._raw = raw
        self._entries = tuple(_parse_entry(e) for e in raw)

    def __contains__(self, item: object) -> bool:
        return item in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return f"AllowList({list(self._raw)!r})"

    def permits_host(self, host: str, port: int) -> bool:
        """Whether ``host`` (a name or an IP literal, as in a URL) is listed for ``port``."""
        name = _normal_host(host)
        address = _ip_or_none(name)
        for entry in self._entries:
            if not entry.permits_port(port):
                continue
            if entry.host is not None and entry.host == name:
                return True
            if entry.network is not None and address is not None and address in entry.network:
                return True
        return False

    def permits_address(self, address: IPAddress, port: int) -> bool:
        """Whether a resolved ``address`` lies in a listed address or network for ``port``."""
        return any(
            entry.network is not None
            and entry.permits_port(port)
            and address.version == entry.network.version
            and address in entry.network
            for entry in self._entries
        )


def parse_allow(raw: str) -> AllowList:
    """Parse ``NORMWATCH_WEBHOOK_ALLOW``: comma-separated hosts, ``host:port``, IPs or CIDRs.

    >>> "10.0.0.0/8" in parse_allow("hooks.internal, 10.0.0.0/8")
    True

    Raises ``ValueError`` naming the entry that is none of those.
    """
    return AllowList(raw.split(","))


def as_allow_list(allow: Collection[str]) -> AllowList:
    """``allow`` itself when already parsed, else its entries parsed."""
    return allow if isinstance(allow, AllowList) else AllowList(allow)


@dataclass(frozen=True)
class Target:
    """A URL that passed the check, with the addresses it was checked at.

    Connect to one of ``addresses`` (sending ``url``'s host as ``Host`` and TLS server
    name) so that a second DNS answer cannot lead the request somewhere else.
    """

    url: httpx.URL
    host: str
    port: int
    addresses: tuple[IPAddress, ...]


def resolve_target(
    url: str | httpx.URL,
    allow: Collection[str],
    *,
    resolve: Resolver = socket.getaddrinfo,
) -> Target:
    """Resolve ``url``'s host and check every address it has; raise if any is refused.

    Messages name the host, never the whole URL, whose path or query may be a credential.
    Raises ``TargetRefused`` when the scheme is not http(s), the URL has no host, or an
    address is private, loopback, link-local, multicast, reserved, unspecified or otherwise
    not globally routable and not permitted by ``allow``; ``TargetUnresolved`` when the
    host does not resolve.
    """
    allow_list = as_allow_list(allow)
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise TargetRefused(f"not a valid URL: {exc}") from None
    if parsed.scheme not in DEFAULT_PORTS:
        raise TargetRefused(f"the scheme must be http or https, not {parsed.scheme!r}")
    host = _normal_host(parsed.host)
    if not host:
        raise TargetRefused("the URL has no host")
    port = parsed.port or DEFAULT_PORTS[parsed.scheme]
    literal = _ip_or_none(host)
    if literal is not None:
        addresses: tuple[IPAddress, ...] = (literal,)
    else:
        try:
            infos = resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise TargetUnresolved(f"{host!r} does not resolve: {exc}") from None
        addresses = _unique_addresses(infos)
    if not addresses:
        raise TargetUnresolved(f"{host!r} resolves to no IP address")
    if not allow_list.permits_host(host, port):
        for address in addresses:
            reason = non_global_reason(address)
            if reason is not None and not allow_list.permits_address(address, port):
                shown = host if literal is not None else f"{host} resolves to {address}, which"
                raise TargetRefused(
                    f"{shown} is {reason}; alerts may target it only if {ALLOW_SETTING} "
                    f"lists {host!r} or a network containing {address}"
                )
    return Target(url=parsed, host=host, port=port, addresses=addresses)


def check_target(
    url: str,
    allow: Collection[str],
    *,
    resolve: Resolver = socket.getaddrinfo,
) -> None:
    """Raise ``TargetRefused`` unless alerts may be posted to ``url`` (see ``resolve_target``)."""
    resolve_target(url, allow, resolve=resolve)


def non_global_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be reached from the service, or ``None`` when it is global.

    An IPv6 address carrying an IPv4 one (mapped, IPv4-compatible, 6to4, Teredo, NAT64)
    is refused when the IPv4 address would be.
    """
    for embedded in _embedded_ipv4(address):
        reason = non_global_reason(embedded)
        if reason is not None:
            return f"{reason} (carried in {address})"
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_private:
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "not a globally routable address"
    return None


def _embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if any(address in net for net in (*_NAT64, _IPV4_COMPATIBLE)):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _unique_addresses(infos: Iterable[tuple[Any, ...]]) -> tuple[IPAddress, ...]:
    seen: dict[IPAddress, None] = {}
    for info in infos:
        sockaddr = info[4]
        if not sockaddr or not isinstance(sockaddr[0], str):
            continue  # not an IP family
        address = _ip_or_none(sockaddr[0])
        if address is not None:
            seen.setdefault(address, None)
    return tuple(seen)


def _normal_host(host: str) -> str:
    """Lower case, no brackets, no trailing dot: how names are compared."""
    return host.strip("[]").rstrip(".").lower()


def _ip_or_none(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.replace("%25", "%"))
    except ValueError:
        return None


def _parse_entry(entry: str) -> _Entry:
    problem = (
        f"{ALLOW_SETTING}: {entry!r} is not a host name, host:port, IP address "
        "or network (CIDR such as 10.0.0.0/8)"
    )
    if "/" in entry:
        try:
            return _Entry(host=None, network=ipaddress.ip_network(entry, strict=False), port=None)
        except ValueError:
            raise ValueError(problem) from None
    bare = _ip_or_none(entry)
    if bare is not None:  # also a bare IPv6 address, whose colons are not a port
        return _Entry(host=None, network=ipaddress.ip_network(bare), port=None)
    try:
        # Parsed as a URL authority, so names compare exactly as the URLs they permit.
        parsed = httpx.URL(f"http://{entry}")
        # httpx drops a default port (":80"); the entry still means that port only.
        port = urlsplit(f"//{entry}").port
    except (httpx.InvalidURL, ValueError):
        raise ValueError(problem) from None
    host = _normal_host(parsed.host)
    if parsed.userinfo or parsed.raw_path not in (b"", b"/") or parsed.query:
        raise ValueError(problem)
    if not _HOST_NAME.fullmatch(host) and _ip_or_none(host) is None:
        raise ValueError(problem)
    address = _ip_or_none(host)
    if address is not None:
        return _Entry(host=None, network=ipaddress.ip_network(address), port=port)
    return _Entry(host=host, network=None, port=port)
