"""Analytics over stored series: transitions, layers, attribution, spikes, comparisons
(see docs/analytics.md)."""

from __future__ import annotations

from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import Response

from ..analytics import spikes as spike_finder
from ..schemas import INT64_MAX, MetricName
from ..schemas.analytics import (
    AttributionOut,
    CompareOut,
    LayersOut,
    SpikesOut,
    TransitionsOut,
)
from ..services import analytics, attribution, layers, query, transitions
from ..services.access import owned_run
from .deps import Reader, SnapshotDep
from .errors import API, documented

router = APIRouter(
    prefix="/api/v1/runs/{run_id}", tags=["analytics"], responses=documented(*API, 404)
)
"""Every route here answers 404 for a metric name (or glob, or prefix) the run never logged,
naming it (``unknown``) with the closest names the run has (``suggestions``)."""

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
    relative_to: Annotated[Literal["baseline"] | None, Query()] = None,
    baseline_end: Step = None,
) -> Response:
    """A layer × step grid of the metrics under ``prefix`` (``grad/norm``), in depth order,
    at most ``points`` columns over ``[start, end]``, with the U-index per column and, when
    ``at`` is given, the depth profile at that step; with ``relative_to=baseline`` each
    layer's value there over its own baseline (the median of its last 32 logged values
    before ``baseline_end``, default ``at``: a spike's start)."""
    run, _ = owned_run(session, who, run_id)
    grid = layers.layer_grid(
        session,
        run,
        prefix,
        start=start,
        end=end,
        points=points,
        at=at,
        relative_to=relative_to,
        baseline_end=baseline_end,
    )
    return Response(orjson.dumps(grid.to_json()), media_type="application/json")


@router.get("/attribution", response_model=AttributionOut)
def get_attribution(
    run_id: str,
    session: SnapshotDep,
    who: Reader,
    prefix: Annotated[MetricName, Query()],
    start: Step = None,
    end: Step = None,
    points: Annotated[int, Query(ge=1, le=layers.MAX_COLUMNS)] = 1000,
    by: Annotated[Literal["group", "part"], Query()] = "group",
) -> Response:
    """Each parameter group's share of ``<prefix>/total`` squared over time, and the steps
    where the parts logged do not add up to the total."""
    run, _ = owned_run(session, who, run_id)
    shares = attribution.attribution(
        session, run, prefix, start=start, end=end, points=points, by=by
    )
    return Response(orjson.dumps(shares.to_json()), media_type="application/json")


@router.get("/transitions", response_model=TransitionsOut)
def get_transitions(
    run_id: str,
    session: SnapshotDep,
    who: Reader,
    metric: Annotated[list[MetricName], Query(min_length=1, max_length=transitions.MAX_METRICS)],
    start: Step = None,
    end: Step = None,
    window: Annotated[int | None, Query(ge=1, le=INT64_MAX)] = None,
) -> Response:
    """Every event in ``[start, end]`` and every detected change of level or slope, with
    each metric's least-squares slopes over ``window`` steps before and after it (default:
    a twentieth of the range; at most the range analysed, the answer's ``window`` being the
    one used), largest slope change first."""
    run, _ = owned_run(session, who, run_id)
    found = transitions.run_transitions(session, run, metric, start=start, end=end, window=window)
    return Response(orjson.dumps(found.to_json()), media_type="application/json")


@router.get("/spikes", response_model=SpikesOut)
def get_spikes(
    run_id: str,
    session: SnapshotDep,
    who: Reader,
    metric: Annotated[list[MetricName], Query(min_length=1, max_length=16)],
    start: Step = None,
    end: Step = None,
    max_lag: Annotated[int, Query(ge=1, le=analytics.MAX_LAG)] = 50,
    threshold: Annotated[
        float, Query(ge=spike_finder.MIN_THRESHOLD, le=spike_finder.MAX_THRESHOLD)
    ] = spike_finder.THRESHOLD,
) -> Response:
    """Each metric's spikes, found over the whole run (listed where they overlap
    ``[start, end]``), the share of steps spent in them, and which metric's spikes lead
    which (``lead_lag``, every ordered pair). A spike starts where a point is more than
    ``threshold`` robust noise SDs (and 5 %) above its baseline (default 5.25: a 7-SD
    spike is found, spike-free Gaussian noise gives under one in a million steps). The
    answer says the threshold it used, each metric's noise SD, and (``more_at``) how many
    more spikes the next lower threshold would list."""
    run, _ = owned_run(session, who, run_id)
    report = analytics.spike_report(
        session, run, metric, start=start, end=end, max_lag=max_lag, threshold=threshold
    )
    return Response(orjson.dumps(report.to_json()), media_type="application/json")


compare_router = APIRouter(prefix="/api/v1", tags=["analytics"], responses=documented(*API, 404))


@compare_router.get("/compare", response_model=CompareOut)
def compare(
    session: SnapshotDep,
    who: Reader,
    run: Annotated[list[str], Query(min_length=1, max_length=analytics.MAX_COMPARED_RUNS)],
    metric: Annotated[MetricName, Query()],
    start: Step = None,
    end: Step = None,
    points: Annotated[int, Query(ge=1, le=query.MAX_POINTS)] = 1000,
) -> Response:
    """One metric of several runs on one step axis, with a summary per run (largest and
    final value, slope over the range, spike count, share of steps in spikes) and the
    config keys that differ between them. A run that never logged the metric has an empty
    series and says what it lacks (``missing``); a metric no run has is a 404 naming it,
    the runs that lack it (``missing_in``) and the closest names they have."""
    runs = [owned_run(session, who, run_id)[0] for run_id in dict.fromkeys(run)]
    compared = analytics.compare_runs(session, runs, metric, start=start, end=end, points=points)
    return Response(orjson.dumps(compared.model_dump()), media_type="application/json")
