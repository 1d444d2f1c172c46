"""Notification bodies: webhook JSON and Slack messages, and the dashboard link they carry."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import pytest

from normwatch.server.alerts.payloads import (
    dashboard_link,
    encode_body,
    slack_payload,
    webhook_payload,
)
from tests.helpers.notifications import notification


def test_missing_value_and_threshold_are_null() -> None:
    body = webhook_payload(notification(value=None, threshold=None, state="resolved"))
    assert body["value"] is None and body["threshold"] is None and body["state"] == "resolved"
    assert json.loads(encode_body(body)) == body


def test_naive_fired_at_is_utc() -> None:
    body = webhook_payload(notification(fired_at=datetime(2024, 5, 1, 12, 30)))
    assert body["fired_at"] == "2024-05-01T12:30:00Z"


def test_notification_state_is_checked() -> None:
    with pytest.raises(ValueError, match="state"):
        notification(state="pending")


def slack_texts(body: dict[str, Any]) -> str:
    return json.dumps(body["blocks"], ensure_ascii=False)


def test_slack_resolved_is_green_and_non_finite_readable() -> None:
    body = slack_payload(notification(state="resolved", value=math.nan, threshold=None))
    assert body["text"].startswith(":large_green_circle: Resolved:")
    assert "NaN" in body["text"]
    blocks = slack_texts(body)
    assert "*Value*\\nNaN" in blocks and "*Threshold*\\n—" in blocks
    assert body["blocks"][3]["elements"][0]["style"] == "primary"
    encode_body(body)  # strict JSON: raises on a bare NaN


def test_dashboard_link() -> None:
    assert (
        dashboard_link("http://127.0.0.1:8000/", "r/1", "params/norm/w", 50, window=100)
        == "http://127.0.0.1:8000/runs/r%2F1?left=params%2Fnorm%2Fw&start=0&end=150"
    )


def test_a_repeat_says_so_with_the_worst_value_so_far() -> None:
    repeat = notification(state="firing", value=6.2, threshold=5.0, repeat=2, worst=math.inf)
    body = webhook_payload(repeat)
    assert (body["repeat"], body["worst"]) == (2, "Infinity")
    assert json.loads(encode_body(body)) == body
    slack = slack_payload(repeat)
    assert slack["text"].startswith(":red_circle: Still firing (repeat 2):")
    assert "*Worst since firing*\\nInfinity" in slack_texts(slack)
    first = webhook_payload(notification(state="firing"))
    assert (first["repeat"], first["worst"]) == (0, None)
    assert "Worst since firing" not in slack_texts(slack_payload(notification(state="firing")))
