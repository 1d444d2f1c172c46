"""Alertmanager and PagerDuty channels: their bodies against each tool's documented schema,
delivered to a real receiver on 127.0.0.1, one identity from firing to resolve."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta

import jsonschema_rs
import pytest

from normwatch.server.alerts.channels import mask_channel, validate_channel
from normwatch.server.alerts.delivery import Deliverer
from normwatch.server.alerts.payloads import (
    alertmanager_payload,
    dedup_key,
    pagerduty_payload,
)
from normwatch.server.alerts.targets import parse_allow
from tests.helpers.notifications import notification
from tests.helpers.oncall_schemas import ALERTMANAGER_POSTABLE_ALERTS, PAGERDUTY_EVENT
from tests.helpers.receivers import WebhookReceiver

ALERTMANAGER = jsonschema_rs.validator_for(ALERTMANAGER_POSTABLE_ALERTS, validate_formats=True)
PAGERDUTY = jsonschema_rs.validator_for(PAGERDUTY_EVENT, validate_formats=True)
FIRING = notification(repeat=0, worst=7.25)
REPEAT = notification(repeat=3, worst=9.5, value=6.0)
RESOLVED = notification(state="resolved", value=3.9, worst=9.5, reason="3.9 no longer ≥ 5")


def test_the_schemas_refuse_what_the_tools_refuse() -> None:
    assert not ALERTMANAGER.is_valid([{"annotations": {}}])  # labels are required
    assert not ALERTMANAGER.is_valid([{"labels": {"step": 3}}])  # label values are strings
    assert not PAGERDUTY.is_valid({"routing_key": "k", "event_action": "trigger"})
    assert not PAGERDUTY.is_valid({"routing_key": "k", "event_action": "resolve"})


def test_alertmanager_alerts_keep_one_identity_and_end_when_resolved() -> None:
    bodies = [alertmanager_payload(n) for n in (FIRING, REPEAT, RESOLVED)]
    for body in bodies:
        ALERTMANAGER.validate(json.loads(json.dumps(body)))
    (firing,), (repeat,), (resolved,) = bodies
    assert (
        firing["labels"]
        == repeat["labels"]
        == resolved["labels"]
        == {
            "alertname": "grad norm 5+",
            "normwatch_rule": "rule_7",
            "project": "marin",
            "run": "32b-exp1295",
            "run_id": "run_42",
            "metric": "grad/norm/total",
            "source": "normwatch",
        }
    )
    starts = datetime.fromisoformat(firing["startsAt"])
    assert datetime.fromisoformat(firing["endsAt"]) - starts == timedelta(hours=24)
    assert resolved["startsAt"] == resolved["endsAt"] == firing["startsAt"]
    assert firing["annotations"]["summary"] == (
        "grad norm 5+: grad/norm/total = 7.25 at step 81,000 on marin/32b-exp1295"
    )
    assert (repeat["annotations"]["repeat"], repeat["annotations"]["worst"]) == ("3", "9.5")
    assert firing["generatorURL"].startswith("https://nw.example/runs/run_42?")


def test_pagerduty_triggers_and_resolves_one_incident_a_rule_and_run() -> None:
    events = [pagerduty_payload(n, "R0UTING", "critical") for n in (FIRING, REPEAT, RESOLVED)]
    for event in events:
        PAGERDUTY.validate(json.loads(json.dumps(event)))
    assert [e["event_action"] for e in events] == ["trigger", "trigger", "resolve"]
    assert {e["dedup_key"] for e in events} == {"normwatch/marin/rule-rule_7/run-run_42"}
    other_metric = dataclasses.replace(FIRING, metric="grad/norm/layers.3")
    assert dedup_key(other_metric) == dedup_key(FIRING)  # one rule and run: one incident
    payload = events[0]["payload"]
    assert (payload["severity"], payload["source"], payload["component"]) == (
        "critical",
        "marin/32b-exp1295",
        "grad/norm/total",
    )
    assert payload["custom_details"]["threshold"] == 5.0
    assert events[1]["payload"]["custom_details"]["repeat"] == 3
    assert "payload" not in events[2]


def test_channels_are_checked_and_their_keys_masked() -> None:
    local = parse_allow("127.0.0.1")
    pd = validate_channel({"type": "pagerduty", "routing_key": " R0UTING "}, local)
    assert pd == {
        "type": "pagerduty",
        "url": "https://events.pagerduty.com/v2/enqueue",
        "routing_key": "R0UTING",
        "severity": "error",
    }
    assert mask_channel(pd)["routing_key"] == "••••"
    with pytest.raises(ValueError, match="refused|private|not allowed"):
        validate_channel({"type": "alertmanager", "url": "http://10.0.0.7:9093/api/v2/alerts"}, ())


def test_both_delivered_to_a_real_receiver(receiver: WebhookReceiver, deliverer: Deliverer) -> None:
    manager = {"type": "alertmanager", "url": receiver.url("/api/v2/alerts")}
    pager = {
        "type": "pagerduty",
        "url": receiver.url("/v2/enqueue"),
        "routing_key": "R0UTING",
        "severity": "warning",
    }
    for n in (FIRING, RESOLVED):
        assert deliverer.deliver(manager, n).ok
        assert deliverer.deliver(pager, n).ok
    paths = [r.path for r in receiver.received]
    assert paths == ["/api/v2/alerts", "/v2/enqueue"] * 2
    bodies = [json.loads(r.body) for r in receiver.received]
    for body in bodies[0::2]:
        ALERTMANAGER.validate(body)
    for body in bodies[1::2]:
        PAGERDUTY.validate(body)
    assert [b["event_action"] for b in bodies[1::2]] == ["trigger", "resolve"]
    assert all("x-normwatch-signature" not in r.headers for r in receiver.received)
