"""The live notifier: a run's watches are woken at once by what this process stored, and by
its poll for what another process stored (a real server on Postgres); changes in between
count once; no more watches than allowed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anyio
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.db import build_engine, session_factory
from normwatch.server.workers.live import RunChanges, Watch, WatchesFull
from normwatch.testing import ServerProcess
from tests.helpers.api import client_for, create_run, post_metrics
from tests.helpers.coroutines import run_async
from tests.helpers.tenants import make_tenant


@pytest.fixture
def sessions(pg_url: str) -> Iterator[sessionmaker[Session]]:
    engine = build_engine(pg_url, pool_size=1)
    yield session_factory(engine)
    engine.dispose()


async def woken(watch: Watch, within: float) -> bool:
    try:
        await asyncio.wait_for(watch.changed(), within)
    except TimeoutError:
        return False
    return True


def test_changed_wakes_each_watch_of_the_run_once(sessions: sessionmaker[Session]) -> None:
    async def scenario() -> None:
        changes = RunChanges(sessions, poll_s=60)  # the poll plays no part here
        changes.changed("a")  # nobody watches yet: nothing to do
        async with changes.watch("a") as first, changes.watch("a") as second:
            async with changes.watch("b") as other:
                assert changes.watching == 3
                changes.changed("a")
                changes.changed("a")
                await asyncio.sleep(0.3)  # both told before the watchers look again
                assert await woken(first, 1) and await woken(second, 1)
                assert not await woken(first, 0.1)  # two changes in between: one wake
                assert not await woken(other, 0.1)
                # From a worker thread, as the routes that store in threads call it.
                await anyio.to_thread.run_sync(changes.changed, "b")
                assert await woken(other, 1)
        assert changes.watching == 0

    run_async(scenario())


def test_no_more_watches_than_allowed(sessions: sessionmaker[Session]) -> None:
    async def scenario() -> None:
        changes = RunChanges(sessions, max_watches=2, poll_s=60)
        async with changes.watch("a"), changes.watch("b"):
            with pytest.raises(WatchesFull):
                async with changes.watch("a"):
                    pass
            assert changes.watching == 2
        async with changes.watch("a"):  # one left: room again
            assert changes.watching == 1

    run_async(scenario())


def test_the_poll_sees_what_another_process_stored(pg_server: ServerProcess) -> None:
    """The server process stores batches, events and notes; this process's watches learn of
    them from the poll alone (no route of this process was called)."""
    tenant = make_tenant(pg_server.database_url)
    with (
        client_for(pg_server, tenant, "ingest") as api,
        client_for(pg_server, tenant, "admin") as admin,
    ):
        run = create_run(api, name="polled", start_step=0)
        quiet = create_run(api, name="quiet", start_step=0)
        post_metrics(api, run, [0], loss=[1.0])
        engine = build_engine(pg_server.database_url, pool_size=1)
        changes = RunChanges(session_factory(engine), poll_s=0.1)

        async def scenario() -> None:
            async with changes.watch(run) as watch, changes.watch(quiet) as idle:
                await asyncio.sleep(0.3)  # the first poll reads where the runs are
                await anyio.to_thread.run_sync(lambda: post_metrics(api, run, [1], loss=[0.9]))
                assert await woken(watch, 3)
                event = {"step": 1, "text": "lr halved"}
                answer = await anyio.to_thread.run_sync(
                    lambda: api.post(f"/api/v1/runs/{run}/events", json=event)
                )
                assert answer.status_code == 201
                assert await woken(watch, 3)
                noted = await anyio.to_thread.run_sync(
                    lambda: admin.patch(f"/api/v1/runs/{run}", json={"notes": "lr halved"})
                )
                assert noted.status_code == 200, noted.text
                assert await woken(watch, 3)  # an open page shows the note
                assert not await woken(idle, 0.3)

        try:
            run_async(scenario())
        finally:
            engine.dispose()
