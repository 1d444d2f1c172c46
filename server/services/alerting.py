"""Alert evaluation inside the ingest transaction, and the clock tick for stale runs.

A state change, its history row and one outbox row per channel are written in the same
transaction as the points that caused them: either the batch is stored and its
notifications are owed, or neither happened. The dispatcher delivers the outbox.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import and_, delete, select
from sqlalchemy.orm import Session

from ..alerts.conditions import StaleCondition, StepCondition, parse_condition
from ..alerts.evaluation import RuleState, Transition, check_stale, evaluate
from ..alerts.selectors import metric_matches, run_matches
from ..batch import MetricBatch
from ..db import PerEngine
from ..models import Alert, AlertRule, AlertState, Notification, Run
from ..storage.runs import LockedRun

RUN_METRIC_ID = 0
"""``alert_states.metric_id`` of rules about the run as a whole (``stale``)."""


@dataclass(frozen=True)
class StepRule:
    """An enabled rule that watches metric values, as read at one fingerprint of its project."""

    id: int
    metric: str
    run_name: str | None
    run_tags: tuple[str, ...]
    channels: int
    condition: StepCondition


class RuleCache:
    """The step rules of each project, kept while the project's rule fingerprint (see
    `LockedRun.rules`) stays the same, so steady ingest neither queries nor parses
    them. A rule change anywhere (another worker, another replica) changes the fingerprint,
    which every batch reads under its run's lock: the next batch of the project reloads.
    At most ``max_projects``, least recently used dropped first. Thread-safe."""

    def __init__(self, max_projects: int = 10_000) -> None:
        self.max_projects = max_projects
        self._projects: OrderedDict[int, tuple[str, tuple[StepRule, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def step_rules(
        self, session: Session, project_id: int, fingerprint: str | None
    ) -> tuple[StepRule, ...]:
        if fingerprint is None:
            return ()
        with self._lock:
            held = self._projects.get(project_id)
            if held is not None and held[0] == fingerprint:
                self._projects.move_to_end(project_id)
                return held[1]
        rules = tuple(
            StepRule(
                rule.id,
                rule.metric,
                rule.run_name,
                tuple(rule.run_tags or ()),
                len(rule.channels or ()),
                condition,
            )
            for rule in session.scalars(
                select(AlertRule)
                .where(AlertRule.project_id == project_id, AlertRule.enabled)
                .order_by(AlertRule.id)
            )
            if not isinstance(condition := parse_condition(rule.condition), StaleCondition)
        )
        with self._lock:
            self._projects[project_id] = (fingerprint, rules)
            self._projects.move_to_end(project_id)
            while len(self._projects) > self.max_projects:
                self._projects.popitem(last=False)
        return rules


rule_cache = PerEngine(RuleCache)
"""This process's rule cache for the database behind an engine."""


def evaluate_batch(
    session: Session,
    run: LockedRun,
    segment: int,
    batch: MetricBatch,
    metric_ids: dict[str, int],
    *,
    rules: RuleCache | None = None,
    now_unix: float | None = None,
) -> int:
    """Feed a stored batch to every matching rule; returns how many notifications are owed.

    Only the run's current segment is evaluated: a late batch for an older segment is
    history, not news. Steps at or below a state's last step are skipped by `evaluate`, so
    a re-sent batch never fires twice. Without ``rules`` the rules are read afresh.
    """
    if segment != run.segment or run.rules is None:
        return 0
    cache = rules if rules is not None else RuleCache()
    matching = [
        rule
        for rule in cache.step_rules(session, run.project_id, run.rules)
        if run_matches(rule.run_name, rule.run_tags, run.name, run.tags or [])
    ]
    if not matching:
        return 0
    now_unix = time.time() if now_unix is None else now_unix
    work: list[tuple[StepRule, str, Sequence[int], Sequence[float]]] = []
    for rule in matching:
        for column in batch.columns:
            if not column.logged.any() or not metric_matches(rule.metric, column.name):
                continue
            order = np.argsort(batch.steps[column.logged], kind="stable")
            steps = batch.steps[column.logged][order].tolist()
            values = column.values[column.logged][order].tolist()
            work.append((rule, column.name, steps, values))
    if not work:
        return 0
    states = _load_states(session, run.key, {(r.id, metric_ids[name]) for r, name, _, _ in work})
    owed = 0
    for rule, name, steps, values in work:
        key = (rule.id, metric_ids[name])
        row = states.get(key)
        state = _state_of(row, segment)
        new_state, transitions = evaluate(rule.condition, state, steps, values, now_unix=now_unix)
        _save_state(session, row, run.key, key, segment, new_state)
        owed += _record(session, run.key, segment, rule.id, rule.channels, name, transitions)
    return owed


def check_stale_runs(session: Session, now_unix: float | None = None) -> int:
    """The clock tick: fire ``stale`` rules for running runs that went quiet, resolve those
    that spoke again. Returns how many notifications are owed."""
    now_unix = time.time() if now_unix is None else now_unix
    stale_rules = session.scalars(select(AlertRule).where(AlertRule.enabled)).all()
    stale_rules = [r for r in stale_rules if r.condition.get("kind") == "stale"]
    owed = 0
    for rule in stale_rules:
        condition = parse_condition(rule.condition)
        assert isinstance(condition, StaleCondition)
        runs = session.scalars(
            select(Run).where(Run.project_id == rule.project_id, Run.status == "running")
        )
        for run in runs:
            if run.last_step is None or not run_matches(
                rule.run_name, rule.run_tags or [], run.name, run.tags or []
            ):
                continue
            key = (rule.id, RUN_METRIC_ID)
            row = _load_states(session, run.key, {key}).get(key)
            state = _state_of(row, run.segment)
            transitions: list[Transition] = []
            if state.last_step is None or run.last_step > state.last_step:
                state, fresh = evaluate(
                    condition, state, [run.last_step], [0.0], now_unix=_unix(run.last_seen)
                )
                transitions += fresh
            state, fired = check_stale(condition, state, now_unix)
            transitions += fired
            if row is None or transitions or state.to_dict() != row.data:
                _save_state(session, row, run.key, key, run.segment, state)
            owed += _record(
                session,
                run.key,
                run.segment,
                rule.id,
                len(rule.channels or ()),
                rule.metric or "(run)",
                transitions,
            )
    return owed


def forget_rule_state(session: Session, rule_id: int) -> None:
    """An edited rule starts afresh on every run."""
    session.execute(delete(AlertState).where(AlertState.rule_id == rule_id))


def _unix(when: datetime) -> float:
    return when.timestamp()


def _load_states(
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


def _state_of(row: AlertState | None, segment: int) -> RuleState:
    """The stored state, or a fresh one for a new segment (a restart starts over)."""
    if row is None or row.segment != segment:
        return RuleState()
    return RuleState.from_dict(row.data)


def _save_state(
    session: Session,
    row: AlertState | None,
    run_key: int,
    key: tuple[int, int],
    segment: int,
    state: RuleState,
) -> None:
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


def _record(
    session: Session,
    run_key: int,
    segment: int,
    rule_id: int,
    channels: int,
    metric: str,
    transitions: list[Transition],
) -> int:
    """History rows and their outbox rows (one a channel) for each transition."""
    owed = 0
    for transition in transitions:
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
        )
        session.add(alert)
        session.flush()
        for index in range(channels):
            session.add(Notification(alert_id=alert.id, channel_index=index))
            owed += 1
    return owed
