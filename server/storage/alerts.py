"""Alert rules, their evaluation state per run and metric, and the alert history with its
outbox rows (one notification a channel)."""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from functools import lru_cache
from typing import Any, Protocol

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..alerts.evaluation import Transition
from ..alerts.grouping import GroupMessage
from ..alerts.selectors import metric_matches
from ..errors import GlobError
from ..models import Alert, AlertRule, AlertState, Metric, Notification, Run, Silence, utcnow
from .citus import one_connection_a_node

_log = logging.getLogger(__name__)

# --- rules --------------------------------------------------------------------------------


def enabled_rules(session: Session, project_id: int | None = None) -> list[AlertRule]:
    """Enabled rules, by id: one project's, or every project's."""
    query = select(AlertRule).where(AlertRule.enabled).order_by(AlertRule.id)
    if project_id is not None:
        query = query.where(AlertRule.project_id == project_id)
    return list(session.scalars(query))


def rules_of_project(session: Session, project_id: int) -> list[AlertRule]:
    return list(
        session.scalars(
            select(AlertRule).where(AlertRule.project_id == project_id).order_by(AlertRule.id)
        )
    )


def rule_count(session: Session, project_id: int) -> int:
    return int(
        session.scalar(
            select(func.count()).select_from(AlertRule).where(AlertRule.project_id == project_id)
        )
        or 0
    )


def rule_by_id(session: Session, rule_id: int) -> AlertRule | None:
    return session.get(AlertRule, rule_id)


def rule_named(session: Session, project_id: int, name: str) -> int | None:
    """The id of the project's rule of that name."""
    return session.scalar(
        select(AlertRule.id).where(AlertRule.project_id == project_id, AlertRule.name == name)
    )


def save_rule(session: Session, rule: AlertRule) -> bool:
    """Write a new or edited rule in a savepoint; False when its name is taken (a concurrent
    create or rename won), the transaction going on without it."""
    try:
        with session.begin_nested():
            session.add(rule)
            session.flush()
    except IntegrityError:
        return False
    return True


def delete_rule(session: Session, rule: AlertRule) -> None:
    session.delete(rule)


def metrics_of_run(session: Session, run_key: int) -> list[Metric]:
    return list(session.scalars(select(Metric).where(Metric.run_key == run_key)))


# --- evaluation state -----------------------------------------------------------------------


def states_for_update(
    session: Session, run_key: int, keys: set[tuple[int, int]]
) -> dict[tuple[int, int], AlertState]:
    """States for (rule, metric) pairs of a run, locked for this transaction on Postgres."""
    rule_ids = {rule_id for rule_id, _ in keys}
    rows = session.scalars(
        select(AlertState)
        .where(and_(AlertState.run_key == run_key, AlertState.rule_id.in_(rule_ids)))
        .with_for_update()
    )
    return {(r.rule_id, r.metric_id): r for r in rows if (r.rule_id, r.metric_id) in keys}


