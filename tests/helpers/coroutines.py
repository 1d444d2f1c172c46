"""A coroutine run to completion in a thread of its own, on the real clock or on a clock
that jumps to the next timer whenever the loop would wait."""

from __future__ import annotations

import asyncio
import selectors
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class JumpingClockLoop(asyncio.SelectorEventLoop):
    """An event loop on a clock of its own, which starts at 0 and moves only when nothing
    is ready to run: then straight to the loop's next timer, where the real loop would have
    waited for it.

    Whatever a coroutine awaits by the clock (``asyncio.sleep``, a wait with a timeout,
    ``call_later``) takes no real time, and events come in the order the real clock would
    give them. For coroutines that wait on each other and on the clock: work in other
    threads or processes takes no time on this clock, so a timer may fire before it ends.
    """

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        # asyncio's selector loop asks its selector for I/O with the time left until the
        # next timer; this one looks without waiting, and moves the clock instead.
        selector: selectors.BaseSelector = self._selector  # type: ignore[attr-defined]
        waiting_select = selector.select

        def select(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            ready = waiting_select(0)
            if ready or timeout is None:  # nothing on the clock: only I/O can come next
                return ready or waiting_select(timeout)
            self._now += max(timeout, 0.0)
            return ready

        selector.select = select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._now


def run_async(
    coroutine: Coroutine[Any, Any, T], timeout: float = 30.0, *, jumping_clock: bool = False
) -> T:
    """``asyncio.run(coroutine)`` in a thread of its own: what it returned, or re-raising
    what it raised. ``jumping_clock`` runs it on a `JumpingClockLoop`.

    A browser test earlier in the process may have left this thread's event loop running
    (Playwright's sync API), and ``asyncio.run`` needs a thread without one.
    """
    failures: list[BaseException] = []
    results: list[T] = []

    def run() -> None:
        try:
            with asyncio.Runner(loop_factory=JumpingClockLoop if jumping_clock else None) as r:
                results.append(r.run(coroutine))
        except BaseException as exc:  # re-raised in the test's own thread below
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the coroutine did not finish in time"
    if failures:
        raise failures[0]
    return results[0]
