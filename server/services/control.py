"""Asking a run's trainer to checkpoint or to stop, from the API, the dashboard or a rule.

A request is stored with the run and drawn on its charts as a ``control`` event. The
trainer does not poll: the answer to each of its metric batches carries the run's unread
requests (`for_trainer`), and the next batch says how far it has read, so a request costs
the trainer no extra call and reaches it within one flush interval. A request the run
finishes without reading expires (`expire_unread`). One request per action is open at a
time: asking again while one is unread answers that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from .. import errors
from ..alerts.state import Transition
from ..models import ControlRequest, Event, Run, utcnow
from ..schemas.control import ControlCreate, ControlForTrainer, ControlOut, ControlState
from ..storage import control as stored
from ..storage.runs import MAX_RUN_EVENTS, add_event, event_count, same_event
from ..storage.tokens import token_name

MAX_RUN_REQUESTS = 1_000
"""Requests a run may hold in all: each is an event on every chart of the run."""

LIST_LIMIT = 200


def state_of(request: ControlRequest) -> ControlState:
    if request.seen_at is not None:
        return "seen"
    if request.expired_at is not None:
        return "expired"
    return "delivered" if request.delivered_at is not None else "pending"


def to_out(request: ControlRequest) -> ControlOut:
    return ControlOut(
        id=request.id,
        action=request.action,  # type: ignore[arg-type]
        reason=request.reason,
        source=request.source,  # type: ignore[arg-type]
        requested_by=request.requested_by,
        rule_id=request.rule_id,
        segment=request.segment,
        step=request.step,
        state=state_of(request),
        created_at=request.created_at,
        delivered_at=request.delivered_at,
        seen_at=request.seen_at,
        expired_at=request.expired_at,
    )


def request_control(
    session: Session, run: Run, body: ControlCreate, *, token_id: int | None
) -> tuple[ControlOut, bool]:
    """An admin's request; ``(request, created)``. The open request of the same action,
    if there is one, is answered instead of a second one (``created`` False)."""
    if run.status != "running":
        raise errors.Conflict(
            f"run {run.name!r} is {run.status}: there is no trainer to ask; a request is "
            "for a running run"
        )
    by = body.by
    if not by and token_id is not None:
        by = token_name(session, token_id) or None
    made = _add(
        session,
        run_key=run.key,
        segment=run.segment,
        step=run.last_step,
        action=body.action,
        reason=body.reason,
        source="admin",
        requested_by=by or "admin",
        rule_id=None,
    )
    if made is None:
        existing = stored.open_request(session, run.key, body.action)
        assert existing is not None
        return to_out(existing), False
    return to_out(made), True


def request_from_rule(
    session: Session,
    *,
    run_key: int,
    segment: int,
    rule_id: int,
    rule_name: str,
    action: str,
    metric: str,
    transitions: Sequence[Transition],
) -> int:
    """The requests a rule makes when it fires (not on repeats or resolution); how many.

    Written in the batch's transaction with the alert, so the answer to that very batch
    carries them, and a batch stored twice makes none twice."""
    made = 0
    for transition in transitions:
        if transition.state != "firing" or transition.repeat:
            continue
        reason = f"{rule_name}: {metric} {transition.reason}".strip()
        request = _add(
            session,
            run_key=run_key,
            segment=segment,
            step=transition.step,
            action=action,
            reason=reason[:1000],
            source="rule",
            requested_by=f"rule {rule_name}"[:128],
            rule_id=rule_id,
        )
        made += request is not None
    return made


def _add(
    session: Session,
    *,
    run_key: int,
    segment: int,
    step: int | None,
    action: str,
    reason: str,
    source: str,
    requested_by: str,
    rule_id: int | None,
) -> ControlRequest | None:
    """Store the request and its event; None when one of that action is open already."""
    if stored.open_request(session, run_key, action) is not None:
        return None
    if stored.request_count(session, run_key) >= MAX_RUN_REQUESTS:
        raise errors.Conflict(
            f"the run has {MAX_RUN_REQUESTS} control requests already, the most it may hold"
        )
    request = stored.add_request(
        session,
        ControlRequest(
            run_key=run_key,
            action=action,
            reason=reason,
            source=source,
            requested_by=requested_by,
            rule_id=rule_id,
            segment=segment,
            step=step,
            created_at=utcnow(),
        ),
    )
    # A run full of events (`MAX_RUN_EVENTS`) still takes requests, without their line.
    text = f"{action} requested by {requested_by}" + (f": {reason}" if reason else "")
    event = Event(run_key=run_key, segment=segment, step=step or 0, kind="control", text=text)
    if same_event(session, event) is None and event_count(session, run_key) < MAX_RUN_EVENTS:
        add_event(session, event)
    return request


def list_requests(session: Session, run: Run) -> list[ControlOut]:
    """The run's requests, newest first (at most `LIST_LIMIT`)."""
    return [to_out(r) for r in stored.requests_of(session, run.key, LIST_LIMIT)]


def for_trainer(
    session: Session, run_key: int, read_up_to: int | None, now: datetime | None = None
) -> list[dict[str, object]]:
    """The ``control`` list of a metric batch's answer: the run's unread requests above
    ``read_up_to`` (the newest id the trainer has read; those at or below it become seen).
    Call with the run's row locked (as ingest holds it)."""
    handed = stored.exchange(session, run_key, read_up_to, now or utcnow())
    return [
        ControlForTrainer(
            id=r.id,
            action=r.action,  # type: ignore[arg-type]
            reason=r.reason,
            source=r.source,  # type: ignore[arg-type]
            step=r.step,
        ).model_dump()
        for r in handed
    ]


def acknowledge(session: Session, run_key: int, read_up_to: int) -> None:
    """The trainer read the run's requests up to ``read_up_to``: they become seen (its last
    answer may have carried one, with no batch after it to say so)."""
    stored.exchange(session, run_key, read_up_to, utcnow())


def expire_unread(session: Session, run: Run) -> int:
    """The run finished: its unread requests expire (a resumed trainer is not told)."""
    return stored.expire_open(session, run.key, utcnow())
