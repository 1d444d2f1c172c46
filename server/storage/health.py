"""The database health check, on a connection and threads of its own."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

log = logging.getLogger("normwatch.server")


class DatabaseProbe:
    """Answers "does the database answer?" on a connection of its own.

    The health check must answer while a burst holds every pooled connection and thread of
    the worker, so it uses an engine of its own (one connection, kept open) and bounded
    waits everywhere: connecting, the statement, and the line of checks, which share one
    result when several arrive at once (a load balancer's probes, a test polling).
    """

    def __init__(self, database_url: str, *, timeout_s: float = 2.0) -> None:
        self.timeout_s = timeout_s
        url = make_url(database_url)
        if url.get_backend_name() == "sqlite":
            self.engine = create_engine(
                url,
                connect_args={"check_same_thread": False, "timeout": timeout_s},
                pool_size=1,
                max_overflow=0,
                pool_timeout=timeout_s,
            )
        else:
            millis = int(timeout_s * 1000)
            self.engine = create_engine(
                url,
                pool_size=1,
                max_overflow=0,
                pool_timeout=timeout_s,
                pool_pre_ping=False,
                pool_recycle=1800,
                connect_args={
                    "connect_timeout": max(1, round(timeout_s)),
                    "options": f"-c statement_timeout={millis}",
                },
            )
        self._lock = threading.Lock()
        self._last: tuple[float, str | None] = (0.0, None)
        # Threads of its own: the worker's shared threads may all be busy with a burst.
        self._threads = ThreadPoolExecutor(2, thread_name_prefix="normwatch-health")

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def answer(self) -> str | None:
        """`check` on the probe's own threads, for the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, self.check)

    def check(self) -> str | None:
        """None when the database answered; otherwise why not, in a few words.

        A check that finds another in progress waits for it and shares its result.
        """
        asked = time.monotonic()
        if not self._lock.acquire(timeout=self.timeout_s * 2):
            return "health check timed out"
        try:
            checked_at, result = self._last
            if checked_at >= asked:  # someone checked while this one waited
                return result
            result = self._run()
            self._last = (time.monotonic(), result)
            return result
        finally:
            self._lock.release()

    def _run(self) -> str | None:
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception as exc:
            log.warning("health check: database did not answer: %s", exc)
            self.engine.dispose()  # the next check starts from a fresh connection
            return type(exc).__name__
        return None

    def close(self) -> None:
        self._threads.shutdown(wait=False)
        self.engine.dispose()
