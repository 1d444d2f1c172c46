"""`normwatch.client.Run` against an in-memory emulation of the ingest API.

Every test has a spool folder of its own (``tmp_path``), so that streams one test leaves
behind are not replayed by the next.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from normwatch.client import Run, sync_spool
from normwatch.client._frames import LOCK_FILE, Kind, SpoolBusy, lock_stream
from normwatch.client._queue import EventRecord, SendQueue
from normwatch.client._spool import Spool
from normwatch.client._streams import new_stream_dir, run_folder
from tests.client.fake_ingest import TOKEN, URL, FakeIngest, Fault, endpoint


def failing(times: int, response: Callable[[], httpx.Response]) -> Fault:
    """A fault answering ``response()`` for the first ``times`` calls."""
    remaining = [times]

    def fault(request: httpx.Request, document: dict[str, object] | None) -> httpx.Response | None:
        if remaining[0] <= 0:
            return None
        remaining[0] -= 1
        return response()

    return fault


def unavailable() -> httpx.Response:
    return httpx.Response(503, headers={"Retry-After": "0"}, json={"detail": "overloaded"})


@pytest.fixture
def server() -> FakeIngest:
    return FakeIngest()


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    return tmp_path / "spool"


@pytest.fixture
def make_run(server: FakeIngest, spool: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def make(**options: Any) -> Run:
        defaults: dict[str, Any] = {
            "name": "exp1",
            "flush_interval": 0.05,
            "transport": server.transport(),
            "spool_dir": spool,
        }
        options = defaults | options
        run = Run(URL, token=TOKEN, **options)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.finish(timeout=1.0)


def test_every_point_arrives_exactly_once_through_transient_failures(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    server.faults["runs"] = failing(2, unavailable)
    server.faults["metrics"] = failing(3, unavailable)
    run = make_run(max_batch_points=500)
    expected = {}
    for step in range(1000):
        metrics = {"train/loss": 3.0 - step / 1000, "grad/norm/total": 0.3, f"m/{step % 7}": step}
        run.log(metrics, step=step)
        expected.update({(step, name): float(value) for name, value in metrics.items()})
    run.finish(timeout=10.0)

    assert server.points == expected
    assert set(server.arrivals.values()) == {1}
    batch_sizes = [
        sum(value is not None for column in batch["metrics"].values() for value in column)
        for batch in server.batches
    ]
    assert max(batch_sizes) <= 500
    assert (run.sent_points, run.pending_points, run.dropped_points) == (len(expected), 0, 0)
    assert run.run_id == "run-1" and run.segment == 1
    assert list(run.spool_folder.parent.iterdir()) == [], "nothing left once delivered"


def test_batch_is_columnar_null_padded_gzipped_with_non_finite_spelled_out(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run(flush_interval=30.0)
    run.log({"a": 1.0}, step=1)
    run.log({"b": math.nan}, step=2)
    run.log({"a": math.inf, "b": -math.inf}, step=3)
    run.finish(timeout=5.0)

    assert server.batches == [
        {
            "steps": [1, 2, 3],
            "metrics": {"a": [1.0, None, "Infinity"], "b": [None, "NaN", "-Infinity"]},
            "segment": 1,
        }
    ]
    (request,) = [r for r in server.requests if r.url.path.endswith("/metrics")]
    assert request.url.path == "/api/v1/runs/run-1/metrics"
    assert request.headers["content-encoding"] == "gzip"
    assert gzip.decompress(request.content).startswith(b"{")


def test_logs_of_the_same_step_merge_and_each_metric_keeps_its_first_value(
    server: FakeIngest, make_run: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    run = make_run(flush_interval=30.0)  # all of it in one flush
    run.log({"a": 1.0, "b": 2.0}, step=5)
    run.log({"b": 3.0, "c": 4.0}, step=5)
    run.log({"b": 5.0}, step=6)
    run.log({"b": 6.0, "a": 7.0}, step=6)
    run.log({"b": 8.0}, step=5)
    with caplog.at_level(logging.WARNING, logger="normwatch.client"):
        run.finish(timeout=5.0)

    assert server.batches == [
        {
            "steps": [5, 6],
            "metrics": {"a": [1.0, 7.0], "b": [2.0, 5.0], "c": [4.0, None]},
            "segment": 1,
        }
    ]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, "once a metric, however often it repeats"
    assert "'b' was logged more than once at step 5" in warned[0]
    assert "first value" in warned[0]
    assert (run.sent_points, run.ignored_points, run.pending_points) == (5, 3, 0)


def test_points_the_server_already_holds_are_counted_and_named_once_a_metric(
    server: FakeIngest, make_run: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    first = make_run(name="exp1")
    for step in range(10):
        first.log({"loss": 1.0, "lr": 0.1}, step=step)
    first.finish(timeout=5.0)
    again = make_run(name="exp1", max_batch_points=4)  # no start_step: the same segment
    with caplog.at_level(logging.WARNING, logger="normwatch.client"):
        for step in range(5, 15):
            again.log({"loss": 2.0, "lr": 0.1}, step=step)
        again.finish(timeout=5.0)

    assert {server.points[(s, "loss")] for s in range(10)} == {1.0}, "the first value stands"
    assert {server.points[(s, "loss")] for s in range(10, 15)} == {2.0}
    assert (again.sent_points, again.ignored_points, again.pending_points) == (10, 10, 0)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and all("already held values of" in m for m in warned)
    assert {"'loss'", "'lr'"} == {m.split("values of ")[1].split(" ")[0] for m in warned}
    assert all("start_step=" in m for m in warned), "the warning says how to restart"


def test_a_batch_re_sent_after_its_answer_was_lost_counts_as_sent_without_a_warning(
    server: FakeIngest, make_run: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    def store_then_fail(request: httpx.Request, document: dict[str, object] | None) -> None:
        assert document is not None
        server._store(document)  # stored, and then the answer is lost
        del server.faults["metrics"]
        raise httpx.ReadTimeout("answer lost", request=request)

    server.faults["metrics"] = store_then_fail  # type: ignore[assignment]
    run = make_run()
    with caplog.at_level(logging.WARNING, logger="normwatch.client"):
        for step in range(3):
            run.log({"loss": float(step)}, step=step)
        run.finish(timeout=10.0)

    assert len(server.batches) == 2 and server.batches[0] == server.batches[1]
    assert (run.sent_points, run.ignored_points, run.pending_points) == (3, 0, 0)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_events_arrive_in_order_with_the_metrics_around_them(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run(flush_interval=30.0)
    run.log({"a": 1.0}, step=80_999)
    run.event("near-dropless EP routing", step=81_000, kind="config")
    run.log({"a": 2.0}, step=81_000)
    run.event("looked fine", step=81_001)
    run.finish(timeout=5.0)

    sequence = [endpoint(r) for r in server.requests]
    assert sequence == ["runs", "metrics", "events", "metrics", "events", "update"]
    assert server.events == [
        {"step": 81_000, "kind": "config", "text": "near-dropless EP routing", "segment": 1},
        {"step": 81_001, "kind": "note", "text": "looked fine", "segment": 1},
    ]
    assert [b["steps"] for b in server.batches] == [[80_999], [81_000]]


def test_run_document_carries_project_config_tags_and_start_step(
    make_run: Callable[..., Run],
) -> None:
    server = FakeIngest(segment=2)
    run = make_run(
        transport=server.transport(),
        project="marin",
        name="32b-exp1295",
        config={"lr": 3e-4, "beta2": np.float32(0.95), "clip": math.inf},
        tags=["32b"],
        start_step=77_096,
    )
    run.log({"a": 1.0}, step=77_096)
    run.finish(timeout=5.0)

    assert server.created == [
        {
            "name": "32b-exp1295",
            "config": {"lr": 3e-4, "beta2": pytest.approx(0.95), "clip": "Infinity"},
            "tags": ["32b"],
            "project": "marin",
            "start_step": 77_096,
        }
    ]
    assert run.segment == 2
    assert server.batches[0]["segment"] == 2


def test_optional_fields_are_omitted_from_the_run_document(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    make_run().finish(timeout=5.0)
    assert server.created == [{"name": "exp1", "config": {}, "tags": []}]


def test_numpy_scalars_and_size_one_arrays_are_converted(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run()
    numpy_step: Any = np.int64(7)
    run.log(
        {
            "f32": np.float32(1.5),
            "i64": np.int64(4),
            "zero_d": np.array(2.0),
            "one": np.array([3.0]),
            "bool": True,
            "f16_nan": np.float16("nan"),
        },
        step=numpy_step,
    )
    run.finish(timeout=5.0)

    assert server.points == {
        (7, "f32"): 1.5,
        (7, "i64"): 4.0,
        (7, "zero_d"): 2.0,
        (7, "one"): 3.0,
        (7, "bool"): 1.0,
        (7, "f16_nan"): "NaN",
    }


def test_log_never_raises_and_drops_only_the_bad_values(
    server: FakeIngest, make_run: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    run = make_run()
    garbage: list[Any] = [None, "garbage", "three", 1.5, object()]
    mixed: Any = {"text": "1.5", "none": None, "vector": np.ones(3), 3: 2.0, "ok": 1.0}
    run.log(mixed, step=1)
    run.log(garbage[0], step=2)
    run.log(garbage[1], step=2)
    run.log({"ok": 1.0}, step=garbage[2])
    run.log({"ok": 1.0}, step=-1)
    run.log({"ok": 1.0}, step=garbage[3])
    run.event(garbage[4], step=garbage[0])
    run.finish(timeout=5.0)

    assert server.points == {(1, "ok"): 1.0}
    assert run.dropped_points == 4
    text = caplog.text
    for fragment in ("of text:", "of none:", "of vector:", "of 3:", "log() call", "event() call"):
        assert fragment in text


def test_a_permanent_4xx_dead_letters_the_batch_and_warns_once(
    server: FakeIngest, make_run: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="normwatch.client")

    def reject_early_steps(
        request: httpx.Request, batch: dict[str, object] | None
    ) -> httpx.Response | None:
        assert batch is not None
        if batch["steps"] == [1] or batch["steps"] == [2]:
            return httpx.Response(400, json={"detail": "metrics.x[0]: value out of range"})
        return None

    server.faults["metrics"] = reject_early_steps
    run = make_run(flush_interval=30.0, max_batch_points=1, project="marin")
    for step in (1, 2, 3, 4):
        run.log({"x": float(step)}, step=step)
    run.finish(timeout=5.0)

    assert server.points == {(3, "x"): 3.0, (4, "x"): 4.0}
    assert (run.sent_points, run.dead_lettered_points, run.pending_points) == (2, 2, 0)
    assert run.dropped_points == 0
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "out of range" in r.message
    ]
    assert len(warnings) == 1
    assert "HTTP 400" in warnings[0].getMessage()
    metric_requests = [r for r in server.requests if r.url.path.endswith("/metrics")]
    assert len(metric_requests) == 4, "a permanent 4xx must not be retried"
    lines = (run.spool_folder / "deadletter.jsonl").read_text().splitlines()
    letters = [json.loads(line) for line in lines]
    assert [(d["kind"], d["points"], d["body"]) for d in letters] == [
        ("metrics", 1, {"steps": [1], "metrics": {"x": [1.0]}}),
        ("metrics", 1, {"steps": [2], "metrics": {"x": [2.0]}}),
    ]
    assert {d["message"] for d in letters} == {"HTTP 400: metrics.x[0]: value out of range"}
    assert {(d["project"], d["name"], d["run_id"], d["segment"]) for d in letters} == {
        ("marin", "exp1", "run-1", 1)
    }
    assert [p.name for p in run.spool_folder.iterdir()] == ["deadletter.jsonl"]


def test_a_run_the_server_refuses_to_create_is_dead_lettered_whole(
    server: FakeIngest, make_run: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")

    def invalid_name() -> httpx.Response:
        return httpx.Response(422, json={"detail": "name: string does not match pattern"})

    server.faults["runs"] = failing(10**9, invalid_name)
    run = make_run()
    run.log({"a": 1.0, "b": 2.0}, step=0)
    run.event("note", step=0)
    run.finish(timeout=5.0)

    assert (run.dead_lettered_points, run.pending_points, run.sent_points) == (2, 0, 0)
    letters = [
        json.loads(line)
        for line in (run.spool_folder / "deadletter.jsonl").read_text().splitlines()
    ]
    assert [d["kind"] for d in letters] == ["metrics", "event"]
    assert letters[0]["run"] == {"name": "exp1", "config": {}, "tags": []}
    assert "does not match pattern" in caplog.text
    assert [endpoint(r) for r in server.requests] == ["runs"]


def test_a_batch_too_large_for_the_server_is_split(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    def over_two_steps(
        request: httpx.Request, batch: dict[str, object] | None
    ) -> httpx.Response | None:
        assert batch is not None and isinstance(batch["steps"], list)
        return httpx.Response(413, text="too large") if len(batch["steps"]) > 2 else None

    server.faults["metrics"] = over_two_steps
    run = make_run(flush_interval=30.0)
    for step in range(7):
        run.log({"x": float(step)}, step=step)
    run.finish(timeout=5.0)

    assert server.points == {(step, "x"): float(step) for step in range(7)}
    assert run.dropped_points == 0


def test_a_record_larger_than_a_batch_is_split_by_metric(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run(max_batch_points=10)
    run.log({f"layer/{i}": float(i) for i in range(25)}, step=3)
    run.finish(timeout=5.0)

    assert server.points == {(3, f"layer/{i}"): float(i) for i in range(25)}
    assert [len(b["metrics"]) for b in server.batches] == [10, 10, 5]


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(lambda: httpx.Response(503, json={"detail": "down"}), id="503"),
        pytest.param(lambda: httpx.Response(429, headers={"Retry-After": "120"}), id="429"),
    ],
)
def test_finish_returns_in_time_while_the_server_keeps_failing(
    server: FakeIngest, make_run: Callable[..., Run], failure: Callable[[], httpx.Response]
) -> None:
    server.faults["runs"] = failing(10**9, failure)
    run = make_run()
    for step in range(100):
        run.log({"a": 1.0, "b": 2.0}, step=step)
    started = time.monotonic()
    run.finish(timeout=0.5)
    elapsed = time.monotonic() - started

    assert elapsed < 1.5
    assert (run.sent_points, run.pending_points) == (0, 200)
    assert run.run_id is None
    assert server.updates == [], "a run that was never created has no status to set"
    assert server.points == {}

    server.faults.clear()
    report = sync_spool(run.spool_folder, token=TOKEN, transport=server.transport())
    assert (report.ok, report.tally.batches, report.tally.points) == (True, 1, 200)
    assert len(server.points) == 200 and set(server.arrivals.values()) == {1}
    assert server.updates == [{"status": "finished"}]


def test_finish_returns_in_time_when_the_server_is_unreachable(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    run = make_run(transport=httpx.MockTransport(refuse))
    run.log({"a": 1.0}, step=0)
    started = time.monotonic()
    run.finish(timeout=0.5)

    assert time.monotonic() - started < 1.5
    assert run.pending_points == 1


def test_a_full_queue_sheds_the_oldest_steps_and_keeps_events() -> None:
    queue = SendQueue(max_points=10, batch_points=5)
    assert queue.put(EventRecord(0, "note", "early note"), 0) == 0
    shed = [queue.put((step, {"x": float(step)}), 1) for step in range(100)]

    assert sum(s or 0 for s in shed) == 90
    assert (queue.dropped_points, queue.queued_points) == (90, 10)
    assert queue.take() == EventRecord(0, "note", "early note")
    assert queue.take() == [(step, {"x": float(step)}) for step in range(90, 95)]
    assert queue.take() == [(step, {"x": float(step)}) for step in range(95, 100)]
    assert queue.take() is None


def test_the_put_that_fills_a_batch_wakes_the_writer_once() -> None:
    woken: list[int] = []
    queue = SendQueue(max_points=1000, batch_points=10)
    queue.on_batch_ready = lambda: woken.append(queue.queued_points)
    for step in range(4):
        queue.put((step, {"a": 1.0, "b": 2.0, "c": 3.0}), 3)

    assert woken == [12], "once, by the put that reached 10, not by the next"
    assert len(queue.take() or []) == 4, "a batch of 10: three records and part of the fourth"
    assert queue.queued_points == 2
    queue.put((5, {f"m{i}": 0.0 for i in range(25)}), 25)
    assert woken == [12, 27]


def test_a_full_batch_is_sent_without_waiting_for_the_flush_interval(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run(flush_interval=60.0, max_batch_points=100)
    run.log({f"grad/norm/layers.{i}": 0.5 for i in range(100)}, step=7)
    deadline = time.monotonic() + 10.0
    while len(server.points) < 100 and time.monotonic() < deadline:
        time.sleep(0.02)

    assert len(server.points) == 100, "the writer waited for its 60 s timer"
    run.finish(timeout=5.0)
    assert run.sent_points == 100


def test_a_full_spool_drops_the_oldest_with_a_counted_warning(
    server: FakeIngest,
    make_run: Callable[..., Run],
    spool: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    server_up = threading.Event()

    def down_until_released(
        request: httpx.Request, document: dict[str, object] | None
    ) -> httpx.Response | None:
        return None if server_up.is_set() else unavailable()

    server.faults["runs"] = down_until_released
    run = make_run(spool_max_bytes=8192, max_batch_points=10)
    for step in range(1000):
        run.log({"x": float(step), "y": 1.0}, step=step)
    queue = run._queue
    assert wait_for(lambda: queue.queued_points + queue.inflight_points == 0)
    dropped = run.dropped_points
    assert 0 < dropped < 2000 and run.pending_points == 2000 - dropped
    assert "the spool is full (spool_max_bytes=8192)" in caplog.text
    assert sum(f.stat().st_size for f in spool.rglob("*.nws")) <= 8192

    server_up.set()
    run.finish(timeout=5.0)
    kept = sorted({step for step, _ in server.points})
    assert kept == list(range(1000 - len(kept), 1000)), "the oldest steps go first"
    assert len(server.points) == 2000 - dropped == run.sent_points
    assert set(server.arrivals.values()) == {1}


def test_a_refused_token_keeps_the_metrics_in_the_spool_for_sync(
    server: FakeIngest,
    make_run: Callable[..., Run],
    spool: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")

    def bad_token() -> httpx.Response:
        return httpx.Response(401, json={"detail": "bad token"})

    server.faults["runs"] = failing(10**9, bad_token)
    run = make_run()
    run.log({"a": 1.0}, step=0)
    assert wait_for(lambda: "bad token" in caplog.text)
    run.log({"a": 2.0}, step=1)
    started = time.monotonic()
    run.finish(timeout=5.0)

    assert time.monotonic() - started < 1.0, "nothing to wait for once the token is refused"
    assert (run.dropped_points, run.pending_points, run.sent_points) == (0, 2, 0)
    assert f"normwatch sync {run.spool_folder}" in caplog.text
    assert [endpoint(r) for r in server.requests] == ["runs"]

    del server.faults["runs"]
    report = sync_spool(spool, token=TOKEN, transport=server.transport())
    assert report.ok and (report.tally.points, report.delivered) == (2, 1)
    assert server.points == {(0, "a"): 1.0, (1, "a"): 2.0}
    assert server.updates == [{"status": "finished"}]
    assert not any(spool.rglob("*.nws"))


def wait_let_go(spool: Path, timeout: float = 10.0) -> None:
    """Until no stream under ``spool`` is held. `Run.finish` gives up at its deadline and its
    sender lets go of the stream a moment later, on a loaded machine after the call returned
    (a process that ended lets go at once); a stream still held is not replayed."""
    deadline = time.monotonic() + timeout
    for lock in spool.rglob(LOCK_FILE):
        while True:
            try:
                os.close(lock_stream(lock.parent))
                break
            except SpoolBusy:
                assert time.monotonic() < deadline, f"{lock.parent} is still held"
                time.sleep(0.01)


def test_a_spool_left_by_an_earlier_process_is_replayed_before_the_new_run(
    server: FakeIngest, make_run: Callable[..., Run], spool: Path
) -> None:
    server.faults["runs"] = failing(10**9, unavailable)
    first = make_run(start_step=0)
    for step in range(50):
        first.log({"loss": float(step)}, step=step)
    first.finish(timeout=0.3)
    assert (first.pending_points, first.sent_points) == (50, 0)
    assert server.points == {}
    wait_let_go(spool)

    del server.faults["runs"]
    second = make_run(start_step=40)
    for step in range(40, 60):
        second.log({"loss": -float(step)}, step=step)
    second.finish(timeout=5.0)

    assert [document.get("start_step") for document in server.created] == [0, 40]
    served = [endpoint(r) for r in server.requests[len(server.requests) - 6 :]]
    assert served == ["runs", "metrics", "update", "runs", "metrics", "update"], (
        "the old stream is delivered, status included, before the new run opens"
    )
    assert second.sent_points == 20 and second.pending_points == 0
    assert set(server.arrivals.values()) == {1, 2}  # steps 40..49 were logged by both
    assert list(spool.iterdir()) == [], "both streams delivered: nothing is left"


def test_a_leftover_stream_that_cannot_be_replayed_does_not_hold_back_the_new_run(
    server: FakeIngest,
    make_run: Callable[..., Run],
    spool: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    folder = run_folder(spool, None, "exp1")
    broken = Spool.create(
        new_stream_dir(folder), {"name": "exp1", "create": {"name": "exp1"}}, max_bytes=2**20
    )
    broken.append(Kind.EVENT, 0, b"not json")
    broken.close()
    run = make_run()
    run.log({"a": 1.0}, step=0)
    run.finish(timeout=5.0)

    assert server.points == {(0, "a"): 1.0}
    assert "replaying the spool at" in caplog.text
    assert broken.directory is not None and broken.directory.exists(), "kept for inspection"


def test_a_full_disk_moves_the_spool_to_memory_and_its_drops_name_the_disk(
    server: FakeIngest,
    make_run: Callable[..., Run],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    server.faults["runs"] = failing(10**9, unavailable)
    run = make_run(spool_max_bytes=8192, max_batch_points=10)
    assert wait_for(lambda: run.spool_folder.is_dir() and any(run.spool_folder.iterdir()))
    [stream] = run.spool_folder.iterdir()
    # The stream's first chunk file, before anything is written to it, on a device whose
    # every write fails with ENOSPC: a full disk, as the kernel reports it.
    (stream / "00000001.nws").symlink_to("/dev/full")
    for step in range(1000):
        run.log({"x": float(step), "y": 1.0}, step=step)
    queue = run._queue
    assert wait_for(lambda: queue.queued_points + queue.inflight_points == 0)
    dropped = run.dropped_points
    assert 0 < dropped < 2000 and run.pending_points == 2000 - dropped
    disk_full = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "No space left on device" in r.getMessage()
    ]
    assert any("dropped the oldest" in message for message in disk_full), disk_full

    run.finish(timeout=0.2)
    assert run.pending_points == 2000 - dropped
    assert "so those held in memory are lost when this process exits" in caplog.text
    assert "normwatch sync" not in caplog.text, "nothing on disk is left to sync"


def test_a_spool_file_that_cannot_be_created_is_reported_like_a_failed_write(
    server: FakeIngest,
    make_run: Callable[..., Run],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The spool moved to memory without a word when its next chunk file could not be
    created; it now warns as for a failed write, naming the error."""
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    server.faults["runs"] = failing(10**9, unavailable)
    run = make_run(spool_max_bytes=8192, max_batch_points=10)
    assert wait_for(lambda: run.spool_folder.is_dir() and any(run.spool_folder.iterdir()))
    [stream] = run.spool_folder.iterdir()
    (stream / "00000002.nws").mkdir()  # the chunk the spool rotates to cannot be opened
    for step in range(200):
        run.log({"x": float(step)}, step=step)
    queue = run._queue
    assert wait_for(lambda: queue.queued_points + queue.inflight_points == 0)
    assert run.pending_points + run.dropped_points == 200
    assert run.pending_points > 0
    failed = [r.getMessage() for r in caplog.records if "writing the spool" in r.getMessage()]
    assert len(failed) == 1 and "Is a directory" in failed[0], failed
    run.finish(timeout=0.2)


