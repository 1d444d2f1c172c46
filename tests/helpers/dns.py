"""Stand-ins for ``socket.getaddrinfo``: names resolved from a table, without a network."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from typing import Any

Resolve = Callable[[str, int], list[tuple[Any, ...]]]


def resolver(table: Mapping[str, list[str]]) -> Resolve:
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
"""Public names, private names, and names with one address of each."""
