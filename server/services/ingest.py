"""Metric batches and events into storage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from .. import errors
from ..batch import MetricBatch
from ..errors import BatchError
from ..models import Event, Run, utcnow
from ..schemas import EventCreate, EventOut
from ..storage.clock import ClockThinning, clock_thinning, mark
from ..storage.metric_ids import MetricIdCache, metric_id_cache, resolve_metric_ids
from ..storage.points import write_points
from ..storage.runs import MAX_RUN_EVENTS, event_count, lock_run, run_exists, same_event
from ..storage.runs import add_event as store_event
from . import alerting, control


@dataclass(frozen=True)
class Ingested:
    points: int
    """Points stored."""
    segment: int
    notifications: int
    """Alert notifications the batch made owed (delivered by the dispatcher)."""
    ignored: dict[str, int] = field(default_factory=dict)
    """Per metric, the points not stored because the point had a value already (stored
    before, or given earlier in the same batch): the first value of a point stands."""
    metric_ids: dict[str, int] = field(default_factory=dict, compare=False)
    """Ids of the batch's metrics, for the caller to `MetricIdCache.remember` once committed."""
    run_key: int = field(default=0, compare=False)
    control: list[dict[str, object]] | None = field(default=None, compare=False)
    """The run's unread requests to its trainer, when the batch said how far it had read
    (see `control.for_trainer`)."""


def store_batch(
    sessions: sessionmaker[Session],
    engine: Engine,
    run_id: str,
    batch: MetricBatch,
    *,
    project_id: int,
    max_run_metrics: int | None = None,
    pause: Callable[[], None] | None = None,
    control_read: int | None = None,
) -> Ingested:
    """`ingest_batch` in a transaction of its own, with this process's caches of metric ids
    and rules; the ids it resolved enter the cache once committed. ``pause`` is called now
    and then while rules are evaluated (a large batch standing aside for small ones)."""
    known = metric_id_cache(engine)
    with sessions() as session:
        result = ingest_batch(
            session,
            run_id,
            batch,
            project_id=project_id,
            known=known,
            rules=alerting.rule_cache(engine),
            max_run_metrics=max_run_metrics,
            pause=pause,
            control_read=control_read,
            clock=clock_thinning(engine),
        )
        session.commit()
    known.remember(result.run_key, result.metric_ids)  # committed: safe to reuse from now on
    return result


def ingest_batch(
    session: Session,
    run_id: str,
    batch: MetricBatch,
    *,
    project_id: int | None = None,
    known: MetricIdCache | None = None,
    rules: alerting.RuleCache | None = None,
    max_run_metrics: int | None = None,
    pause: Callable[[], None] | None = None,
    control_read: int | None = None,
    clock: ClockThinning | None = None,
) -> Ingested:
    """Store a validated batch and evaluate alert rules on it, in one transaction.

    The run's row is locked first (and marked seen, its last step moved), so concurrent
    batches of one run are stored and evaluated one after the other (the lock is held until
    commit), each seeing the run's segment and last step as the one before left them. With
    ``project_id`` a run of another project raises `Forbidden`. Metric ids found in
    ``known`` are not looked up; it is not written here (see `Ingested.metric_ids`). Rules
    come from ``rules`` while the project's rules are unchanged. A batch that would give
    the run more than ``max_run_metrics`` metric names raises `TooManyMetrics`. With
    ``control_read`` (the newest request id the trainer has read, 0 for none) the result
    carries the run's unread requests to its trainer, those a rule made on this batch
    included. A batch that moves the run on marks when it reached its last step (the
    batch's ``time``, else now), thinned by ``clock`` (`.storage.clock`).

    A point keeps the first value stored for it: the batch's points that its series hold
    already, hot or compacted, and the later values of a step the batch gives twice, are
    left out and counted in `Ingested.ignored`; only the stored points reach the rules.
    """
    last = int(batch.steps.max()) if len(batch.steps) else None
    now = utcnow()
    run = lock_run(
        session,
        run_id,
        project_id=project_id,
        segment=batch.segment,
        last_step=last,
        now=now,
    )
    if run is None:  # the lock is `access.owned_run`'s check, made in the same statement
        if project_id is not None and run_exists(session, run_id):
            raise errors.Forbidden("this run belongs to another project")
        raise errors.RunNotFound(f"no run with id {run_id!r}", run_id)
    segment = batch.segment or run.segment
    if segment > run.segment:
        raise BatchError(f"segment: run has {run.segment} segment(s), got {segment}")
    metric_ids = resolve_metric_ids(
        session, run.key, batch.logged_names, known=known, max_run_metrics=max_run_metrics
    )
    fresh = (
        last is not None
        and segment == run.segment
        and (run.last_step is None or int(batch.steps.min()) > run.last_step)
    )
    left_out = write_points(session, run.key, segment, batch, metric_ids, fresh=fresh)
    ignored = dict(batch.repeats)
    stored = batch
    if left_out is not None:
        for i in np.flatnonzero(left_out.any(axis=1)).tolist():
            name = batch.names[i]
            ignored[name] = ignored.get(name, 0) + int(left_out[i].sum())
        # Rules see what is stored, not the later values that were left out.
        stored = replace(batch, logged=batch.logged & ~left_out)
    if (
        last is not None
        and segment == run.segment
        and (run.last_step is None or last > run.last_step)
    ):
        at = batch.time if batch.time is not None else now.timestamp()
        if clock is None or clock.due(run.key, segment, at):
            mark(session, run.key, segment, last, at)
    owed = alerting.evaluate_batch(
        session, run, segment, stored, metric_ids, rules=rules, pause=pause
    )
    requests = None
    if control_read is not None:
        requests = control.for_trainer(session, run.key, control_read)
    return Ingested(stored.point_count, segment, owed, ignored, metric_ids, run.key, requests)


def add_event(session: Session, run: Run, body: EventCreate) -> EventOut:
    """Store an event once: the same text, kind and step in the same segment again (a client
    re-sending what the server took before its acknowledgement was lost, or ``normwatch sync``
    replaying a killed trainer's spool) answers the stored event and adds nothing."""
    segment = body.segment or run.segment
    if segment > run.segment:
        raise BatchError(f"segment: run has {run.segment} segment(s), got {segment}")
    event = Event(run_key=run.key, segment=segment, step=body.step, kind=body.kind, text=body.text)
    stored = same_event(session, event)
    if stored is not None:
        return EventOut.model_validate(stored)
    if event_count(session, run.key) >= MAX_RUN_EVENTS:
        raise errors.Conflict(f"the run has {MAX_RUN_EVENTS} events already, the most it may hold")
    return EventOut.model_validate(store_event(session, event))
