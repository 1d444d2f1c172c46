"""Metric batches and events into storage."""

from __future__ import annotations

from sqlalchemy.orm import Session

from .. import storage
from ..batch import BatchError, MetricBatch
from ..models import Event, Run
from ..schemas import EventCreate, EventOut


def ingest_batch(session: Session, run: Run, batch: MetricBatch) -> tuple[int, int]:
    """Store a validated batch in one transaction; returns (points, segment)."""
    segment = batch.segment or run.segment
    if segment > run.segment:
        raise BatchError(f"segment: run has {run.segment} segment(s), got {segment}")
    names = [c.name for c in batch.columns if c.logged.any()]
    metric_ids = storage.resolve_metric_ids(session, run.key, names)
    points = storage.write_points(session, run.key, segment, batch, metric_ids)
    last = None
    if segment == run.segment:
        last = storage.update_latest(session, run.key, batch, metric_ids)
    storage.touch_run(session, run.key, last, storage.now())
    return points, segment


def add_event(session: Session, run: Run, body: EventCreate) -> EventOut:
    segment = body.segment or run.segment
    if segment > run.segment:
        raise BatchError(f"segment: run has {run.segment} segment(s), got {segment}")
    event = Event(run_key=run.key, segment=segment, step=body.step, kind=body.kind, text=body.text)
    session.add(event)
    session.flush()
    return EventOut.model_validate(event)
