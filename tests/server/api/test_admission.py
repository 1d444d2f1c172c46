"""Admission: slots a request waits in line for, up to a limit; and interactive requests
ahead of metric batches within a worker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from normwatch.server.api.admission import (
    Admission,
    Busy,
    CallerShares,
    InteractiveRequests,
    ReadsFirst,
    Slots,
    caller_of,
    is_batch,
)
from normwatch.server.api.metrics import LARGE_BATCH_WAIT_S, _Turns
from normwatch.server.config import Settings
from normwatch.testing import running_server
from tests.helpers.coroutines import run_async
from tests.helpers.tenants import make_tenant

# --- slots ------------------------------------------------------------------------------------


# These run on a clock that jumps to the next timer (`run_async(jumping_clock=True)`):
# the waits are the service's own defaults, checked to the millisecond, in no real time.

READ_WAIT_S = Settings.model_fields["read_wait_s"].default


def test_a_request_waits_for_a_slot_freed_in_time_and_is_refused_after_the_wait() -> None:
    async def scenario() -> None:
        slots = Slots(1, wait_s=READ_WAIT_S)
        order: list[str] = []
        loop = asyncio.get_running_loop()

        async def request(name: str) -> None:
            async with slots.slot():
                order.append(name)

        async with slots.slot():
            waiting = asyncio.create_task(request("second"))
            await asyncio.sleep(READ_WAIT_S - 0.001)
            assert not waiting.done()  # held back while the only slot is taken
            assert slots.waiting == 1
            order.append("first")
        freed = loop.time()
        await asyncio.wait_for(waiting, 1.0)
        assert loop.time() == freed  # the slot went to it at once
        assert order == ["first", "second"] and slots.in_flight == 0

        async with slots.slot():
            started = loop.time()
            with pytest.raises(Busy):
                await request("third")
            assert loop.time() - started == pytest.approx(READ_WAIT_S, abs=1e-3)
        assert slots.in_flight == 0 and slots.waiting == 0 and order == ["first", "second"]

    run_async(scenario(), jumping_clock=True)


def test_slots_go_to_the_line_in_order_and_a_full_line_is_refused_at_once() -> None:
    async def scenario() -> None:
        slots = Slots(2, wait_s=READ_WAIT_S, queue_limit=3)
        order: list[int] = []
        release = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def request(n: int) -> None:
            async with slots.slot():
                order.append(n)
                await release.wait()

        running = [asyncio.create_task(request(n)) for n in range(5)]
        await asyncio.sleep(0.05)
        assert (slots.in_flight, slots.waiting, order) == (2, 3, [0, 1])
        started = loop.time()
        assert await slots.acquire() is False  # the line is full: no wait at all
        assert loop.time() == started
        await asyncio.sleep(READ_WAIT_S - 0.1)
        release.set()  # just in time for the three in line
        await asyncio.wait_for(asyncio.gather(*running), 2.0)
        assert order == [0, 1, 2, 3, 4]
        assert (slots.in_flight, slots.waiting) == (0, 0)

    run_async(scenario(), jumping_clock=True)


def test_a_request_that_leaves_the_line_gives_back_what_it_was_given() -> None:
    """A client that disconnects while waiting is cancelled; a slot handed to it at that
    moment must go to the next in line, not be lost."""

    async def scenario() -> None:
        slots = Slots(1, wait_s=READ_WAIT_S)
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

    run_async(scenario(), jumping_clock=True)


# --- interactive requests first ---------------------------------------------------------------


def test_a_batch_waits_while_a_read_runs_and_goes_on_when_it_ends() -> None:
    gate = ReadsFirst(max_wait_s=30.0)
    assert gate.wait_turn() == 0.0  # nothing interactive: no wait at all
    waited: list[float] = []
    with gate.interactive():
        batch = threading.Thread(target=lambda: waited.append(gate.wait_turn()))
        batch.start()
        batch.join(0.3)
        assert batch.is_alive()  # held back while the read runs
    batch.join(5.0)
    assert not batch.is_alive() and waited and 0.25 < waited[0] < 5.0
    assert gate.active == 0


def test_a_long_read_holds_a_batch_back_only_up_to_the_limit() -> None:
    gate = ReadsFirst(max_wait_s=0.2)
    with gate.interactive(), gate.interactive():
        assert gate.active == 2
        started = time.perf_counter()
        waited = gate.wait_turn()
        assert 0.19 <= waited <= time.perf_counter() - started
    assert gate.active == 0 and gate.wait_turn() == 0.0


@pytest.mark.parametrize(
    ("method", "path", "batch"),
    [
        ("POST", "/api/v1/runs/abc123/metrics", True),
        ("GET", "/api/v1/runs/abc123/metrics", False),  # the metric list is a read
        ("GET", "/api/v1/runs/abc123/series", False),
        ("POST", "/api/v1/runs", False),
        ("POST", "/api/v1/runs/abc/events", False),
        ("POST", "/api/v1/runs//metrics", False),
        ("POST", "/api/v1/runs/a/b/metrics", False),
        ("POST", "/_dash-update-component", False),
        ("GET", "/metrics", False),
    ],
)
def test_only_metric_batches_are_batch_work(method: str, path: str, batch: bool) -> None:
    assert is_batch({"type": "http", "method": method, "path": path}) is batch


def test_a_request_is_interactive_from_its_body_to_its_answer() -> None:
    gate = ReadsFirst()
    seen: list[tuple[str, int]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(("called", gate.active))
        if scope["method"] == "POST":
            while (await receive()).get("more_body"):
                seen.append(("body", gate.active))
            seen.append(("last body", gate.active))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(("answering", gate.active))
        await send({"type": "http.response.body", "body": b"ok"})

    async def call(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> None:
        chunks = [
            {"type": "http.request", "body": b"{", "more_body": True},
            {"type": "http.request", "body": b"}", "more_body": False},
        ]

        async def receive() -> Message:
            return chunks.pop(0)

        async def send(message: Message) -> None:
            pass

        scope = {"type": "http", "method": method, "path": path, "headers": headers}
        await InteractiveRequests(app, gate)(scope, receive, send)

    run_async(call("GET", "/api/v1/runs/r1/series", []))
    assert seen == [("called", 1), ("answering", 0)] and gate.active == 0
    seen.clear()
    run_async(call("POST", "/api/v1/runs", [(b"content-length", b"2")]))
    assert seen == [("called", 0), ("body", 0), ("last body", 1), ("answering", 0)]
    seen.clear()
    run_async(call("POST", "/api/v1/runs/r1/metrics", [(b"content-length", b"2")]))
    assert seen == [("called", 0), ("body", 0), ("last body", 0), ("answering", 0)]
    assert gate.active == 0


def test_batches_stand_aside_for_reads_in_a_real_server(pg_url: str, tmp_path: Path) -> None:
    """Batches and series reads at once: batches wait for reads (the time is counted) and
    every point is stored all the same."""
    tenant = make_tenant(pg_url)
    names = [f"layer{i}/grad_norm" for i in range(200)]
    with running_server(pg_url, tmp_path) as server:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            run_id = api.post(
                "/api/v1/runs", json={"name": "mixed"}, headers=tenant.headers("ingest")
            ).json()["id"]
            stop = threading.Event()
            failures: list[str] = []

            def write(offset: int) -> None:
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    for b in range(40):
                        steps = [offset + b * 20 + i for i in range(20)]
                        body = {"steps": steps, "metrics": {n: [0.5] * 20 for n in names}}
                        r = own.post(
                            f"/api/v1/runs/{run_id}/metrics",
                            json=body,
                            headers=tenant.headers("ingest"),
                        )
                        if r.status_code != 202:
                            failures.append(r.text)

            def read() -> None:
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    while not stop.is_set():
                        r = own.get(
                            f"/api/v1/runs/{run_id}/series",
                            params={"metric": names[:2], "points": 500},
                            headers=tenant.headers("read"),
                        )
                        if r.status_code not in (200, 404, 422):
                            failures.append(r.text)

            writers = [threading.Thread(target=write, args=(k * 10_000,)) for k in range(2)]
            readers = [threading.Thread(target=read) for _ in range(2)]
            for t in writers + readers:
                t.start()
            for t in writers:
                t.join(300)
            stop.set()
            for t in readers:
                t.join(60)
            assert not failures, failures[:3]
            series = api.get(
                f"/api/v1/runs/{run_id}/series",
                params={"metric": names[-1], "points": 10_000},
                headers=tenant.headers("read"),
            ).json()["series"][0]
            assert series["total_points"] == 2 * 40 * 20
            scrape = api.get("/metrics").text
    assert deferred_seconds(scrape) > 0


def test_a_slow_upload_holds_no_batch_back(pg_url: str, tmp_path: Path) -> None:
    """A request whose body is still arriving is not being worked on: a batch sent meanwhile
    is answered at once, even with a long stand-aside limit."""
    tenant = make_tenant(pg_url)
    auth = tenant.headers("ingest")
    release = threading.Event()

    def slow_body() -> Iterator[bytes]:
        yield b'{"name": "slow-'
        release.wait(60)
        yield b'run"}'

    with running_server(pg_url, tmp_path, NORMWATCH_INTERACTIVE_FIRST_S="30") as server:
        with httpx.Client(base_url=server.url, headers=auth, timeout=60) as api:
            run_id = api.post("/api/v1/runs", json={"name": "trainer"}).json()["id"]
            answers: dict[str, httpx.Response] = {}

            def upload() -> None:
                with httpx.Client(base_url=server.url, headers=auth, timeout=90) as own:
                    answers["slow"] = own.post(
                        "/api/v1/runs",
                        content=slow_body(),
                        headers={"Content-Type": "application/json"},
                    )

            slow = threading.Thread(target=upload)
            slow.start()
            time.sleep(0.5)  # its headers are in; its body is not
            try:
                batch = {"steps": [1, 2], "metrics": {"loss": [2.0, 1.5]}}
                started = time.perf_counter()
                answer = api.post(f"/api/v1/runs/{run_id}/metrics", json=batch)
                took = time.perf_counter() - started
                assert answer.status_code == 202, answer.text
                assert slow.is_alive() and took < 20  # not held for the 30 s limit
            finally:
                release.set()
                slow.join(60)
            assert answers["slow"].status_code == 200, answers["slow"].text
            scrape = api.get("/metrics").text
    assert deferred_seconds(scrape) == 0


def deferred_seconds(scrape: str) -> float:
    values = [
        float(line.split()[-1])
        for line in scrape.splitlines()
        if line.startswith("normwatch_ingest_deferred_seconds_total")
    ]
    assert len(values) == 1, scrape
    return values[0]


def test_a_large_batch_waits_for_small_ones_which_wait_only_for_reads() -> None:
    gate = ReadsFirst(max_wait_s=0.2)
    with gate.small_batch(), gate.small_batch():
        assert gate.wait_turn(small=True) == 0.0  # small batches do not wait for each other
        assert gate.wait_turn() >= 0.19  # a large one waits for them
        with gate.interactive():
            assert gate.wait_turn(small=True) >= 0.19  # and every batch for a read
    assert gate.wait_turn() == 0.0 and gate.wait_turn(small=True) == 0.0
    waited: list[float] = []
    with gate.small_batch():
        gate.max_wait_s = 30.0
        large = threading.Thread(target=lambda: waited.append(gate.wait_turn()))
        large.start()
        large.join(0.3)
        assert large.is_alive()  # held back while the small batch runs
    large.join(5.0)
    assert not large.is_alive() and 0.25 < waited[0] < 5.0


def test_a_large_batch_stands_aside_for_a_bounded_time_in_all() -> None:
    gate = ReadsFirst(max_wait_s=0.2)
    deferred: list[float] = []
    context = SimpleNamespace(
        reads_first=gate, telemetry=SimpleNamespace(deferred=SimpleNamespace(inc=deferred.append))
    )
    turns = _Turns(context, small=False)  # type: ignore[arg-type]
    with gate.small_batch():
        started = time.perf_counter()
        for _ in range(8):
            turns.stand_aside()
        took = time.perf_counter() - started
    # Waits of 0.2 s until LARGE_BATCH_WAIT_S is spent, then none: 3 waits, not 8.
    assert len(deferred) == 3 and LARGE_BATCH_WAIT_S <= sum(deferred) <= took
    small = _Turns(context, small=True)  # type: ignore[arg-type]
    with gate.small_batch():
        small.stand_aside()
    assert len(deferred) == 3


def test_a_small_batch_is_marked_from_its_body_to_its_answer_and_a_large_one_never() -> None:
    gate = ReadsFirst()
    seen: list[tuple[str, int, bool]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        marked = bool(scope.get("state", {}).get("small_batch"))
        seen.append(("called", gate.small, marked))
        while (await receive()).get("more_body"):
            pass
        seen.append(("body read", gate.small, marked))
        await send({"type": "http.response.start", "status": 202, "headers": []})
        seen.append(("answering", gate.small, marked))

    async def call(headers: list[tuple[bytes, bytes]]) -> None:
        async def receive() -> Message:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message: Message) -> None:
            pass

        scope = {"type": "http", "method": "POST", "path": "/api/v1/runs/r1/metrics"}
        middleware = InteractiveRequests(app, gate, small_batch_bytes=1000)
        await middleware({**scope, "headers": headers}, receive, send)

    run_async(call([(b"content-length", b"1000")]))
    assert seen == [("called", 0, True), ("body read", 1, True), ("answering", 0, True)]
    for large in ([(b"content-length", b"1001")], [(b"transfer-encoding", b"chunked")]):
        seen.clear()
        run_async(call(large))
        assert seen == [("called", 0, False), ("body read", 0, False), ("answering", 0, False)]
    assert (gate.small, gate.active) == (0, 0)


# --- a fair share of reads ----------------------------------------------------------------


def test_one_caller_holds_at_most_its_share_of_the_read_slots() -> None:
    """Sixteen expensive reads sent at once by one token held every read slot, and other
    users were answered 503 after waiting 10 s."""

    async def scenario() -> None:
        reads = Slots(4, wait_s=READ_WAIT_S)
        shares = CallerShares(2, wait_s=READ_WAIT_S)
        loop = asyncio.get_running_loop()
        release = asyncio.Event()
        entered: list[bytes] = []
        answers: list[tuple[bytes, int, dict[bytes, bytes]]] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            entered.append(dict(scope["headers"]).get(b"authorization", b"-"))
            await release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        admission = Admission(app, Slots(1, wait_s=1.0), reads, shares=shares)

        async def call(token: bytes | None, address: str = "10.0.0.1") -> None:
            headers = [] if token is None else [(b"authorization", token)]
            scope = {
                "type": "http",
                "method": "GET",
                "path": "/api/v1/runs",
                "headers": headers,
                "client": (address, 5000),
            }

            async def receive() -> Message:
                return {"type": "http.request", "body": b""}

            async def send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    who = token or address.encode()
                    answers.append((who, message["status"], dict(message["headers"])))

            await admission(scope, receive, send)

        sent = loop.time()
        greedy = [asyncio.create_task(call(b"Bearer a")) for _ in range(6)]
        await asyncio.sleep(0.05)
        assert entered == [b"Bearer a"] * 2 and reads.in_flight == 2
        others = [
            asyncio.create_task(call(b"Bearer b")),
            asyncio.create_task(call(None, "10.0.0.2")),
        ]
        await asyncio.sleep(0.05)
        assert sorted(entered) == [b"-", b"Bearer a", b"Bearer a", b"Bearer b"]  # at once
        assert reads.in_flight == 4 and len(shares) == 3
        # The greedy caller's four others wait for its own slots, the read wait long.
        await asyncio.sleep(sent + READ_WAIT_S - 0.001 - loop.time())
        assert answers == []
        await asyncio.sleep(0.002)
        refused = [(who, status) for who, status, _ in answers]
        assert refused == [(b"Bearer a", 503)] * 4
        assert all(headers[b"retry-after"] == b"1" for _, _, headers in answers)
        release.set()
        await asyncio.wait_for(asyncio.gather(*greedy, *others), 2.0)
        assert sorted(status for _, status, _ in answers) == [200] * 4 + [503] * 4
        assert reads.in_flight == 0 and len(shares) == 0

    run_async(scenario(), jumping_clock=True)


def test_callers_are_told_by_token_then_session_then_address() -> None:
    def scope(headers: list[tuple[bytes, bytes]], address: str = "10.0.0.1") -> Scope:
        return {"type": "http", "headers": headers, "client": (address, 1)}

    token = [(b"authorization", b"Bearer nw_x")]
    cookie = [(b"cookie", b"normwatch_session=s1")]
    assert caller_of(scope(token)) == caller_of(scope(token + cookie, "10.9.9.9"))
    assert caller_of(scope(token)) != caller_of(scope([(b"authorization", b"Bearer nw_y")]))
    assert caller_of(scope(cookie)) == caller_of(scope(cookie, "10.0.0.2"))
    assert caller_of(scope(cookie)) != caller_of(scope([(b"cookie", b"normwatch_session=s2")]))
    assert caller_of(scope([])) != caller_of(scope([], "10.0.0.2"))
