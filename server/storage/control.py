"""Requests to a run's trainer (checkpoint, stop): storing them, handing them out with the
answers to metric batches, and what the trainer has read of them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from ..models import ControlRequest


def _unread(run_key: int) -> tuple[ColumnElement[bool], ...]:
    """The run's requests the trainer has not read and the run has not outlived (those the
    partial index ``ix_control_requests_open`` holds)."""
    return (
        ControlRequest.run_key == run_key,
        ControlRequest.seen_at.is_(None),
        ControlRequest.expired_at.is_(None),
    )


def add_request(session: Session, request: ControlRequest) -> ControlRequest:
    """Store a request and give it its id."""
    session.add(request)
    session.flush()
    return request


def open_request(session: Session, run_key: int, action: str) -> ControlRequest | None:
    """The run's oldest unread, unexpired request for ``action``, if any."""
    return session.scalars(
        select(ControlRequest)
        .where(*_unread(run_key), ControlRequest.action == action)
        .order_by(ControlRequest.id)
        .limit(1)
    ).first()


def request_count(session: Session, run_key: int) -> int:
    return (
        session.scalar(
            select(func.count())
            .select_from(ControlRequest)
            .where(ControlRequest.run_key == run_key)
        )
        or 0
    )


def requests_of(session: Session, run_key: int, limit: int) -> Sequence[ControlRequest]:
    """The run's requests, newest first."""
    return session.scalars(
        select(ControlRequest)
        .where(ControlRequest.run_key == run_key)
        .order_by(ControlRequest.id.desc())
        .limit(limit)
    ).all()


def exchange(
    session: Session, run_key: int, read_up_to: int | None, now: datetime
) -> list[ControlRequest]:
    """What a metric batch's answer carries: the run's unread requests above ``read_up_to``.

    The trainer sends the id of the newest request it has read (``read_up_to``); those at
    or below it are marked seen. The ones handed out are marked delivered the first time.
    Called with the run's row locked, so batches of one run exchange one after the other.
    """
    unread = session.scalars(
        select(ControlRequest).where(*_unread(run_key)).order_by(ControlRequest.id)
    ).all()
    handed: list[ControlRequest] = []
    for request in unread:
        if request.delivered_at is None:
            request.delivered_at = now
        if read_up_to is not None and request.id <= read_up_to:
            request.seen_at = now
        else:
            handed.append(request)
    if unread:
        session.flush()
    return handed


def expire_open(session: Session, run_key: int, now: datetime) -> int:
    """Expire the run's unread requests (it finished without reading them); how many."""
    result = session.execute(
        update(ControlRequest)
        .where(*_unread(run_key))
        .values(expired_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)
