"""How the client tells the trainer about problems: the ``normwatch.client`` logger."""

from __future__ import annotations

import logging
import math
import threading
import time

logger = logging.getLogger("normwatch.client")


class WarnOnce:
    """Log a WARNING the first time a key is seen and DEBUG afterwards, so a trainer that
    repeats the same mistake every step does not flood its own logs."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, key: str, message: str, *args: object) -> None:
        with self._lock:
            level = logging.DEBUG if key in self._seen else logging.WARNING
            self._seen.add(key)
        logger.log(level, message, *args)


class WarnEvery:
    """Log a WARNING at most once per ``interval`` seconds; the calls in between are silent.

    For conditions that persist (a full queue, a full spool), where every occurrence is
    counted elsewhere and the log only needs a periodic reminder.
    """

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._last = -math.inf

    def __call__(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self._interval:
            return
        self._last = now
        logger.warning(message, *args)


def ignored_key(metric: str) -> str:
    """The `WarnOnce` key of "a value of this metric was not stored, its point had one
    already": one warning a metric, whether the repeat was seen here or by the server."""
    return f"ignored:{metric}"
