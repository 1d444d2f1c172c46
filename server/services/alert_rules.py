"""Alert rules: create, list, edit, delete, preview on a stored run, test-send; history."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from sqlalchemy.orm import Session

from .. import errors
from ..alerts import channels, delivery, payloads
from ..alerts.conditions import StaleCondition, parse_condition
from ..alerts.replay import replay
from ..alerts.selectors import GLOB_CHARS, NameIndex, check_glob
from ..analytics import derived
from ..auth import Principal
from ..errors import Conflict, NotFound
from ..models import AlertRule, Run, utcnow
from ..schemas.alerts import (
    AlertOut,
    AlertRuleCreate,
    AlertRuleOut,
    AlertRuleUpdate,
    DeliveryOut,
    PreviewTransition,
    RulePreview,
    RunSelector,
    TestDelivery,
)
from ..storage import pyramid
from ..storage.alerts import (
    alert_history,
    forget_states,
    metrics_of_run,
    rule_by_id,
    rule_count,
    rule_named,
    rules_of_project,
    save_rule,
)
from ..storage.alerts import delete_rule as remove_rule
from ..storage.runs import lineage_of, segments_of
from .access import own_project, owned_run, owns
from .aliases import project_aliases
from .full_resolution import Budget, Reader
from .query import compute, encode_value, parse_expression

PREVIEW_MAX_METRICS = 256
PREVIEW_MAX_POINTS = 20_000_000
"""Stored points a preview replays at most (about 10 s of work)."""
MAX_PROJECT_RULES = 1_000
"""Rules a project may have: every batch of its runs is matched against each."""
MIN_REPEAT_SECONDS = 60
"""The shortest ``repeat_every_seconds`` by default (``NORMWATCH_ALERT_REPEAT_MIN_S``)."""


def to_out(rule: AlertRule, project: str, *, admin: bool = True) -> AlertRuleOut:
    """The rule as the API shows it; only ``admin`` viewers see webhook URL paths."""
    return AlertRuleOut(
        id=rule.id,
        project=project,
        name=rule.name,
        metric=rule.metric,
        condition=rule.condition,
        channels=[channels.mask_channel(c, show_path=admin) for c in rule.channels or []],
        runs=RunSelector(name=rule.run_name, tags=rule.run_tags or []),
        enabled=rule.enabled,
        repeat_every_steps=rule.repeat_every_steps,
        repeat_every_seconds=rule.repeat_every_seconds,
        group_wait_steps=rule.group_wait_steps,
        control=rule.control,
        created_at=rule.created_at,
        updated_at=rule.updated_at,
    )


def _channels(raw: list[dict[str, Any]], allow: Collection[str]) -> list[dict[str, Any]]:
    try:
        return [
            channels.validate_channel(c, allow, field=f"channels[{i}]") for i, c in enumerate(raw)
        ]
    except ValueError as exc:  # a channel URL refused, or not a channel at all
        raise errors.Invalid(str(exc)) from None


def _check_control(control: str | None, kind: str) -> None:
    if control is not None and kind == "stale":
        raise errors.Invalid(
            f"control: a stale rule fires when the trainer has gone quiet, so it would never "
            f"read a request to {control}; use a webhook channel to reach whoever restarts it"
        )


def _repeat_seconds(seconds: int, least: int) -> int | None:
    """A rule's ``repeat_every_seconds`` as stored (0: never, None); one shorter than
    ``least`` is refused (a clock repeat every few seconds is a flood, not a reminder)."""
    if seconds and seconds < least:
        raise errors.Invalid(f"repeat_every_seconds: at least {least} s, got {seconds}")
    return seconds or None


def create_rule(
    session: Session,
    who: Principal,
    body: AlertRuleCreate,
    allow: Collection[str],
    *,
    min_repeat_s: int = MIN_REPEAT_SECONDS,
) -> AlertRuleOut:
    project = own_project(who, body.project)
    have = rule_count(session, who.project_id)
    if have >= MAX_PROJECT_RULES:
        raise Conflict(f"project {project!r} has {have} rules, the most it may have")
    _check_metric(body.metric)
    _check_run_glob(body.runs.name)
    _check_control(body.control, body.condition.kind)
    rule = AlertRule(
        project_id=who.project_id,
        name=body.name,
        metric=body.metric,
        condition=body.condition.model_dump(mode="json"),
        channels=_channels(body.channels, allow),
        run_name=body.runs.name,
        run_tags=sorted(set(body.runs.tags)),
        enabled=body.enabled,
        repeat_every_steps=body.repeat_every_steps or None,
        repeat_every_seconds=_repeat_seconds(body.repeat_every_seconds or 0, min_repeat_s),
        group_wait_steps=body.group_wait_steps or None,
        control=body.control,
    )
    if not save_rule(session, rule):
        raise Conflict(f"project {project!r} already has a rule named {body.name!r}")
    return to_out(rule, project)


def list_rules(session: Session, who: Principal) -> list[AlertRuleOut]:
    rules = rules_of_project(session, who.project_id)
    return [to_out(r, who.project, admin=who.can("admin")) for r in rules]


def get_rule(session: Session, who: Principal, rule_id: int) -> AlertRule:
    rule = rule_by_id(session, rule_id)
    if rule is None:
        raise NotFound(f"no alert rule with id {rule_id}")
    owns(who, rule.project_id, "rule")
    return rule


def update_rule(
    session: Session,
    who: Principal,
    rule_id: int,
    body: AlertRuleUpdate,
    allow: Collection[str],
    *,
    min_repeat_s: int = MIN_REPEAT_SECONDS,
) -> AlertRuleOut:
    """Apply the given fields; a changed condition, metric or run selector starts afresh."""
    rule = get_rule(session, who, rule_id)
    name = body.name if body.name is not None else rule.name
    if name != rule.name and rule_named(session, who.project_id, name) is not None:
        raise Conflict(f"project {who.project!r} already has a rule named {name!r}")
    # Nothing may flush the edit before the savepoint below: a name taken meanwhile by a
    # concurrent edit must fail there, where it can be answered 409.
    with session.no_autoflush:
        restart = _apply(rule, body, allow, min_repeat_s)
    if not save_rule(session, rule):
        raise Conflict(f"project {who.project!r} already has a rule named {name!r}")
    if restart:
        forget_states(session, rule.id)
    return to_out(rule, who.project)


def _check_metric(metric: str) -> None:
    """A rule's metric is a name, a glob that can be matched or a derived-series
    expression that parses (`GlobError` and `Invalid` are answered 422)."""
    if derived.is_derived(metric):
        parse_expression(metric)
    elif not GLOB_CHARS.isdisjoint(metric):
        check_glob(metric)


def _check_run_glob(name_glob: str | None) -> None:
    if name_glob is not None:
        check_glob(name_glob, segmented=False)


def _apply(
    rule: AlertRule, body: AlertRuleUpdate, allow: Collection[str], min_repeat_s: int
) -> bool:
    """Set the fields ``body`` gives; True when the rule's evaluation must start afresh."""
    restart = False
    if body.name is not None:
        rule.name = body.name
    if body.metric is not None and body.metric != rule.metric:
        _check_metric(body.metric)
        rule.metric, restart = body.metric, True
    if body.condition is not None:
        condition = body.condition.model_dump(mode="json")
        restart = restart or condition != rule.condition
        rule.condition = condition
    if body.channels is not None:
        rule.channels = _channels(body.channels, allow)
    if body.runs is not None:
        _check_run_glob(body.runs.name)
        rule.run_name, rule.run_tags = body.runs.name, sorted(set(body.runs.tags))
        restart = True
    if body.enabled is not None:
        rule.enabled = body.enabled
    if body.repeat_every_steps is not None:
        rule.repeat_every_steps = body.repeat_every_steps or None
    if body.repeat_every_seconds is not None:
        rule.repeat_every_seconds = _repeat_seconds(body.repeat_every_seconds, min_repeat_s)
    if body.group_wait_steps is not None:
        rule.group_wait_steps = body.group_wait_steps or None
    if body.control is not None:
        rule.control = None if body.control == "none" else body.control
    _check_control(rule.control, str(rule.condition.get("kind")))
    rule.updated_at = utcnow()
    return restart


