"""Ingest slots: a batch that finds them all taken waits for one, up to a limit."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import HTTPException
from normwatch.server.admission import IngestSlots

from tests.conftest import run_async


def test_a_batch_waits_for_a_slot_freed_in_time_and_is_refused_after_the_wait() -> None:
    async def scenario() -> None:
        slots = IngestSlots(1, wait_s=0.5)
        order: list[str] = []

        async def batch(name: str) -> None:
            async with slots.slot():
                order.append(name)

        async with slots.slot():
            waiting = asyncio.create_task(batch("second"))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # held back while the only slot is taken
            order.append("first")
        await asyncio.wait_for(waiting, 1.0)
        assert order == ["first", "second"] and slots.in_flight == 0

        async with slots.slot():
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(HTTPException) as refused:
                await batch("third")
            assert 0.45 <= loop.time() - started < 1.5
        assert refused.value.status_code == 503
        assert refused.value.headers == {"Retry-After": "1"}
        assert slots.in_flight == 0 and order == ["first", "second"]

    run_async(scenario())
