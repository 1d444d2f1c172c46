"""A coroutine run to completion in a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """``asyncio.run(coroutine)`` in a thread of its own: what it returned, or re-raising
    what it raised.

    A browser test earlier in the process may have left this thread's event loop running
    (Playwright's sync API), and ``asyncio.run`` needs a thread without one.
    """
    failures: list[BaseException] = []
    results: list[T] = []

    def run() -> None:
        try:
            results.append(asyncio.run(coroutine))
        except BaseException as exc:  # re-raised in the test's own thread below
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the coroutine did not finish in time"
    if failures:
        raise failures[0]
    return results[0]
