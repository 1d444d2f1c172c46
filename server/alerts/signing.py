"""Webhook signatures: ``X-Normwatch-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw
body>">`` with the channel's secret, and how a receiver checks one."""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = [
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "sign",
    "verify",
]


TIMESTAMP_HEADER = "X-Normwatch-Timestamp"


SIGNATURE_HEADER = "X-Normwatch-Signature"


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
