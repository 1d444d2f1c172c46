"""How the client tells the trainer about problems: the ``normwatch.client`` logger."""

from __future__ import annotations

import logging
import threading

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
