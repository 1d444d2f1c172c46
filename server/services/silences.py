"""Silences and acknowledgements: a project's notifications held back on purpose, with
who and why.

A silence names a rule, a run and a metric glob (each optional) and lasts until a time
(``ends_at``), past a step (``until_step``) or both, or until expired by hand. Matching
transitions are still recorded in the alert history, with the silence's id, and no
notification is sent for them (see `storage.alerts.record_alerts`). Acknowledging a firing
alert does the same for its repeats: someone has taken it on.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from .. import errors
from ..alerts.selectors import GLOB_CHARS, check_glob
from ..auth import Principal
from ..models import Alert, Silence, utcnow
from ..schemas.alerts import AckCreate, SilenceCreate, SilenceOut
from ..storage.alerts import rule_by_id
from ..storage.silences import add_silence, alert_by_id, silence_by_id, silences_of_project
from ..storage.tokens import token_name
from .access import own_project, owned_run, owns

MAX_ACTIVE = 1000
"""Silences a project may have in force at once (each is checked for every transition)."""


def _aware(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=utcnow().tzinfo)


def to_out(silence: Silence, project: str, run_id: str | None) -> SilenceOut:
    now = utcnow()
    ends_at = _aware(silence.ends_at)
    active = silence.expired_at is None and (ends_at is None or ends_at > now)
    return SilenceOut(
        id=silence.id,
        project=project,
        rule_id=silence.rule_id,
        run=run_id,
        metric=silence.metric,
        ends_at=ends_at,
        until_step=silence.until_step,
        created_by=silence.created_by,
        comment=silence.comment,
        created_at=silence.created_at,
        expired_at=silence.expired_at,
        active=active,
    )


def create_silence(session: Session, who: Principal, body: SilenceCreate) -> SilenceOut:
    project = own_project(who, body.project)
    if body.ends_at is None and body.until_step is None:
        raise errors.Invalid("a silence needs ends_at, until_step or both: it must end")
    if body.metric is not None and not GLOB_CHARS.isdisjoint(body.metric):
        check_glob(body.metric)  # a GlobError is answered 422
    ends_at = _aware(body.ends_at)
    if ends_at is not None and ends_at <= utcnow():
        raise errors.Invalid(f"ends_at ({ends_at.isoformat()}) is not in the future")
    if body.rule_id is not None:
        rule = rule_by_id(session, body.rule_id)
        if rule is None:
            raise errors.NotFound(f"no alert rule with id {body.rule_id}")
        owns(who, rule.project_id, "rule")
    run_key = None
    if body.run is not None:
        run_key = owned_run(session, who, body.run)[0].key
    active = len(list_silences(session, who, active_only=True))
    if active >= MAX_ACTIVE:
        raise errors.Conflict(f"project {project!r} has {active} silences in force, the most")
    silence = Silence(
        project_id=who.project_id,
        rule_id=body.rule_id,
        run_key=run_key,
        metric=body.metric,
        ends_at=ends_at,
        until_step=body.until_step,
        created_by=body.created_by or token_name(session, who.token_id) or "token",
        comment=body.comment,
    )
    return to_out(add_silence(session, silence), project, body.run)


def list_silences(
    session: Session, who: Principal, *, active_only: bool = False
) -> list[SilenceOut]:
    """The project's silences, newest first (only those in force with ``active_only``)."""
    rows = silences_of_project(session, who.project_id)
    out = [to_out(silence, who.project, run_id) for silence, run_id in rows]
    return [s for s in out if s.active] if active_only else out


def expire_silence(session: Session, who: Principal, silence_id: int) -> None:
    """End a silence now; it stays in the list, expired, for the history."""
    silence = silence_by_id(session, silence_id)
    if silence is None:
        raise errors.NotFound(f"no silence with id {silence_id}")
    owns(who, silence.project_id, "silence")
    if silence.expired_at is None:
        silence.expired_at = utcnow()


def acknowledge(session: Session, who: Principal, alert_id: int, body: AckCreate) -> Alert:
    """Take a firing alert on: its repeats are recorded and not sent. Acknowledging again
    keeps the first acknowledgement."""
    found = alert_by_id(session, alert_id)
    if found is None:
        raise errors.NotFound(f"no alert with id {alert_id}")
    alert, project_id = found
    owns(who, project_id, "alert")
    if alert.state != "firing" or alert.repeat:
        raise errors.Conflict(
            f"alert {alert_id} is a {alert.state} {'repeat' if alert.repeat else 'message'}: "
            "acknowledge the firing alert it belongs to"
        )
    if alert.acked_at is None:
        alert.acked_at = utcnow()
        alert.acked_by = body.by or token_name(session, who.token_id) or "token"
        alert.ack_comment = body.comment
    return alert
