"""Alert evaluation inside the ingest transaction, and the clock tick for stale runs.

A state change, its history row and one outbox row per channel are written in the same
transaction as the points that caused them: either the batch is stored and its
notifications are owed, or neither happened. The dispatcher delivers the outbox.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session

from ..alerts.clock import check_stale
from ..alerts.conditions import StaleCondition, StepCondition, parse_condition
from ..alerts.evaluation import RuleState, Transition, evaluate
from ..alerts.grouping import GroupState, advance
from ..alerts.selectors import NameIndex, check_glob, run_matches
from ..aliases import EMPTY, AliasMap
from ..aliases.resolution import matching_visible
from ..analytics import derived
from ..analytics.hierarchy import outermost
from ..batch import MetricBatch
from ..db import PerEngine
from ..errors import GlobError
from ..models import AlertState
from ..storage.alerts import (
    enabled_rules,
    record_alerts,
    record_group,
    save_state,
    states_for_update,
)
from ..storage.runs import LockedRun, running_runs
from . import control
from .aliases import project_aliases

_log = logging.getLogger(__name__)

GROUP_METRIC_ID = -1
"""``alert_states.metric_id`` of a glob rule's group on a run (see `alerts.grouping`)."""

RUN_METRIC_ID = 0
"""``alert_states.metric_id`` of rules about the run as a whole (``stale``) and of rules on a
derived series, which have one series a run."""


@dataclass(frozen=True)
class StepRule:
    """An enabled rule that watches metric values, as read at one fingerprint of its project."""

    id: int
    metric: str
    run_name: str | None
    run_tags: tuple[str, ...]
    channels: int
    condition: StepCondition
    expression: derived.Call | None = None
    """The derived series the rule watches, when its metric is an expression."""
    repeat_every_steps: int | None = None
    """A still-firing alert is sent again every this many logged steps."""
    group_wait_steps: int = 0
    """A glob rule's group waits this many steps after its first firing before telling."""
    control: str | None = None
    """What the rule asks of the run's trainer when it fires ("checkpoint", "stop")."""
    name: str = ""


class RuleCache:
    """The step rules of each project, kept while the project's rule fingerprint (see
    `LockedRun.rules`) stays the same, so steady ingest neither queries nor parses
    them. A rule change anywhere (another worker, another replica) changes the fingerprint,
    which every batch reads under its run's lock: the next batch of the project reloads.
    The project's metric aliases are part of that fingerprint and are reloaded with the
    rules. At most ``max_projects``, least recently used dropped first. Thread-safe."""

    def __init__(self, max_projects: int = 10_000) -> None:
        self.max_projects = max_projects
        self._projects: OrderedDict[int, tuple[str, tuple[StepRule, ...]]] = OrderedDict()
        self._aliases: dict[int, AliasMap] = {}
        self._lock = threading.Lock()

    def aliases(self, project_id: int) -> AliasMap:
        """The aliases read with the project's rules by the last `step_rules`."""
        with self._lock:
            return self._aliases.get(project_id, EMPTY)

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
                _expression(rule.metric),
                rule.repeat_every_steps,
                rule.group_wait_steps or 0,
                rule.control,
                rule.name,
            )
            for rule in enabled_rules(session, project_id)
            if not isinstance(condition := parse_condition(rule.condition), StaleCondition)
            and selectors_usable(rule.id, rule.metric, rule.run_name)
        )
        aliases = project_aliases(session, project_id) if rules else EMPTY
        with self._lock:
            self._projects[project_id] = (fingerprint, rules)
            self._aliases[project_id] = aliases
            self._projects.move_to_end(project_id)
            while len(self._projects) > self.max_projects:
                dropped, _ = self._projects.popitem(last=False)
                self._aliases.pop(dropped, None)
        return rules


rule_cache = PerEngine(RuleCache)
"""This process's rule cache for the database behind an engine."""


PAUSE_EVERY = 32
"""Series evaluated between two calls of `evaluate_batch`'s ``pause``."""


