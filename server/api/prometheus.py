"""``GET /metrics`` for Prometheus, and the middleware that times every request.

The endpoint is open unless ``NORMWATCH_METRICS_TOKEN`` is set; then a scrape must send
``Authorization: Bearer <that token>`` (Prometheus: ``authorization: {credentials: ...}``).
API tokens are not accepted here: they belong to projects, the service's health does not.
"""

from __future__ import annotations

import hmac
import logging
import time

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import Unauthenticated
from ..telemetry import INGEST_ROUTE, Telemetry
from .context import ContextDep

log = logging.getLogger("normwatch.telemetry")

router = APIRouter(tags=["operations"])

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def prometheus_metrics(request: Request, context: ContextDep) -> Response:
    """The service's own series in Prometheus (or OpenMetrics) text format.

    Ingest counts, request latency by route, database pool use and the alert delivery
    backlog, added up over every worker process. See docs/operations.md.
    """
    settings = context.settings
    if settings.metrics_token is not None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        expected = settings.metrics_token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
            raise Unauthenticated(
                "send 'Authorization: Bearer <NORMWATCH_METRICS_TOKEN>' to read the metrics"
            )
    body, content_type = context.telemetry.render(request.headers.get("accept", ""))
    return Response(body, media_type=content_type)


class RequestMetrics:
    """Pure ASGI middleware: request latency and concurrency, ingest counts, pool use.

    A request is counted the moment its answer's last byte is handed to the server, before
    cleanup such as closing its database session, so a client that reads the answer and
    then scrapes finds it counted. It costs some 20 µs a request. No body is buffered except
    the small answer of an accepted metrics batch, ``{"accepted": <points>, "ignored":
    <points>, ...}``, which says how many points were stored and how many were not. Every
    answer carries ``X-Normwatch-Worker: <pid>``, the worker process that served it.
    """

    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        telemetry = self.telemetry
        status = 500  # what the client gets when the app raises before answering
        ingest_answer: list[bytes] | None = None
        counted = False

        def count() -> None:
            nonlocal counted
            if counted:
                return
            counted = True
            elapsed = time.perf_counter() - start
            telemetry.in_flight.dec()
            route = route_template(scope)
            method = scope["method"] if scope["method"] in _METHODS else "other"
            telemetry.count_request(route, method, status, elapsed)
            if ingest_answer is not None:
                stored, ignored = _accepted(b"".join(ingest_answer))
                telemetry.points.inc(stored)
                if ignored:
                    telemetry.ignored.inc(ignored)

        async def send_counted(message: Message) -> None:
            nonlocal status, ingest_answer
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), telemetry.worker_header]
                if status == 202 and route_template(scope) == INGEST_ROUTE:
                    ingest_answer = []
            elif message["type"] == "http.response.body":
                if ingest_answer is not None:
                    ingest_answer.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await send(message)
                    count()
                    return
            await send(message)

        telemetry.in_flight.inc()
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send_counted)
        finally:
            count()  # no-op when the answer was complete; counts failures that never answered
            telemetry.sample_pool()  # after cleanup: the request's connections are back


def route_template(scope: Scope) -> str:
    """The matched route's path template; ``unmatched`` when no route took the request."""
    route = scope.get("route")
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    return template if isinstance(template, str) else "unmatched"


def _accepted(body: bytes) -> tuple[int, int]:
    """The points an ingest answer says were stored, and those it says were ignored."""
    try:
        answer = orjson.loads(body)
        accepted, ignored = answer["accepted"], answer.get("ignored", 0)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        accepted = ignored = None
    if not isinstance(accepted, int) or not isinstance(ignored, int):
        log.warning("accepted metrics batch without a point count: %r", body[:200])
        return 0, 0
    return accepted, ignored
