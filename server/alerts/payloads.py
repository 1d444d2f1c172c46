"""What a notification says: the webhook's JSON and Slack's message, and the dashboard link
they carry."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, urlencode

__all__ = [
    "ALERTMANAGER_ACTIVE",
    "Notification",
    "PAGERDUTY_SEVERITIES",
    "alertmanager_payload",
    "dashboard_link",
    "dedup_key",
    "encode_body",
    "encode_number",
    "pagerduty_payload",
    "slack_payload",
    "webhook_payload",
]


State = Literal["firing", "resolved"]


@dataclass(frozen=True)
class Notification:
    """One state change of one rule on one run's metric, as it is sent out.

    ``id`` is the idempotency key: the same on every retry, so receivers can drop repeats.
    ``fired_at`` is when this state change happened (a naive time is taken as UTC).
    ``url`` is the dashboard deep link, usually from :func:`dashboard_link`. ``repeat`` is 0
    for a state change and n for the n-th notification of a still-firing alert; ``worst``
    the value furthest past the threshold since it fired (None when that means nothing).
    """

    id: str
    state: State
    rule_id: str
    rule_name: str
    condition: Mapping[str, Any] = field(hash=False)
    run_id: str
    run_name: str
    project: str
    metric: str
    step: int
    value: float | None
    threshold: float | None
    reason: str
    fired_at: datetime
    url: str
    repeat: int = 0
    worst: float | None = None
    members: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    """A glob rule's group message: each metric's ``metric``, ``state``, ``step``, ``value``."""
    rule_metric: str = ""
    """The rule's own metric, when it differs from ``metric``: a canonical name that the
    run logged under an alias (``metric``), or a glob."""

    def __post_init__(self) -> None:
        if self.state not in ("firing", "resolved"):
            raise ValueError(f"state: must be 'firing' or 'resolved', got {self.state!r}")


def encode_number(value: float | None) -> float | str | None:
    """JSON has no NaN or Infinity: spell them ``"NaN"``/``"Infinity"``/``"-Infinity"``."""
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return encode_number(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def dashboard_link(base_url: str, run_id: str, metric: str, step: int, *, window: int = 200) -> str:
    """The run page zoomed on ``[step - window, step + window]`` with ``metric`` on the left.

    >>> dashboard_link("https://nw.example/", "r1", "grad/norm/total", 81000, window=100)
    'https://nw.example/runs/r1?left=grad%2Fnorm%2Ftotal&start=80900&end=81100'
    """
    query = urlencode({"left": metric, "start": max(0, step - window), "end": step + window})
    return f"{base_url.rstrip('/')}/runs/{quote(run_id, safe='')}?{query}"


def webhook_payload(notification: Notification) -> dict[str, Any]:
    """The generic webhook body: what changed, on which run, and where to look."""
    n = notification
    return {
        "id": n.id,
        "state": n.state,
        "rule": {
            "id": n.rule_id,
            "name": n.rule_name,
            "metric": n.rule_metric or n.metric,
            "condition": _json_safe(n.condition),
        },
        "run": {"id": n.run_id, "name": n.run_name, "project": n.project},
        "metric": n.metric,
        "step": n.step,
        "value": encode_number(n.value),
        "threshold": encode_number(n.threshold),
        "reason": n.reason,
        "url": n.url,
        "fired_at": _iso(n.fired_at),
        "repeat": n.repeat,
        "worst": encode_number(n.worst),
        **({"alerts": [dict(m) for m in n.members]} if n.members else {}),
    }


def _shown(value: float | None) -> str:
    if value is None:
        return "—"
    encoded = encode_number(value)
    return encoded if isinstance(encoded, str) else f"{value:.6g}"


def _mrkdwn(text: str, limit: int = 2000) -> str:
    """Slack reads ``&``, ``<`` and ``>`` as markup; names come from users."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped if len(escaped) <= limit else escaped[: limit - 1] + "…"


def slack_payload(notification: Notification) -> dict[str, Any]:
    """A Slack incoming-webhook body: ``text`` for notifications, ``blocks`` for the message."""
    n = notification
    firing = n.state == "firing"
    icon = ":red_circle:" if firing else ":large_green_circle:"
    word = "Firing" if firing else "Resolved"
    if firing and n.repeat:
        word = f"Still firing (repeat {n.repeat})"
    value, threshold = _shown(n.value), _shown(n.threshold)
    run = f"{n.project}/{n.run_name}"
    metric_code = _mrkdwn(n.metric).replace("`", "'")  # a backtick would end the code span
    summary = (
        f"{icon} {word}: {_mrkdwn(n.rule_name, 200)} — {_mrkdwn(n.metric, 200)} = {value} "
        f"(threshold {threshold}) at step {n.step:,} on {_mrkdwn(run, 200)}"
    )
    title = f"{icon} {word}: {n.rule_name}"
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": title[:150], "emoji": True},
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(n.reason) or summary}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Run*\n{_mrkdwn(run)}"},
                {"type": "mrkdwn", "text": f"*Metric*\n`{metric_code}`"},
                {"type": "mrkdwn", "text": f"*Value*\n{value}"},
                {"type": "mrkdwn", "text": f"*Threshold*\n{threshold}"},
                {"type": "mrkdwn", "text": f"*Step*\n{n.step:,}"},
                {"type": "mrkdwn", "text": f"*State*\n{icon} {word}"},
            ],
        },
    ]
    if n.worst is not None:
        fields = blocks[2]["fields"]
        fields.append({"type": "mrkdwn", "text": f"*Worst since firing*\n{_shown(n.worst)}"})
    if n.members:
        blocks.insert(3, {"type": "section", "text": {"type": "mrkdwn", "text": _member_lines(n)}})
    if n.url:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open in normwatch"},
                        "url": n.url,
                        "style": "danger" if firing else "primary",
                    }
                ],
            }
        )
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"{word} at {_iso(n.fired_at)} · {n.id}"}],
        }
    )
    text = f"{summary}. <{n.url}|Open in normwatch>" if n.url else summary
    return {"text": text, "blocks": blocks}