def delete_rule(session: Session, who: Principal, rule_id: int) -> None:
    remove_rule(session, get_rule(session, who, rule_id))


def preview_rule(session: Session, who: Principal, rule_id: int, run_id: str) -> RulePreview:
    """Where the rule would have fired on a stored run (latest lineage), from scratch."""
    rule = get_rule(session, who, rule_id)
    run = owned_run(session, who, run_id)[0]
    condition = parse_condition(rule.condition)
    if isinstance(condition, StaleCondition):
        raise errors.Invalid("a stale rule depends on arrival times, which cannot be replayed")
    transitions: list[PreviewTransition] = []
    if derived.is_derived(rule.metric):
        aliases = project_aliases(session, run.project_id)
        budget = Budget(points=PREVIEW_MAX_POINTS)
        reader = Reader(session, run, None, None, budget=budget, aliases=aliases)
        steps, values = compute(reader, parse_expression(rule.metric))
        series: Iterable[tuple[str, list[int], list[float]]] = [
            (rule.metric, steps.tolist(), values.tolist())
        ]
    else:
        series = _stored_series(session, run, rule.metric)
    count = 0
    for name, steps_list, values_list in series:
        count += 1
        repeat = rule.repeat_every_steps
        for t in replay(condition, steps_list, values_list, repeat_every_steps=repeat):
            transitions.append(
                PreviewTransition(
                    metric=name,
                    state=t.state,
                    step=t.step,
                    value=encode_value(t.value),
                    threshold=t.threshold,
                    reason=t.reason,
                    repeat=t.repeat,
                )
            )
    transitions.sort(key=lambda t: (t.step, t.metric))
    return RulePreview(run=run.id, metrics=count, transitions=transitions)


