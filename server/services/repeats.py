"""Firing alerts sent again by the wall clock: the rules' ``repeat_every_seconds``.

``repeat_every_steps`` repeats a firing alert as steps arrive, and a trainer that hangs or
stops logging sends none. On every tick the dispatcher calls :func:`send_due_repeats`: a
firing alert of a running run that has gone ``repeat_every_seconds`` without a notification
(its firing, or a repeat by steps or by the clock) is sent again, as a repeat by steps would
be (`alerts.clock.repeat_now`), and recorded in the history and the outbox by the same
helpers, so silences and acknowledgements hold it back alike. A glob rule's group is sent
again once for the group, its metrics' repeats kept in the history unsent.

Due alerts are found without locks, then decided again under the run's row lock, which
every batch of the run takes first: a batch and the clock take turns, and several
dispatchers never send the same repeat twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.orm import Session

from ..alerts.clock import check_repeat, repeat_clock, repeat_due, repeat_now
from ..alerts.conditions import parse_condition
from ..alerts.grouping import GroupState, advance
from ..alerts.state import RuleState, Transition
from ..models import AlertRule, AlertState
from ..storage.alerts import (
    clock_rules,
    firing_states,
    lock_firing,
    metric_names_by_id,
    record_alerts,
    record_group,
    save_state,
)
from .alerting import GROUP_METRIC_ID, RUN_METRIC_ID, watches_glob


def send_due_repeats(session: Session, now_unix: float | None = None) -> int:
    """The clock tick of ``repeat_every_seconds``: send again each firing alert of a running
    run that has gone that long without a notification. Returns how many notifications are
    owed."""
    now_unix = time.time() if now_unix is None else now_unix
    rules = {rule.id: rule for rule in clock_rules(session)}
    if not rules:
        return 0
    found: dict[tuple[int, int], dict[int, dict[str, Any]]] = {}
    for rule_id, run_key, metric_id, data in firing_states(session, list(rules)):
        found.setdefault((rule_id, run_key), {})[metric_id] = data
    owed = 0
    for (rule_id, run_key), docs in sorted(found.items()):
        rule = rules[rule_id]
        if not _due(rule, docs, now_unix):
            continue
        locked = lock_firing(session, run_key, rule_id)
        if locked is None:
            continue
        segment, rows = locked
        if _grouped(rule):
            owed += _repeat_group(session, rule, run_key, segment, rows, now_unix)
        else:
            owed += _repeat_each(session, rule, run_key, segment, rows, now_unix)
    return owed


def _grouped(rule: AlertRule) -> bool:
    """Whether the rule's alerts on a run are one group (a glob rule's; a stale rule's
    metric glob has one state a run, and no group)."""
    return rule.condition.get("kind") != "stale" and watches_glob(rule.metric)


def _seconds(rule: AlertRule) -> int:
    assert rule.repeat_every_seconds is not None
    return rule.repeat_every_seconds


def _due(rule: AlertRule, docs: Mapping[int, Mapping[str, Any]], now_unix: float) -> bool:
    """Whether the rule's firing states on a run, as read without locks, owe a repeat."""
    if _grouped(rule):
        group = docs.get(GROUP_METRIC_ID)
        if group is None:
            return False
        members = [RuleState.from_dict(d) for m, d in docs.items() if m != GROUP_METRIC_ID]
        since = _group_clock(GroupState.from_dict(group), members)
        return repeat_due(since, now_unix, _seconds(rule))
    return any(
        repeat_due(repeat_clock(RuleState.from_dict(doc)), now_unix, _seconds(rule))
        for doc in docs.values()
    )


def _group_clock(group: GroupState, members: Iterable[RuleState]) -> float | None:
    """When the group's clock started: its last firing message or, in a group stored before
    that was kept, the last batch any of its firing metrics saw."""
    if group.status != "firing":
        return None
    if group.notified_unix is not None:
        return group.notified_unix
    seen = [m.last_seen_unix for m in members if m.last_seen_unix is not None]
    return max(seen, default=None)


def _names(session: Session, rule: AlertRule, metric_ids: Iterable[int]) -> dict[int, str]:
    """What the history calls each state's metric: its name, or for a state of the run
    as a whole (a derived series, stale) the rule's metric."""
    ids = [m for m in metric_ids if m > RUN_METRIC_ID]
    names = metric_names_by_id(session, ids)
    return {m: names.get(m, rule.metric) for m in metric_ids}


def _repeat_each(
    session: Session,
    rule: AlertRule,
    run_key: int,
    segment: int,
    rows: dict[int, AlertState],
    now_unix: float,
) -> int:
    condition = parse_condition(rule.condition)
    names = _names(session, rule, rows)
    owed = 0
    for metric_id, row in sorted(rows.items()):
        state = RuleState.from_dict(row.data)
        new, transitions = check_repeat(condition, state, now_unix, _seconds(rule))
        if not transitions:
            continue
        save_state(session, row, run_key, (rule.id, metric_id), segment, new)
        owed += record_alerts(
            session,
            run_key,
            segment,
            rule.id,
            len(rule.channels or ()),
            names[metric_id],
            transitions,
        )
    return owed


def _repeat_group(
    session: Session,
    rule: AlertRule,
    run_key: int,
    segment: int,
    rows: dict[int, AlertState],
    now_unix: float,
) -> int:
    """One repeat for a glob rule's group, its firing metrics' repeats as history."""
    group_row = rows.pop(GROUP_METRIC_ID, None)
    if group_row is None:
        return 0
    group = GroupState.from_dict(group_row.data)
    members = {m: RuleState.from_dict(row.data) for m, row in rows.items()}
    if not repeat_due(_group_clock(group, members.values()), now_unix, _seconds(rule)):
        return 0
    condition = parse_condition(rule.condition)
    names = _names(session, rule, rows)
    events: list[tuple[str, Transition]] = []
    for metric_id, state in sorted(members.items()):
        new, transitions = repeat_now(condition, state, now_unix)
        if not transitions:
            continue
        save_state(session, rows[metric_id], run_key, (rule.id, metric_id), segment, new)
        record_alerts(session, run_key, segment, rule.id, 0, names[metric_id], transitions)
        events.extend((names[metric_id], t) for t in transitions)
    if not events:
        return 0
    last_step = max(t.step for _, t in events)
    messages = advance(group, events, last_step, rule.group_wait_steps or 0, now_unix=now_unix)
    save_state(session, group_row, run_key, (rule.id, GROUP_METRIC_ID), segment, group)
    return record_group(
        session, run_key, segment, rule.id, len(rule.channels or ()), rule.metric, messages
    )