def evaluate_batch(
    session: Session,
    run: LockedRun,
    segment: int,
    batch: MetricBatch,
    metric_ids: dict[str, int],
    *,
    rules: RuleCache | None = None,
    now_unix: float | None = None,
    pause: Callable[[], None] | None = None,
) -> int:
    """Feed a stored batch to every matching rule; returns how many notifications are owed.
    ``pause`` is called before the states are read and after every `PAUSE_EVERY` series.

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
    visible = _visible_in_batch(cache.aliases(run.project_id), batch)
    # One index of the batch's names serves every rule: a glob is one pass over all of them.
    names = NameIndex(list(visible) if visible is not None else _logged_names(batch))
    work: list[tuple[StepRule, str, Sequence[int], Sequence[float]]] = []
    for rule in matching:
        if rule.expression is not None:
            at, derived_values = _derived_in_batch(rule.expression, batch, visible, names)
            if len(at):
                work.append((rule, rule.metric, at.tolist(), derived_values.tolist()))
            continue
        # Through an alias a rule watches the stored series that stands for its metric.
        watched = _watched(rule.metric, names, visible)
        for column in batch.columns:
            if column.name not in watched or not column.logged.any():
                continue
            order = np.argsort(batch.steps[column.logged], kind="stable")
            steps = batch.steps[column.logged][order].tolist()
            values = column.values[column.logged][order].tolist()
            work.append((rule, column.name, steps, values))
    if not work:
        return 0
    if pause is not None:
        pause()
    states = states_for_update(
        session, run.key, {_state_key(r, name, metric_ids) for r, name, _, _ in work}
    )
    owed = 0
    grouped: dict[int, tuple[StepRule, list[tuple[str, Transition]]]] = {}
    for done, (rule, name, steps, values) in enumerate(work, 1):
        if pause is not None and done % PAUSE_EVERY == 0:
            pause()
        key = _state_key(rule, name, metric_ids)
        row = states.get(key)
        state = _state_of(row, segment)
        new_state, transitions = evaluate(
            rule.condition,
            state,
            steps,
            values,
            now_unix=now_unix,
            repeat_every_steps=rule.repeat_every_steps,
        )
        save_state(session, row, run.key, key, segment, new_state)
        if rule.control is not None and transitions:
            control.request_from_rule(
                session,
                run_key=run.key,
                segment=segment,
                rule_id=rule.id,
                rule_name=rule.name,
                action=rule.control,
                metric=name,
                transitions=transitions,
            )
        if is_glob(rule):
            # The group speaks for the rule's metrics; each one's transitions are history.
            record_alerts(session, run.key, segment, rule.id, 0, name, transitions)
            grouped.setdefault(rule.id, (rule, []))[1].extend((name, t) for t in transitions)
        else:
            owed += record_alerts(
                session, run.key, segment, rule.id, rule.channels, name, transitions
            )
    for rule_id, (rule, events) in grouped.items():
        key = (rule_id, GROUP_METRIC_ID)
        row = states_for_update(session, run.key, {key}).get(key)
        group = (
            GroupState()
            if row is None or row.segment != segment
            else GroupState.from_dict(row.data)
        )
        messages = advance(
            group, events, int(batch.steps.max()), rule.group_wait_steps, now_unix=now_unix
        )
        if messages or row is None or group.to_dict() != row.data:
            save_state(session, row, run.key, key, segment, group)
        owed += record_group(
            session, run.key, segment, rule.id, rule.channels, rule.metric, messages
        )
    return owed


def is_glob(rule: StepRule) -> bool:
    """Whether the rule watches a glob of metrics (whose alerts are grouped)."""
    return rule.expression is None and watches_glob(rule.metric)


def watches_glob(metric: str) -> bool:
    """Whether a rule's metric is a glob of metrics (not a name, not a derived series)."""
    return not derived.is_derived(metric) and any(c in metric for c in "*?[")


def _expression(metric: str | None) -> derived.Call | None:
    """A rule's metric as a derived-series expression, when it is one (rules are checked
    when saved, so a stored expression parses)."""
    if metric is None or not derived.is_derived(metric):
        return None
    expression = derived.parse(metric)
    assert isinstance(expression, derived.Call)
    return expression


def _state_key(rule: StepRule, name: str, metric_ids: dict[str, int]) -> tuple[int, int]:
    return (rule.id, RUN_METRIC_ID if rule.expression is not None else metric_ids[name])


