"""An in-memory stand-in for the ingest endpoints a `Run` calls (for `httpx.MockTransport`),
where only what the client sends is under test."""

from __future__ import annotations

import gzip
import json
import threading

import httpx


class IngestRecorder:
    """The three ingest endpoints a `Run` calls, in memory: what arrived at which step."""

    def __init__(self) -> None:
        self.points: dict[tuple[int, str], object] = {}
        self.lock = threading.Lock()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            return httpx.Response(200, json={"id": "run-1"})
        if request.url.path.endswith("/runs"):
            return httpx.Response(200, json={"id": "run-1", "segment": 1})
        batch = json.loads(gzip.decompress(request.content))
        with self.lock:
            for name, column in batch["metrics"].items():
                for step, value in zip(batch["steps"], column, strict=True):
                    if value is not None:
                        self.points[(step, name)] = value
        return httpx.Response(202, json={"accepted": len(self.points), "segment": 1})
