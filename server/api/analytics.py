"""Analytics over one run's stored series: layers; see docs/analytics.md."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import Response

from ..schemas import INT64_MAX, MetricName
from ..schemas.analytics import LayersOut
from ..services import layers
from .deps import Reader, SnapshotDep, owned_run
from .errors import API, documented

router = APIRouter(
    prefix="/api/v1/runs/{run_id}", tags=["analytics"], responses=documented(*API, 404)
)

Step = Annotated[int | None, Query(ge=-INT64_MAX - 1, le=INT64_MAX)]


@router.get("/layers", response_model=LayersOut)
def get_layers(
    run_id: str,
    session: SnapshotDep,
    who: Reader,
    prefix: Annotated[MetricName, Query()],
    start: Step = None,
    end: Step = None,
    points: Annotated[int, Query(ge=1, le=layers.MAX_COLUMNS)] = 1000,
    at: Step = None,
) -> Response:
    """A layer × step grid of the metrics under ``prefix`` (``grad/norm``), in depth order,
    at most ``points`` columns over ``[start, end]``, with the U-index per column and, when
    ``at`` is given, the depth profile at that step."""
    run, _ = owned_run(session, who, run_id)
    grid = layers.layer_grid(session, run, prefix, start=start, end=end, points=points, at=at)
    return Response(orjson.dumps(grid.to_json()), media_type="application/json")