def test_an_unwritable_spool_folder_falls_back_to_memory(
    server: FakeIngest,
    make_run: Callable[..., Run],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    run = make_run(spool_dir=not_a_folder)
    run.log({"a": 1.0}, step=0)
    run.finish(timeout=5.0)

    assert server.points == {(0, "a"): 1.0}
    assert "kept in memory only" in caplog.text


def test_context_manager_flushes_on_exit(server: FakeIngest, spool: Path) -> None:
    transport = server.transport()
    with Run(
        URL, token=TOKEN, name="exp1", flush_interval=30.0, transport=transport, spool_dir=spool
    ) as run:
        run.log({"a": 1.0}, step=0)
    assert server.points == {(0, "a"): 1.0}
    assert run.pending_points == 0
    assert server.updates == [{"status": "finished"}]


def test_log_after_finish_is_dropped_quietly(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run()
    run.finish(timeout=5.0)
    run.log({"a": 1.0}, step=0)
    run.finish(timeout=5.0)
    assert run.dropped_points == 1
    assert server.points == {}


def test_invalid_settings_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="max_batch_points"):
        Run(URL, token=TOKEN, name="x", max_batch_points=10, max_queue_points=5)
    with pytest.raises(ValueError, match="name"):
        Run(URL, token=TOKEN, name="")
    with pytest.raises(ValueError, match="spool_max_bytes"):
        Run(URL, token=TOKEN, name="x", spool_max_bytes=100)


def test_log_costs_the_training_thread_microseconds(make_run: Callable[..., Run]) -> None:
    run = make_run(flush_interval=30.0)
    metrics = {f"grad/norm/layers.{i}": 0.1 * i for i in range(100)}
    costs = []
    for step in range(2000):
        started = time.perf_counter()
        run.log(metrics, step=step)
        costs.append(time.perf_counter() - started)
    assert statistics.median(costs) < 200e-6


def test_values_beyond_float_range_are_dropped_not_fatal(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run()
    run.log({"huge": 10**400, "ok": 2}, step=0)
    run.log({"ok": 3}, step=1)
    run.finish(timeout=5.0)
    assert server.points == {(0, "ok"): 2.0, (1, "ok"): 3.0}
    assert run.dropped_points == 1


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_points_are_sent_on_the_timer_without_finish(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run(flush_interval=0.05)
    run.log({"a": 1.0}, step=0)
    assert wait_for(lambda: run.sent_points == 1)
    assert server.points == {(0, "a"): 1.0}


def test_a_full_batch_is_sent_before_the_timer(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run(flush_interval=60.0, max_batch_points=10)
    assert wait_for(lambda: run.run_id is not None)
    for step in range(5):
        run.log({"a": 1.0, "b": 2.0}, step=step)
    assert wait_for(lambda: run.sent_points == 10)
    assert run.pending_points == 0


def test_finish_marks_the_run_finished_once_after_all_metrics(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run(flush_interval=30.0, max_batch_points=10)
    for step in range(50):
        run.log({"a": float(step), "b": 1.0}, step=step)
    run.event("last words", step=49)
    run.finish(timeout=5.0)
    run.finish(timeout=5.0)

    assert server.updates == [{"status": "finished"}]
    sequence = [endpoint(r) for r in server.requests]
    assert sequence.count("update") == 1
    assert sequence[-1] == "update", "the status must follow every metric and event"
    assert len(server.points) == 100 and server.events[-1]["text"] == "last words"
    (patch,) = [r for r in server.requests if r.method == "PATCH"]
    assert patch.url.path == "/api/v1/runs/run-1"
    assert patch.headers["authorization"] == f"Bearer {TOKEN}"


def test_a_block_left_by_an_exception_marks_the_run_failed(server: FakeIngest, spool: Path) -> None:
    transport = server.transport()
    with (
        pytest.raises(RuntimeError, match="loss is NaN"),
        Run(
            URL, token=TOKEN, name="exp1", flush_interval=30.0, transport=transport, spool_dir=spool
        ) as run,
    ):
        run.log({"a": 1.0}, step=0)
        raise RuntimeError("loss is NaN")

    assert server.points == {(0, "a"): 1.0}
    assert server.updates == [{"status": "failed"}]
    assert [endpoint(r) for r in server.requests] == ["runs", "metrics", "update"]


def test_finish_can_mark_the_run_failed_and_refuses_other_statuses(
    server: FakeIngest, make_run: Callable[..., Run]
) -> None:
    run = make_run()
    bad_status: Any = "done"
    with pytest.raises(ValueError, match="finished, failed"):
        run.finish(timeout=5.0, status=bad_status)
    run.finish(timeout=5.0, status="failed")
    assert server.updates == [{"status": "failed"}]


@pytest.mark.parametrize("crashed", [False, True], ids=["clean-exit", "uncaught-exception"])
def test_exit_without_finish_marks_the_run_by_how_the_interpreter_ends(
    server: FakeIngest,
    make_run: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    crashed: bool,
) -> None:
    for name in ("last_exc", "last_value"):
        monkeypatch.delattr(sys, name, raising=False)
    if crashed:
        monkeypatch.setattr(sys, "last_value", RuntimeError("boom"), raising=False)
    run = make_run()
    run.log({"a": 1.0}, step=0)
    run._flush_at_exit()

    assert server.points == {(0, "a"): 1.0}
    assert server.updates == [{"status": "failed" if crashed else "finished"}]


def _refuse_connection(
    request: httpx.Request, document: dict[str, object] | None
) -> httpx.Response | None:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(failing(10**9, unavailable), id="503"),
        pytest.param(
            failing(10**9, lambda: httpx.Response(429, headers={"Retry-After": "120"})), id="429"
        ),
        pytest.param(_refuse_connection, id="unreachable"),
        pytest.param(
            failing(10**9, lambda: httpx.Response(405, json={"detail": "Method Not Allowed"})),
            id="405",
        ),
    ],
)
def test_finish_returns_in_time_when_the_status_update_fails(
    server: FakeIngest,
    make_run: Callable[..., Run],
    caplog: pytest.LogCaptureFixture,
    fault: Fault,
) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    server.faults["update"] = fault
    run = make_run()
    for step in range(10):
        run.log({"a": 1.0}, step=step)
    started = time.monotonic()
    run.finish(timeout=0.5)
    elapsed = time.monotonic() - started

    assert elapsed < 1.5
    assert (run.sent_points, run.pending_points, run.dropped_points) == (10, 0, 0)
    assert server.updates == []
    assert any(r.method == "PATCH" for r in server.requests)
    # The sender may log just after finish() has stopped waiting for it.
    assert wait_for(lambda: "could not mark the run finished" in caplog.text)