def encode_body(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes sent and signed: compact UTF-8 JSON, never a bare NaN."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


# --- on-call tools ----------------------------------------------------------------------

ALERTMANAGER_ACTIVE = timedelta(hours=24)
"""A firing alert's ``endsAt`` in Alertmanager: this long after it was sent (a repeat
renews it, the resolve ends it), so an alert whose resolve never comes does not stay
active for ever."""

PAGERDUTY_SEVERITIES = ("critical", "error", "warning", "info")


_SHOWN_MEMBERS = 20


def _member_lines(n: Notification) -> str:
    """A group's metrics, one a line (the first `_SHOWN_MEMBERS`, firing first)."""
    ordered = sorted(n.members, key=lambda m: (m.get("state") != "firing", str(m.get("metric"))))
    lines = [
        f"{':red_circle:' if m.get('state') == 'firing' else ':large_green_circle:'} "
        f"`{_mrkdwn(str(m.get('metric'))).replace('`', chr(39))}` = {m.get('value')} "
        f"(step {m.get('step'):,})"
        for m in ordered[:_SHOWN_MEMBERS]
    ]
    if len(ordered) > _SHOWN_MEMBERS:
        lines.append(f"… and {len(ordered) - _SHOWN_MEMBERS} more")
    return "\n".join(lines)[:3000]


def _labels(n: Notification) -> dict[str, str]:
    """The alert's identity in Alertmanager: the same for its firing, repeats and resolve."""
    return {
        "alertname": n.rule_name,
        "normwatch_rule": n.rule_id,
        "project": n.project,
        "run": n.run_name,
        "run_id": n.run_id,
        "metric": n.metric,
        "source": "normwatch",
    }


def alertmanager_payload(n: Notification) -> list[dict[str, Any]]:
    """A body for Alertmanager's ``POST /api/v2/alerts`` (``postableAlerts``): one alert
    whose labels name the rule, run and metric, so that Alertmanager groups, routes, silences
    and inhibits it like its own. Firing: active for `ALERTMANAGER_ACTIVE` from now;
    resolved: ending now (``startsAt`` = ``endsAt``: Alertmanager keeps the earlier start
    of the alert it holds)."""
    at = n.fired_at if n.fired_at.tzinfo is not None else n.fired_at.replace(tzinfo=UTC)
    ends = at + ALERTMANAGER_ACTIVE if n.state == "firing" else at
    annotations = {
        "summary": f"{n.rule_name}: {n.metric} = {_shown(n.value)} at step {n.step:,} "
        f"on {n.project}/{n.run_name}",
        "description": n.reason,
        "value": _shown(n.value),
        "threshold": _shown(n.threshold),
        "step": str(n.step),
        "dashboard": n.url,
    }
    if n.worst is not None:
        annotations["worst"] = _shown(n.worst)
    if n.repeat:
        annotations["repeat"] = str(n.repeat)
    alert: dict[str, Any] = {
        "labels": _labels(n),
        "annotations": annotations,
        "startsAt": _iso(at),
        "endsAt": _iso(ends),
    }
    if n.url:
        alert["generatorURL"] = n.url
    if not n.members:
        return [alert]
    # A group: one alert a metric, each ending when that metric resolved (Alertmanager
    # groups them again by its own rules).
    out = []
    for member in n.members:
        resolved = member.get("state") == "resolved"
        one = {
            **alert,
            "labels": {**alert["labels"], "metric": str(member.get("metric"))},
            "annotations": {
                **annotations,
                "value": str(member.get("value")),
                "step": str(member.get("step")),
            },
            "endsAt": _iso(at) if resolved or n.state == "resolved" else alert["endsAt"],
        }
        out.append(one)
    return out


def dedup_key(n: Notification) -> str:
    """PagerDuty's incident key: one a rule and run, stable across firing, repeats, resolve
    and restarts of the service."""
    return f"normwatch/{n.project}/rule-{n.rule_id}/run-{n.run_id}"[:255]


def pagerduty_payload(n: Notification, routing_key: str, severity: str = "error") -> dict[str, Any]:
    """An Events API v2 event: ``trigger`` for a firing alert (and its repeats, which the
    incident collects), ``resolve`` for a resolved one, both under `dedup_key`."""
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "trigger" if n.state == "firing" else "resolve",
        "dedup_key": dedup_key(n),
        "client": "normwatch",
    }
    if n.url:
        event["client_url"] = n.url
        event["links"] = [{"href": n.url, "text": "Open in normwatch"}]
    if n.state == "firing":
        details = {
            "metric": n.metric,
            "step": n.step,
            "value": encode_number(n.value),
            "threshold": encode_number(n.threshold),
            "reason": n.reason,
            "repeat": n.repeat,
            "worst": encode_number(n.worst),
            "condition": _json_safe(n.condition),
            **({"members": [dict(m) for m in n.members]} if n.members else {}),
        }
        summary = (
            f"{n.rule_name}: {n.metric} = {_shown(n.value)} (threshold {_shown(n.threshold)}) "
            f"at step {n.step:,} on {n.project}/{n.run_name}"
        )
        event["payload"] = {
            "summary": summary[:1024],
            "source": f"{n.project}/{n.run_name}",
            "severity": severity,
            "timestamp": _iso(n.fired_at),
            "component": n.metric,
            "group": n.project,
            "class": str(n.condition.get("kind", "alert")),
            "custom_details": details,
        }
    return event
