"""Metric batches and events into storage."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from .. import storage
from ..batch import BatchError, MetricBatch
from ..metric_ids import MetricIdCache
from ..models import Event, Run
from ..schemas import EventCreate, EventOut
from . import alerting


@dataclass(frozen=True)
class Ingested:
    points: int
    segment: int
    notifications: int
    """Alert notifications the batch made owed (delivered by the dispatcher)."""
    metric_ids: dict[str, int] = field(default_factory=dict, compare=False)
    """Ids of the batch's metrics, for the caller to `MetricIdCache.remember` once committed."""


def ingest_batch(
    session: Session, run: Run, batch: MetricBatch, *, known: MetricIdCache | None = None
) -> Ingested:
    """Store a validated batch and evaluate alert rules on it, in one transaction.

    The run's row is locked first, so concurrent batches of one run are stored and
    evaluated one after the other (the lock is held until commit), each seeing the run's
    segment and last step as the one before left them. Metric ids found
    in ``known`` are not looked up; it is not written here (see `Ingested.metric_ids`).
    """
    current, last_step = storage.lock_run(session, run.key)
    segment = batch.segment or current
    if segment > current:
        raise BatchError(f"segment: run has {current} segment(s), got {segment}")
    metric_ids = storage.resolve_metric_ids(session, run.key, batch.logged_names, known=known)
    last = int(batch.steps.max()) if len(batch.steps) and segment == current else None
    fresh = last is not None and (last_step is None or int(batch.steps.min()) > last_step)
    points = storage.write_points(session, run.key, segment, batch, metric_ids, fresh=fresh)
    storage.touch_run(session, run.key, last, storage.now())
    owed = alerting.evaluate_batch(session, run, segment, batch, metric_ids)
    return Ingested(points, segment, owed, metric_ids)


def add_event(session: Session, run: Run, body: EventCreate) -> EventOut:
    segment = body.segment or run.segment
    if segment > run.segment:
        raise BatchError(f"segment: run has {run.segment} segment(s), got {segment}")
    event = Event(run_key=run.key, segment=segment, step=body.step, kind=body.kind, text=body.text)
    session.add(event)
    session.flush()
    return EventOut.model_validate(event)