def _visible_in_batch(aliases: AliasMap, batch: MetricBatch) -> dict[str, str] | None:
    """The batch's logged names and the canonical names its aliases stand for, each →
    its stored name (`AliasMap.visible`); None without aliases. A canonical name the batch
    logs itself wins over its aliases."""
    if not aliases:
        return None
    return aliases.visible(column.name for column in batch.columns if column.logged.any())


def _derived_in_batch(
    expression: derived.Call,
    batch: MetricBatch,
    visible: dict[str, str] | None = None,
    names: NameIndex | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The derived series over the batch's steps where every input is in the batch
    (an input the batch logs under an alias read through ``visible``).

    A trainer logs a step's metrics together, so a batch holds all of a step's inputs; a
    step whose inputs came in different batches is not judged.
    """
    if names is None:
        names = NameIndex(list(visible) if visible is not None else _logged_names(batch))
    inputs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for pattern in derived.patterns(expression):
        sources = _counted(pattern, names, visible)
        inputs[pattern] = [
            _ascending(batch.steps[column.logged], column.values[column.logged])
            for column in batch.columns
            if column.name in sources and column.logged.any()
        ]
    return derived.evaluate(expression, inputs)


def _logged_names(batch: MetricBatch) -> list[str]:
    return [column.name for column in batch.columns if column.logged.any()]


def _counted(pattern: str, names: NameIndex, visible: dict[str, str] | None) -> set[str]:
    """The batch's stored names an expression's argument reads: a name, or what a glob
    matches with each norm counted once (the hierarchy rule, `.analytics.hierarchy`: not a
    layer and its leaves, not ``grad/norm/total`` and its parts), as the series reads
    count them."""
    if not derived.Name(pattern).is_glob:
        return _watched(pattern, names, visible)
    if visible is None:
        return set(outermost(names.matching(pattern)))
    matched = matching_visible(pattern, visible, names)
    return {matched[name] for name in outermost(matched)}


def _watched(pattern: str, names: NameIndex, visible: dict[str, str] | None) -> set[str]:
    """The batch's stored names that a rule's metric (a name or a glob) watches: those it
    matches, or with aliases (``visible``) those that the visible names it matches stand for."""
    if visible is None:
        return set(names.matching(pattern))
    return set(matching_visible(pattern, visible, names).values())


def selectors_usable(rule_id: int, metric: str | None, run_name: str | None) -> bool:
    """Whether a stored rule's metric and run globs can be matched. Both are checked when a
    rule is saved; one saved before a check existed is skipped, with a warning, rather than
    failing every batch of its project."""
    try:
        if run_name is not None:
            check_glob(run_name, segmented=False)
        if metric is not None and derived.is_derived(metric):
            derived.parse(metric)
        elif metric is not None and watches_glob(metric):
            check_glob(metric)
    except (GlobError, derived.ExpressionError) as e:
        _log.warning("alert rule %s is skipped: %s; edit its selectors to use it again", rule_id, e)
        return False
    return True


def _ascending(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(steps, kind="stable")
    return steps[order], values[order]


def check_stale_runs(session: Session, now_unix: float | None = None) -> int:
    """The clock tick: fire ``stale`` rules for running runs that went quiet, resolve those
    that spoke again. Returns how many notifications are owed."""
    now_unix = time.time() if now_unix is None else now_unix
    stale_rules = [r for r in enabled_rules(session) if r.condition.get("kind") == "stale"]
    owed = 0
    for rule in stale_rules:
        condition = parse_condition(rule.condition)
        assert isinstance(condition, StaleCondition)
        if not selectors_usable(rule.id, None, rule.run_name):
            continue
        for run in running_runs(session, rule.project_id):
            if run.last_step is None or not run_matches(
                rule.run_name, rule.run_tags or [], run.name, run.tags or []
            ):
                continue
            key = (rule.id, RUN_METRIC_ID)
            row = states_for_update(session, run.key, {key}).get(key)
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
                save_state(session, row, run.key, key, run.segment, state)
            owed += record_alerts(
                session,
                run.key,
                run.segment,
                rule.id,
                len(rule.channels or ()),
                rule.metric or "(run)",
                transitions,
            )
    return owed


def _unix(when: datetime) -> float:
    return when.timestamp()


def _state_of(row: AlertState | None, segment: int) -> RuleState:
    """The stored state, or a fresh one for a new segment (a restart starts over)."""
    if row is None or row.segment != segment:
        return RuleState()
    return RuleState.from_dict(row.data)
