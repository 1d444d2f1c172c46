"""An in-process stand-in for the ingest endpoint, for client tests that need no server."""

from __future__ import annotations

import gzip
import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

TOKEN = "nw_ingest_test"


URL = "http://normwatch.test"


def endpoint(request: httpx.Request) -> str:
    """``runs``, ``metrics``, ``events``, or ``update`` for ``PATCH /runs/{id}``."""
    return "update" if request.method == "PATCH" else request.url.path.rsplit("/", 1)[-1]


Fault = Callable[[httpx.Request, dict[str, object] | None], httpx.Response | None]
"""Returns a response to answer instead of the normal one, or None to answer normally."""


class FakeIngest:
    """The ingest endpoints, in memory, with faults injected per endpoint."""

    def __init__(self, *, segment: int = 1) -> None:
        self.segment = segment
        self.lock = threading.Lock()
        self.requests: list[httpx.Request] = []
        self.created: list[dict[str, object]] = []
        self.batches: list[dict[str, Any]] = []
        self.events: list[dict[str, object]] = []
        self.updates: list[dict[str, object]] = []
        self.points: dict[tuple[int, str], object] = {}
        self.arrivals: Counter[tuple[int, str]] = Counter()
        self.faults: dict[str, Fault] = {}

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        assert request.headers["content-type"] == "application/json"
        raw = request.content
        if request.headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        document = json.loads(raw)
        name = endpoint(request)
        fault = self.faults.get(name)
        if fault is not None and (answer := fault(request, document)) is not None:
            return answer
        with self.lock:
            if name == "runs":
                self.created.append(document)
                return httpx.Response(200, json={"id": "run-1", "segment": self.segment})
            if name == "metrics":
                return self._store(document)
            if name == "update":
                assert request.url.path == "/api/v1/runs/run-1"
                self.updates.append(document)
                return httpx.Response(200, json={"id": "run-1", **document})
            self.events.append(document)
            return httpx.Response(201, json={"id": len(self.events)})

    def _store(self, batch: dict[str, object]) -> httpx.Response:
        steps = batch["steps"]
        metrics = batch["metrics"]
        assert isinstance(steps, list) and isinstance(metrics, dict)
        accepted = 0
        for name, column in metrics.items():
            assert len(column) == len(steps), f"column {name} has the wrong length"
            for step, value in zip(steps, column, strict=True):
                if value is not None:
                    self.points[(step, name)] = value
                    self.arrivals[(step, name)] += 1
                    accepted += 1
        self.batches.append(batch)
        return httpx.Response(202, json={"accepted": accepted})
