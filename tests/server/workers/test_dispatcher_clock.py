"""The dispatcher on a clock of the test's own: minutes of a receiver's outage played in
seconds, with real notifications in a real database and real HTTP to a real receiver.

Only time is the test's: what is due, when a retry comes due and when a delivery is stamped
follow the clock given to the dispatcher, which the test moves on by half a second a turn.
The process-level behaviour (a real server's dispatcher thread, its lease across a SIGKILL)
is covered by ``test_dispatcher.py``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.alerts.delivery import Deliverer
from normwatch.server.auth import Principal, authenticate
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory
from normwatch.server.schemas import RunCreate
from normwatch.server.schemas.alerts import AlertRuleCreate
from normwatch.server.services import alert_rules, ingest, runs
from normwatch.server.workers.dispatcher import Dispatcher
from tests.helpers.databases import scratch_pg
from tests.helpers.notifications import FLAPS
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.tenants import make_tenant

TURN = timedelta(seconds=0.5)


class Clock:
    """A wall clock that starts at the real time (what the notifications were stamped with)
    and then moves only when told."""

    def __init__(self) -> None:
        self.start = self.at = datetime.now(UTC)

    def now(self) -> datetime:
        return self.at

    @property
    def elapsed_s(self) -> float:
        return (self.at - self.start).total_seconds()


@pytest.fixture
def database() -> Iterator[tuple[Engine, sessionmaker[Session], Principal]]:
    with scratch_pg("dispatch_clock") as url:
        engine = build_engine(url, pool_size=2)
        sessions = session_factory(engine)
        with sessions() as session:
            who = authenticate(session, make_tenant(url).admin)
        assert who is not None
        try:
            yield engine, sessions, who
        finally:
            engine.dispose()


def fire_and_resolve(
    engine: Engine, sessions: sessionmaker[Session], who: Principal, hook: str, times: int
) -> str:
    """A rule posting to ``hook`` and a batch that fires and resolves it ``times`` times:
    ``2 * times`` notifications owed. The run's id."""
    with sessions() as session, session.begin():
        rule = AlertRuleCreate.model_validate(
            {
                "name": "outage",
                "metric": "g",
                "condition": {"kind": "threshold", "op": ">", "value": 1.0},
                "channels": [{"type": "webhook", "url": hook}],
            }
        )
        alert_rules.create_rule(session, who, rule, ["127.0.0.1"])
        run = runs.create_or_resume(session, who, RunCreate(name="r", start_step=0))
    steps = list(range(2 * times))
    batch = parse_batch({"steps": steps, "metrics": {"g": [2.0, 0.0] * times}}, max_points=100)
    owed = ingest.store_batch(sessions, engine, run.id, batch, project_id=who.project_id)
    assert owed.notifications == 2 * times
    return run.id


def test_a_two_minute_outage_then_every_notification_arrives_once(
    database: tuple[Engine, sessionmaker[Session], Principal],
) -> None:
    """A minute of refused connections, a minute of 500s, then up: all arrive, each once,
    after retries with backoff capped at 5 s."""
    engine, sessions, who = database
    receiver = WebhookReceiver(healthy_at=math.inf)  # started at one minute, failing
    clock = Clock()
    dispatcher = Dispatcher(
        sessions,
        Deliverer(allow=["127.0.0.1"]),
        base_url="http://normwatch.test",
        max_retry_delay_s=5.0,
        rng=random.Random(0),
        now=clock.now,
    )
    run = fire_and_resolve(engine, sessions, who, receiver.url(), times=3)
    tried_while_down = 0
    try:
        while len(receiver.delivered) < 6 and clock.elapsed_s < 600:
            if clock.elapsed_s == 60:
                receiver.start()  # listening now, but answering 500
            if clock.elapsed_s == 120:
                receiver.healthy_at = 0.0
            tried = dispatcher.deliver_due()
            if clock.elapsed_s < 60:
                tried_while_down += tried
            clock.at += TURN
    finally:
        receiver.stop()
        dispatcher.stop()
    assert clock.elapsed_s >= 120
    assert tried_while_down >= 6 * 5  # refused, retried on its backoff all along
    failed_500 = [r for r in receiver.received if r.status == 500]
    assert len(failed_500) >= 6 * 5
    ids = [r.headers["x-normwatch-delivery"] for r in receiver.delivered]
    assert len(ids) == len(set(ids)) == 6
    assert sorted((p["step"], p["state"]) for p in receiver.payloads()) == FLAPS
    with sessions() as session:
        history = alert_rules.list_alerts(session, who, run_id=run)
    notifications = [a.notifications[0] for a in history]
    assert all(n.status == "delivered" for n in notifications)
    assert all(n.attempts >= 10 for n in notifications), [n.attempts for n in notifications]
    # Nothing is sent again once delivered, however long the clock runs on.
    for _ in range(120):
        clock.at += TURN
        assert dispatcher.deliver_due() == 0
    assert len(receiver.received) == len(failed_500) + 6
