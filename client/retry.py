"""When to try an HTTP request again: ``Retry-After`` and exponential backoff with jitter.

Shared by the trainer client (posting metrics) and the server (delivering alert
notifications); it needs nothing but the standard library.

>>> parse_retry_after("120", now=0.0, cap=3600.0)
120.0
>>> 0.0 <= full_jitter(3, random.Random(0), base=0.5, cap=30.0) <= 4.0
True
"""

from __future__ import annotations

import math
import random
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = ["full_jitter", "parse_retry_after"]


def parse_retry_after(value: str | None, *, now: float, cap: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value (delta-seconds or an HTTP date,
    ``now`` being the current Unix time), between 0 and ``cap``; None when absent or
    unreadable."""
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
    return min(max(seconds, 0.0), cap)


def full_jitter(failures: int, rng: random.Random, *, base: float, cap: float) -> float:
    """A delay uniform in ``[0, min(cap, base · 2^failures)]`` ("full jitter"): many senders
    failing together do not retry together. ``failures`` counts from 0."""
    ceiling = min(cap, base * 2.0 ** min(max(failures, 0), 64))
    return rng.uniform(0.0, ceiling)