def _stored_series(
    session: Session, run: Run, pattern: str
) -> Iterator[tuple[str, list[int], list[float]]]:
    """Every stored point of the run's metrics matching ``pattern`` (directly, or through
    the project's aliases as ingest evaluates it), metric by metric."""
    logged = metrics_of_run(session, run.key)
    aliases = project_aliases(session, run.project_id)
    if aliases:
        watched = set(aliases.matching(pattern, [m.name for m in logged]).values())
        metrics = [m for m in logged if m.name in watched]
    else:
        matched = set(NameIndex([m.name for m in logged]).matching(pattern))
        metrics = [m for m in logged if m.name in matched]
    lineage = lineage_of(segments_of(session, run.key))
    replayed = 0
    for metric in metrics[:PREVIEW_MAX_METRICS]:
        stored = pyramid.read_all(session, run.key, metric.id, lineage, None, None)
        replayed += len(stored.steps)
        if replayed > PREVIEW_MAX_POINTS:
            raise errors.TooLarge(
                f"the rule matches more than {PREVIEW_MAX_POINTS:,} stored points of this run; "
                "preview it with a narrower metric"
            )
        yield metric.name, stored.steps.tolist(), stored.values.tolist()


def sample_notification(rule: AlertRule, project: str, base_url: str) -> payloads.Notification:
    """The firing notification a test send delivers: the rule's name and condition on a
    made-up run, so receivers can check their formatting and signature handling."""
    now = utcnow()
    return payloads.Notification(
        id=f"test-{rule.id}-{int(now.timestamp())}",
        state="firing",
        rule_id=str(rule.id),
        rule_name=rule.name,
        condition=rule.condition,
        run_id="test",
        run_name="(test notification)",
        project=project,
        metric=rule.metric,
        step=0,
        value=0.0,
        threshold=None,
        reason="test notification from normwatch",
        fired_at=now,
        url=base_url,
    )


