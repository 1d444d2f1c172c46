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
    """The ingest endpoints, in memory, with faults injected per endpoint.

    As the server does, a point (segment, step, metric) keeps its first value and the
    answer counts the later ones as ignored; a run created again with a ``start_step`` at
    or below its last step opens a new segment. ``points`` holds each (step, metric)'s
    value in the newest segment that logged it.
    """

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
        self.stored: set[tuple[int, int, str]] = set()
        self.last_step: int | None = None
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
                start = document.get("start_step")
                if (
                    isinstance(start, int)
                    and self.last_step is not None
                    and start <= self.last_step
                ):
                    self.segment += 1
                    self.last_step = None
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
        segment = batch.get("segment", self.segment)
        assert isinstance(steps, list) and isinstance(metrics, dict)
        assert isinstance(segment, int)
        if steps and segment == self.segment:
            self.last_step = max(steps + ([] if self.last_step is None else [self.last_step]))
        accepted = 0
        ignored: Counter[str] = Counter()
        for name, column in metrics.items():
            assert len(column) == len(steps), f"column {name} has the wrong length"
            for step, value in zip(steps, column, strict=True):
                if value is None:
                    continue
                self.arrivals[(step, name)] += 1
                if (segment, step, name) in self.stored:  # the first value of a point stands
                    ignored[name] += 1
                    continue
                self.stored.add((segment, step, name))
                self.points[(step, name)] = value
                accepted += 1
        self.batches.append(batch)
        answer: dict[str, object] = {
            "accepted": accepted,
            "ignored": ignored.total(),
            "segment": segment,
        }
        if ignored:
            answer["ignored_metrics"] = dict(ignored)
        return httpx.Response(202, json=answer)
