"""Admission slots: a request that finds them all taken waits in line for one, up to a limit."""

from __future__ import annotations

import asyncio

import pytest
from normwatch.server.api.admission import Busy, Slots

from tests.conftest import run_async


def test_a_request_waits_for_a_slot_freed_in_time_and_is_refused_after_the_wait() -> None:
    async def scenario() -> None:
        slots = Slots(1, wait_s=0.5)
        order: list[str] = []

        async def request(name: str) -> None:
            async with slots.slot():
                order.append(name)

        async with slots.slot():
            waiting = asyncio.create_task(request("second"))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # held back while the only slot is taken
            assert slots.waiting == 1
            order.append("first")
        await asyncio.wait_for(waiting, 1.0)
        assert order == ["first", "second"] and slots.in_flight == 0

        async with slots.slot():
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(Busy):
                await request("third")
            assert 0.45 <= loop.time() - started < 1.5
        assert slots.in_flight == 0 and slots.waiting == 0 and order == ["first", "second"]

    run_async(scenario())


def test_slots_go_to_the_line_in_order_and_a_full_line_is_refused_at_once() -> None:
    async def scenario() -> None:
        slots = Slots(2, wait_s=5.0, queue_limit=3)
        order: list[int] = []
        release = asyncio.Event()

        async def request(n: int) -> None:
            async with slots.slot():
                order.append(n)
                await release.wait()

        running = [asyncio.create_task(request(n)) for n in range(5)]
        await asyncio.sleep(0.05)
        assert (slots.in_flight, slots.waiting, order) == (2, 3, [0, 1])
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await slots.acquire() is False  # the line is full: no wait at all
        assert loop.time() - started < 0.05
        release.set()
        await asyncio.wait_for(asyncio.gather(*running), 2.0)
        assert order == [0, 1, 2, 3, 4]
        assert (slots.in_flight, slots.waiting) == (0, 0)

    run_async(scenario())


def test_a_request_that_leaves_the_line_gives_back_what_it_was_given() -> None:
    """A client that disconnects while waiting is cancelled; a slot handed to it at that
    moment must go to the next in line, not be lost."""

    async def scenario() -> None:
        slots = Slots(1, wait_s=5.0)
        assert await slots.acquire()
        leaving = asyncio.create_task(slots.acquire())
        staying = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0.05)
        leaving.cancel()
        await asyncio.sleep(0)
        slots.release()  # the first in line left: the slot goes to the next
        assert await asyncio.wait_for(staying, 1.0) is True
        assert (slots.in_flight, slots.waiting) == (1, 0)
        slots.release()
        assert slots.in_flight == 0

    run_async(scenario())
