"""Metric batches in; metric lists and downsampled series out."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ..auth import Principal
from ..batch import loads, parse_batch
from ..schemas import (
    INT64_MAX,
    Accepted,
    MetricBatchIn,
    MetricName,
    MetricOut,
    SeriesResponse,
)
from ..services import ingest, query
from ..services.access import owned_run
from .body import read_limited_body
from .context import ServiceContext, context_of
from .deps import ROUTE_SECURITY, Reader, SessionDep, SnapshotDep, caller
from .errors import API, documented

router = APIRouter(
    prefix="/api/v1/runs/{run_id}", tags=["metrics"], responses=documented(*API, 404)
)


@router.post(
    "/metrics",
    status_code=202,
    response_model=Accepted,
    responses=documented(415),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": MetricBatchIn.model_json_schema()}},
        },
        **ROUTE_SECURITY,
    },
)
async def post_metrics(
    run_id: str,
    request: Request,
    control_read: Annotated[
        int | None,
        Query(
            ge=0,
            le=INT64_MAX,
            description="The newest control request id the trainer has read (0: none). Given, "
            'the answer carries the run\'s unread requests as `"control": [...]` and those up '
            "to this id are marked seen (see `POST /runs/{id}/control`).",
        ),
    ] = None,
) -> Response:
    """Store a columnar batch: ``{"steps": [...], "metrics": {name: [values...]}}``.

    Values are numbers, ``null`` (not logged at that step) or ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``. The batch is stored whole or rejected whole. A point (segment, metric,
    step) keeps the first value stored for it: a later one (re-sent, or given twice in the
    batch) is not stored and is counted in ``ignored``, by metric in ``ignored_metrics``;
    re-sending a batch stores nothing twice. ``Content-Encoding: gzip`` is accepted.
    """
    # No dependencies: this route is the one called hundreds of times a second.
    context = context_of(request.app)
    who = await caller(request, context, "ingest")
    # Admitted already: a slot of this worker's ingest slots is held (see admission.py).
    body = await read_limited_body(request, context.settings.max_body_bytes)
    small = bool(request.scope.get("state", {}).get("small_batch"))  # see admission.py
    result = await run_in_threadpool(_store, context, who, run_id, body, small, control_read)
    context.changes.changed(run_id)  # open pages of the run draw it now
    answer = ingest_answer(result)
    if result.control is not None:
        answer["control"] = result.control
    return Response(orjson.dumps(answer), status_code=202, media_type="application/json")


IGNORED_METRICS_LISTED = 100
"""Most metrics an ingest answer names in ``ignored_metrics`` (those with the most ignored
points); ``ignored`` counts them all."""


def ingest_answer(result: ingest.Ingested) -> dict[str, object]:
    """``{"accepted", "ignored", "segment"}``, and ``ignored_metrics`` (``{name: count}``,
    at most `IGNORED_METRICS_LISTED` names) when some points were ignored."""
    ignored = result.ignored
    answer: dict[str, object] = {
        "accepted": result.points,
        "ignored": sum(ignored.values()),
        "segment": result.segment,
    }
    if ignored:
        listed = ignored
        if len(ignored) > IGNORED_METRICS_LISTED:
            most = sorted(ignored.items(), key=lambda kv: (-kv[1], kv[0]))
            listed = dict(most[:IGNORED_METRICS_LISTED])
        answer["ignored_metrics"] = listed
    return answer


def _store(
    context: ServiceContext,
    who: Principal,
    run_id: str,
    body: bytes,
    small: bool = False,
    control_read: int | None = None,
) -> ingest.Ingested:
    """Validate, store and evaluate alerts; wake the dispatcher when notifications are owed.

    A chart or page being served in this worker goes first, and so does a ``small`` batch
    (marked so by `InteractiveRequests`) when this one is large (see admission.py): a large
    batch stands aside before each stage and now and then while its rules are evaluated,
    for at most `LARGE_BATCH_WAIT_S` in all."""
    settings = context.settings
    turns = _Turns(context, small=small)
    turns.stand_aside()
    # A bad batch raises a `BatchError`, answered with its status (see api/errors.py).
    batch = parse_batch(
        loads(body),
        max_points=settings.max_batch_points,
        max_metrics=settings.max_batch_metrics,
    )
    turns.stand_aside()
    result = ingest.store_batch(
        context.sessions,
        context.engine,
        run_id,
        batch,
        project_id=who.project_id,
        max_run_metrics=settings.max_run_metrics,
        pause=None if small else turns.stand_aside,
        control_read=control_read,
    )
    if result.notifications:
        context.dispatcher.wake()
    return result


LARGE_BATCH_WAIT_S = 0.5
"""The most a large batch stands aside in all, however many small batches and reads come."""


class _Turns:
    """One batch's standing aside: each wait at most the gate's ``max_wait_s``, all of them
    together at most `LARGE_BATCH_WAIT_S`, counted in the deferral telemetry."""

    def __init__(self, context: ServiceContext, *, small: bool) -> None:
        self._context = context
        self._small = small
        self._left = LARGE_BATCH_WAIT_S

    def stand_aside(self) -> None:
        if self._left <= 0:
            return
        waited = self._context.reads_first.wait_turn(small=self._small)
        if waited:
            self._left -= waited
            self._context.telemetry.deferred.inc(waited)


@router.get("/metrics", response_model=list[MetricOut])
def list_metrics(run_id: str, session: SessionDep, who: Reader) -> list[MetricOut]:
    """Every metric the run logged, with its last step and value."""
    run, _ = owned_run(session, who, run_id)
    return query.list_metrics(session, run)


@router.get("/series", response_model=SeriesResponse)
def get_series(
    run_id: str,
    session: SnapshotDep,
    who: Reader,
    metric: Annotated[list[MetricName], Query(min_length=1, max_length=64)],
    start: Annotated[int | None, Query(ge=-INT64_MAX - 1, le=INT64_MAX)] = None,
    end: Annotated[int | None, Query(ge=-INT64_MAX - 1, le=INT64_MAX)] = None,
    points: Annotated[int, Query(ge=1, le=query.MAX_POINTS)] = 1000,
) -> Response:
    """Series of the latest lineage in ``[start, end]``, M4-downsampled to ~``4·points``.

    Each bucket's first, last, minimum and maximum survive, so a one-step spike shows
    at every zoom. Non-finite values come back as ``"NaN"``/``"Infinity"``/``"-Infinity"``.
    A name the run never logged (nor an alias of it), or a glob that matches none of its
    names, is a 404 naming it (``unknown``) with the closest names the run has
    (``suggestions``).
    """
    run, _ = owned_run(session, who, run_id)
    series = query.read_series(session, run, metric, start=start, end=end, points=points)
    return Response(
        orjson.dumps({"series": [s.to_json() for s in series]}), media_type="application/json"
    )