class Stored(Protocol):
    """A state kept as a JSON document: a rule on one series, or a rule's group."""

    @property
    def status(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


def save_state(
    session: Session,
    row: AlertState | None,
    run_key: int,
    key: tuple[int, int],
    segment: int,
    state: Stored,
) -> None:
    """Store a (rule, metric) state of a run: into its row, or a new one."""
    if row is None:
        session.add(
            AlertState(
                run_key=run_key,
                rule_id=key[0],
                metric_id=key[1],
                segment=segment,
                state=state.status,
                data=state.to_dict(),
            )
        )
        return
    row.segment = segment
    row.state = state.status
    row.data = state.to_dict()


def clock_rules(session: Session) -> list[AlertRule]:
    """Enabled rules of every project that repeat by the wall clock, by id."""
    return list(
        session.scalars(
            select(AlertRule)
            .where(AlertRule.enabled, AlertRule.repeat_every_seconds.is_not(None))
            .order_by(AlertRule.id)
        )
    )


def firing_states(
    session: Session, rule_ids: Collection[int]
) -> list[tuple[int, int, int, dict[str, Any]]]:
    """``(rule, run key, metric, state document)`` of the rules' firing states (a glob
    rule's group among them) on running runs, in each run's current segment. Read without
    locks: what the clock finds due here it locks with `lock_firing` and decides again.

    The running runs of the rules' projects come first, from ``runs``, and the states are
    read for those runs only: on Citus that reaches the shards of the running runs, not all
    of them, and (`one_connection_a_node`) leaves the transaction free to write the alerts
    it finds due."""
    running = session.execute(
        select(Run.key, Run.segment).where(
            Run.status == "running",
            Run.project_id.in_(select(AlertRule.project_id).where(AlertRule.id.in_(rule_ids))),
        )
    )
    segments = {int(key): int(segment) for key, segment in running}
    if not segments:
        return []
    one_connection_a_node(session.connection())
    rows = session.execute(
        select(
            AlertState.rule_id,
            AlertState.run_key,
            AlertState.metric_id,
            AlertState.segment,
            AlertState.data,
        ).where(
            AlertState.run_key.in_(sorted(segments)),
            AlertState.rule_id.in_(rule_ids),
            AlertState.state == "firing",
        )
    )
    return [
        (rule_id, run_key, metric_id, data)
        for rule_id, run_key, metric_id, segment, data in rows
        if segments.get(run_key) == segment
    ]


def lock_firing(
    session: Session, run_key: int, rule_id: int
) -> tuple[int, dict[int, AlertState]] | None:
    """Take a running run's row lock, as each batch of it does first, then the rule's
    firing states in its current segment, locked and read afresh: the run's segment and
    those states by metric id. None when the run no longer runs.

    Batches and the clock thereby take turns on a run's states, locking in the same order
    (the run, its per-metric states, then a group's), so neither undoes the other's work.
    """
    segment = session.scalar(
        select(Run.segment)
        .where(Run.key == run_key, Run.status == "running")
        .with_for_update(key_share=True)
    )
    if segment is None:
        return None
    rows = session.scalars(
        select(AlertState)
        .where(
            AlertState.run_key == run_key,
            AlertState.rule_id == rule_id,
            AlertState.state == "firing",
            AlertState.segment == segment,
        )
        .order_by(AlertState.metric_id.desc())
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return segment, {row.metric_id: row for row in rows}


def metric_names_by_id(session: Session, ids: Collection[int]) -> dict[int, str]:
    """The names of metrics (of any run) by id."""
    if not ids:
        return {}
    rows = session.execute(select(Metric.id, Metric.name).where(Metric.id.in_(ids)))
    return {metric_id: name for metric_id, name in rows}


def forget_states(session: Session, rule_id: int) -> None:
    """Every run's state of the rule: an edited rule starts afresh."""
    session.execute(delete(AlertState).where(AlertState.rule_id == rule_id))


# --- history and outbox ---------------------------------------------------------------------


def record_alerts(
    session: Session,
    run_key: int,
    segment: int,
    rule_id: int,
    channels: int,
    metric: str,
    transitions: Sequence[Transition],
) -> int:
    """History rows and their outbox rows (one a channel) for each transition; returns how
    many notifications are owed. A transition a silence matches is recorded with the
    silence's id and owes nothing."""
    owed = 0
    silences = active_silences(session, run_key, rule_id) if transitions else []
    for transition in transitions:
        silence = next((s for s in silences if silences_it(s, metric, transition.step)), None)
        acked = transition.repeat > 0 and _acknowledged(
            session, run_key, rule_id, metric, transition.fired_at_step
        )
        alert = Alert(
            run_key=run_key,
            rule_id=rule_id,
            metric=metric,
            state=transition.state,
            segment=segment,
            step=transition.step,
            value=None if math.isnan(transition.value) else transition.value,
            threshold=transition.threshold,
            reason=transition.reason,
            repeat=transition.repeat,
            worst=None
            if transition.worst is None or math.isnan(transition.worst)
            else transition.worst,
            silenced_by=None if silence is None else silence.id,
        )
        owed += _add(session, alert, 0 if silence is not None or acked else channels)
    return owed


def record_group(
    session: Session,
    run_key: int,
    segment: int,
    rule_id: int,
    channels: int,
    pattern: str,
    messages: Sequence[GroupMessage],
) -> int:
    """History rows (metric: the rule's glob, with the members) and their outbox rows for a
    group's messages; returns how many notifications are owed. A message is held back when
    silences cover every member it lists as firing (or, resolved, every member)."""
    owed = 0
    silences = active_silences(session, run_key, rule_id) if messages else []
    for message in messages:
        named = [m for m in message.members if m["state"] == "firing"] or message.members
        silence = None
        for candidate in silences:
            if all(silences_it(candidate, m["metric"], message.step) for m in named):
                silence = candidate
                break
        acked = message.repeat > 0 and _acknowledged(
            session, run_key, rule_id, pattern, message.fired_at_step
        )
        alert = Alert(
            run_key=run_key,
            rule_id=rule_id,
            metric=pattern,
            state=message.state,
            segment=segment,
            step=message.step,
            value=None if math.isnan(message.value) else message.value,
            threshold=message.threshold,
            reason=message.reason,
            repeat=message.repeat,
            members=message.members,
            silenced_by=None if silence is None else silence.id,
        )
        owed += _add(session, alert, 0 if silence is not None or acked else channels)
    return owed


def _add(session: Session, alert: Alert, channels: int) -> int:
    """Store a history row and one outbox row a channel (none for a message held back);
    returns how many notifications that owes."""
    session.add(alert)
    session.flush()
    for index in range(channels):
        session.add(Notification(alert_id=alert.id, channel_index=index))
    return channels


def _acknowledged(
    session: Session, run_key: int, rule_id: int, metric: str, fired_at_step: int
) -> bool:
    """Whether the firing that a repeat belongs to was acknowledged."""
    query = select(Alert.acked_at).where(
        Alert.run_key == run_key,
        Alert.rule_id == rule_id,
        Alert.metric == metric,
        Alert.state == "firing",
        Alert.repeat == 0,
        Alert.step == fired_at_step,
    )
    return any(at is not None for at in session.scalars(query))


def active_silences(session: Session, run_key: int, rule_id: int) -> list[Silence]:
    """The silences of the run's project in force now that may match the rule on the run
    (their metric glob and step bound are for `silences_it`)."""
    now = utcnow()
    project = select(Run.project_id).where(Run.key == run_key).scalar_subquery()
    query = (
        select(Silence)
        .where(
            Silence.project_id == project,
            Silence.expired_at.is_(None),
            or_(Silence.ends_at.is_(None), Silence.ends_at > now),
            or_(Silence.rule_id.is_(None), Silence.rule_id == rule_id),
            or_(Silence.run_key.is_(None), Silence.run_key == run_key),
        )
        .order_by(Silence.id)
    )
    return list(session.scalars(query))


def silences_it(silence: Silence, metric: str, step: int) -> bool:
    """Whether ``silence`` (in force, of the right rule and run) covers ``metric`` at
    ``step``."""
    if silence.until_step is not None and step > silence.until_step:
        return False
    if silence.metric is None:
        return True
    try:
        return metric_matches(silence.metric, metric)
    except GlobError as e:
        # Saved before globs were checked: it silences nothing rather than failing ingest.
        _warn_once(f"silence {silence.id} is ignored: {e}; expire it and create it anew")
        return False


@lru_cache(maxsize=1024)
def _warn_once(message: str) -> None:
    _log.warning(message)


def alert_history(
    session: Session,
    project_id: int,
    *,
    run_id: str | None = None,
    state: str | None = None,
    limit: int = 200,
) -> list[tuple[Alert, AlertRule, Run, list[Notification]]]:
    """The project's alerts, newest first, each with its rule, run and notifications."""
    query = (
        select(Alert, AlertRule, Run)
        .join(AlertRule, AlertRule.id == Alert.rule_id)
        .join(Run, Run.key == Alert.run_key)
        .where(Run.project_id == project_id)
        .order_by(Alert.id.desc())
        .limit(limit)
    )
    if run_id is not None:
        query = query.where(Run.id == run_id)
    if state is not None:
        query = query.where(Alert.state == state)
    rows = session.execute(query).all()
    ids = [alert.id for alert, _, _ in rows]
    by_alert: dict[int, list[Notification]] = {}
    if ids:
        for n in session.scalars(
            select(Notification).where(Notification.alert_id.in_(ids)).order_by(Notification.id)
        ):
            by_alert.setdefault(n.alert_id, []).append(n)
    return [(alert, rule, run, by_alert.get(alert.id, [])) for alert, rule, run in rows]