def send_test(
    rule: AlertRule, project: str, base_url: str, deliverer: delivery.Deliverer
) -> list[TestDelivery]:
    """Deliver :func:`sample_notification` to each of the rule's channels once, now."""
    message = sample_notification(rule, project, base_url)
    out = []
    for channel in rule.channels or []:
        attempt = deliverer.deliver(channel, message)
        out.append(
            TestDelivery(
                channel=str(channel.get("type")),
                ok=attempt.ok,
                status_code=attempt.status_code,
                error=attempt.error,
                duration_ms=attempt.duration_s * 1000,
            )
        )
    return out


def list_alerts(
    session: Session,
    who: Principal,
    *,
    run_id: str | None = None,
    state: str | None = None,
    limit: int = 200,
    hidden: bool = False,
) -> list[AlertOut]:
    """The project's alert history, newest first, with each notification's delivery; one
    run's with ``run_id`` (`access.owned_run`'s refusals, ``hidden`` as it takes it).

    A delivery's last error is shown whole to admins only: it may quote the receiver's
    answer or a redirect's target. Others see its kind (``HTTP 500``, ``timed out``).
    """
    admin = who.can("admin")
    if run_id is not None:
        owned_run(session, who, run_id, hidden=hidden)
    rows = alert_history(session, who.project_id, run_id=run_id, state=state, limit=limit)
    out = []
    for alert, rule, run, notifications in rows:
        channels = rule.channels or []
        out.append(
            AlertOut(
                id=alert.id,
                rule={"id": rule.id, "name": rule.name},
                run={"id": run.id, "name": run.name},
                metric=alert.metric,
                state=alert.state,
                segment=alert.segment,
                step=alert.step,
                value=encode_value(math.nan if alert.value is None else alert.value),
                threshold=alert.threshold,
                reason=alert.reason,
                repeat=alert.repeat or 0,
                silenced_by=alert.silenced_by,
                members=alert.members,
                acked=None
                if alert.acked_at is None
                else {"at": alert.acked_at, "by": alert.acked_by, "comment": alert.ack_comment},
                worst=None if alert.worst is None else encode_value(alert.worst),
                created_at=alert.created_at,
                notifications=[
                    DeliveryOut(
                        channel=str(channels[n.channel_index].get("type", "?"))
                        if n.channel_index < len(channels)
                        else "?",
                        status=n.status,
                        attempts=n.attempts,
                        delivered_at=n.delivered_at,
                        last_error=n.last_error if admin else delivery.error_summary(n.last_error),
                    )
                    for n in notifications
                ],
            )
        )
    return out


def firing_now(session: Session, who: Principal) -> list[AlertOut]:
    """Per rule, run and metric whose latest alert is a firing one, the alert that opened
    the episode (the one to acknowledge, with its acknowledgement), carrying the latest
    repeat's number and worst value; newest first."""
    latest: dict[tuple[int, str, str], AlertOut] = {}
    opened: dict[tuple[int, str, str], AlertOut] = {}
    for alert in reversed(list_alerts(session, who, limit=2000)):
        key = (alert.rule["id"], alert.run["id"], alert.metric)
        latest[key] = alert
        if alert.state == "firing" and not alert.repeat:
            opened[key] = alert
    firing = []
    for key, alert in latest.items():
        if alert.state != "firing":
            continue
        opening = opened.get(key)
        if alert.repeat and opening is not None:
            alert = opening.model_copy(update={"repeat": alert.repeat, "worst": alert.worst})
        firing.append(alert)
    return sorted(firing, key=lambda a: a.id, reverse=True)
