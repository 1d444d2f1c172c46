"""`import_records` against an in-memory ingest API: it waits for the server and loses
nothing, and gives up when nothing gets through.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from pathlib import Path

import httpx
import pytest

from normwatch.client import Run
from normwatch.client.importers import ImportAborted, import_records


class Ingest:
    """The ingest endpoints in memory; ``create_status`` and ``metrics_status`` inject faults."""

    def __init__(self, *, create_status: int = 200, metrics_status: int = 202) -> None:
        self.create_status = create_status
        self.metrics_status = metrics_status
        self.points: dict[tuple[int, str], object] = {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/runs":
            body = {"id": "r1", "segment": 1} if self.create_status == 200 else {"detail": "no"}
            return httpx.Response(self.create_status, json=body)
        if request.method == "PATCH":
            return httpx.Response(200, json={})
        if self.metrics_status != 202:
            return httpx.Response(self.metrics_status, headers={"Retry-After": "0"})
        batch = json.loads(gzip.decompress(request.content))
        for name, column in batch["metrics"].items():
            for step, value in zip(batch["steps"], column, strict=True):
                if value is not None:
                    self.points[(step, name)] = value
        return httpx.Response(202, json={"accepted": 0})

    def run(self, **options: object) -> Run:
        return Run(
            "http://normwatch.test",
            token="t",
            name="imported",
            transport=httpx.MockTransport(self.handle),
            flush_interval=0.01,
            **options,  # type: ignore[arg-type]
        )


def test_import_records_waits_for_the_server_and_loses_nothing(tmp_path: Path) -> None:
    ingest = Ingest()
    run = ingest.run(max_batch_points=64, spool_dir=tmp_path)
    waits: list[int] = []

    def sleep(seconds: float) -> None:
        waits.append(run.pending_points)
        time.sleep(seconds)

    records = ((step, {"loss": step / 10, "grad/norm/total": math.nan}) for step in range(2_000))
    summary = import_records(records, run, total=2_000, max_pending=200, sleep=sleep)
    run.finish(timeout=10)

    assert waits and max(waits) <= 202
    assert (summary.records, summary.steps, summary.points) == (2_000, 2_000, 4_000)
    assert (summary.first_step, summary.last_step) == (0, 1_999)
    assert (summary.sent_points, summary.dropped_points, summary.pending_points) == (4_000, 0, 0)
    assert (summary.run_id, summary.segment) == ("r1", 1)
    assert ingest.points[(1_999, "loss")] == 199.9
    assert ingest.points[(5, "grad/norm/total")] == "NaN"


def test_import_records_gives_up_when_nothing_gets_through(tmp_path: Path) -> None:
    stalled = Ingest(metrics_status=503).run(spool_dir=tmp_path)
    with pytest.raises(ImportAborted, match=r"^the server took no data for 0 s with 10 values"):
        import_records(((step, {"loss": 1.0}) for step in range(10)), stalled, stall_timeout=0.3)
    stalled.finish(timeout=0.1)

    unopened = Ingest(create_status=503).run(spool_dir=tmp_path)
    with pytest.raises(ImportAborted, match=r"^the server did not open the run within 0 s \("):
        import_records(((step, {"loss": 1.0}) for step in range(10)), unopened, stall_timeout=0.3)
    unopened.finish(timeout=0.1)
