"""Repeats by the wall clock through the services, on a rolled-back session on both
backends: batches ingested as a trainer sends them, then the dispatcher's clock check at
chosen times. A firing alert is sent again once ``repeat_every_seconds`` have passed, once
per interval; an acknowledged one's repeat is recorded and not sent, a silenced one's
carries the silence; a glob rule's group repeats once, and so does a stale alert; nothing
for a resolved alert or a run that finished. And the bounds on the field."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from normwatch.server.alerts.targets import parse_allow
from normwatch.server.auth import Principal
from normwatch.server.batch import parse_batch
from normwatch.server.errors import Invalid
from normwatch.server.models import Alert, Notification
from normwatch.server.schemas import MAX_REPEAT_SECONDS, RunCreate, RunUpdate
from normwatch.server.schemas.alerts import (
    AckCreate,
    AlertRuleCreate,
    AlertRuleUpdate,
    SilenceCreate,
)
from normwatch.server.services import alert_rules, ingest, runs, silences
from normwatch.server.services.alerting import check_stale_runs
from normwatch.server.services.repeats import send_due_repeats
from tests.helpers.principals import principal

ALLOW = parse_allow("127.0.0.1")
HOOK = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
HIGH = {"kind": "threshold", "op": ">=", "value": 5.0, "resolve_steps": 2}
EVERY = 600


@dataclass
class Project:
    session: Session
    admin: Principal
    run_id: str
    run_key: int
    seen: tuple[float, float] = (0.0, 0.0)
    """Wall time just before and just after the last batch."""

    def post(self, steps: list[int], **metrics: list[Any]) -> None:
        batch = parse_batch({"steps": steps, "metrics": metrics}, max_points=1_000_000)
        before = time.time()
        ingest.ingest_batch(self.session, self.run_id, batch)
        self.seen = (before, time.time())

    def check_stale(self, now_unix: float) -> None:
        """The stale check at ``now_unix``, reading the runs afresh (as the dispatcher's
        own session does; ingest moved them with statements this session did not see)."""
        self.session.expire_all()
        check_stale_runs(self.session, now_unix)

    def tick(self, now_unix: float) -> list[tuple[str, str, int, int, int]]:
        """The clock check at ``now_unix``: what it added to this run's history, oldest
        first, as (metric, state, step, repeat, notifications)."""
        last = self.session.scalar(select(func.max(Alert.id)).where(Alert.run_key == self.run_key))
        send_due_repeats(self.session, now_unix)
        return self.history(after=last or 0)

    def history(self, after: int = 0) -> list[tuple[str, str, int, int, int]]:
        rows = self.session.execute(
            select(Alert, func.count(Notification.id))
            .outerjoin(Notification, Notification.alert_id == Alert.id)
            .where(Alert.run_key == self.run_key, Alert.id > after)
            .group_by(Alert.id)
            .order_by(Alert.id)
        ).all()
        return [(a.metric, a.state, a.step or 0, a.repeat, n) for a, n in rows]

    def alert(self, **where: Any) -> Alert:
        query = select(Alert).where(Alert.run_key == self.run_key)
        for column, value in where.items():
            query = query.where(getattr(Alert, column) == value)
        found = self.session.scalars(query.order_by(Alert.id.desc())).first()
        assert found is not None
        return found


@pytest.fixture
def project(db_session: Session) -> Iterator[Project]:
    admin = principal(db_session)
    trainer = principal(db_session, "ingest", project=admin.project)
    run = runs.create_or_resume(db_session, trainer, RunCreate(name="r"))
    found = runs.get_run(db_session, run.id)
    assert found is not None
    yield Project(db_session, admin, run.id, found[0].key)


def make_rule(project: Project, **fields: Any) -> int:
    body = AlertRuleCreate.model_validate(
        {"name": "grad norm 5+", "metric": "grad/norm", "condition": HIGH, "channels": [HOOK]}
        | fields
    )
    return alert_rules.create_rule(project.session, project.admin, body, ALLOW).id


def test_a_firing_alert_is_sent_again_once_per_interval(project: Project) -> None:
    rule_id = make_rule(project, repeat_every_seconds=EVERY)
    project.post([0, 1, 2], **{"grad/norm": [1.0, 6.0, 7.0]})
    before, after = project.seen
    assert project.history() == [("grad/norm", "firing", 1, 0, 1)]
    assert project.tick(before + EVERY - 1) == []
    assert project.tick(after + EVERY) == [("grad/norm", "firing", 2, 1, 1)]
    repeat = project.alert(repeat=1)
    assert (repeat.rule_id, repeat.value, repeat.threshold, repeat.worst) == (
        rule_id,
        7.0,
        5.0,
        7.0,
    )
    assert repeat.reason.startswith("still firing since step 1, ")
    assert project.tick(after + EVERY + 1) == []
    assert project.tick(after + 2 * EVERY - 1) == []
    assert project.tick(after + 2 * EVERY) == [("grad/norm", "firing", 2, 2, 1)]
    # Calm steps resolve it, and the clock has nothing more to send.
    project.post([3, 4, 5], **{"grad/norm": [1.0, 1.0, 1.0]})
    assert project.history()[-1] == ("grad/norm", "resolved", 4, 0, 1)
    assert project.tick(after + 100 * EVERY) == []


def test_an_acknowledged_alerts_repeats_are_recorded_and_not_sent(project: Project) -> None:
    make_rule(project, repeat_every_seconds=EVERY)
    project.post([0, 1], **{"grad/norm": [6.0, 6.0]})
    _, after = project.seen
    firing = project.alert(state="firing", repeat=0)
    silences.acknowledge(project.session, project.admin, firing.id, AckCreate(comment="on it"))
    assert project.tick(after + EVERY) == [("grad/norm", "firing", 1, 1, 0)]
    assert project.tick(after + EVERY + 1) == []  # once per interval, sent or not
    assert project.tick(after + 2 * EVERY) == [("grad/norm", "firing", 1, 2, 0)]


def test_a_silenced_repeat_is_recorded_with_its_silence(project: Project) -> None:
    rule_id = make_rule(project, repeat_every_seconds=EVERY)
    project.post([0, 1], **{"grad/norm": [6.0, 6.0]})
    _, after = project.seen
    silence = silences.create_silence(
        project.session,
        project.admin,
        SilenceCreate(rule_id=rule_id, run=project.run_id, until_step=100, comment="known"),
    )
    assert project.tick(after + EVERY) == [("grad/norm", "firing", 1, 1, 0)]
    assert project.alert(repeat=1).silenced_by == silence.id


def test_a_glob_rules_group_is_sent_again_once(project: Project) -> None:
    make_rule(project, metric="layers.*", repeat_every_seconds=EVERY, group_wait_steps=0)
    project.post([0, 1, 2], **{f"layers.{i}": [1.0, 6.0, 6.0 + i] for i in range(3)})
    _, after = project.seen
    assert [(m, s, n) for m, s, _, _, n in project.history()][-1] == ("layers.*", "firing", 1)
    added = project.tick(after + EVERY)
    assert sorted(added) == [
        ("layers.*", "firing", 2, 1, 1),
        ("layers.0", "firing", 2, 1, 0),
        ("layers.1", "firing", 2, 1, 0),
        ("layers.2", "firing", 2, 1, 0),
    ]
    group = project.alert(metric="layers.*", repeat=1)
    assert [(m["metric"], m["state"]) for m in group.members or []] == [
        ("layers.0", "firing"),
        ("layers.1", "firing"),
        ("layers.2", "firing"),
    ]
    assert project.tick(after + EVERY + 1) == []
    assert [a[:4] for a in project.tick(after + 2 * EVERY) if a[0] == "layers.*"] == [
        ("layers.*", "firing", 2, 2)
    ]


def test_a_stale_alert_is_sent_again_while_the_run_stays_quiet(project: Project) -> None:
    stale = {"kind": "stale", "seconds": 300}
    make_rule(project, name="hung", metric="*", condition=stale, repeat_every_seconds=EVERY)
    project.post([0, 1], loss=[1.0, 1.0])
    _, after = project.seen
    project.check_stale(after + 300)
    assert project.history() == [("*", "firing", 1, 0, 1)]
    assert project.tick(after + 300 + EVERY - 1) == []
    assert project.tick(after + 300 + EVERY) == [("*", "firing", 1, 1, 1)]
    assert project.alert(repeat=1).reason.startswith("still no new step for 9")
    project.post([2], loss=[1.0])
    project.check_stale(time.time())
    assert project.history()[-1] == ("*", "resolved", 2, 0, 1)
    assert project.tick(after + 100 * EVERY) == []


def test_nothing_for_a_run_that_is_no_longer_running_or_a_rule_without_it(
    project: Project,
) -> None:
    make_rule(project, name="by steps only", repeat_every_steps=100)
    rule_id = make_rule(project, repeat_every_seconds=EVERY)
    project.post([0, 1], **{"grad/norm": [6.0, 6.0]})
    _, after = project.seen
    found = runs.get_run(project.session, project.run_id)
    assert found is not None
    runs.update_run(project.session, found[0], found[1], RunUpdate(status="finished"))
    assert project.tick(after + 10 * EVERY) == []
    runs.update_run(project.session, found[0], found[1], RunUpdate(status="running"))
    body = AlertRuleUpdate(repeat_every_seconds=0)
    out = alert_rules.update_rule(project.session, project.admin, rule_id, body, ALLOW)
    assert out.repeat_every_seconds is None
    assert project.tick(after + 10 * EVERY) == []


def test_repeat_every_seconds_is_bounded(project: Project) -> None:
    rule_id = make_rule(project, repeat_every_seconds=3600)
    session, admin = project.session, project.admin
    assert alert_rules.get_rule(session, admin, rule_id).repeat_every_seconds == 3600
    listed = alert_rules.list_rules(session, admin)
    assert [r.repeat_every_seconds for r in listed] == [3600]
    with pytest.raises(Invalid, match="repeat_every_seconds: at least 60 s, got 59"):
        make_rule(project, name="too often", repeat_every_seconds=59)
    with pytest.raises(Invalid, match="at least 60 s, got 1"):
        alert_rules.update_rule(
            session, admin, rule_id, AlertRuleUpdate(repeat_every_seconds=1), ALLOW
        )
    body = AlertRuleCreate.model_validate(
        {"name": "often", "metric": "m", "condition": HIGH, "repeat_every_seconds": 5}
    )
    assert alert_rules.create_rule(session, admin, body, ALLOW, min_repeat_s=5).id
    with pytest.raises(ValidationError, match="less than or equal to 604800"):
        AlertRuleCreate.model_validate(
            {"name": "x", "metric": "m", "condition": HIGH, "repeat_every_seconds": 604_801}
        )
    assert MAX_REPEAT_SECONDS == 7 * 86_400
    unchanged = alert_rules.update_rule(session, admin, rule_id, AlertRuleUpdate(), ALLOW)
    assert unchanged.repeat_every_seconds == 3600
