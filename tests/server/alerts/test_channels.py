"""Alert channels in and out: validated and cleaned when a rule is saved, masked when shown."""

from __future__ import annotations

from typing import Any

import pytest

from normwatch.server.alerts.channels import mask_channel, validate_channel
from normwatch.server.alerts.targets import parse_allow
from tests.helpers.dns import DNS, resolver
from tests.helpers.receivers import WebhookReceiver

SECRET = "s3cret"
LOCAL = parse_allow("127.0.0.1")


def test_validate_channel_cleans() -> None:
    assert validate_channel(
        {"type": "webhook", "url": " https://hooks.example/x ", "secret": SECRET}, (), resolve=DNS
    ) == {"type": "webhook", "url": "https://hooks.example/x", "secret": SECRET}
    assert validate_channel(
        {"type": "slack", "url": "https://hooks.slack.com/services/T/B/X"}, (), resolve=DNS
    ) == {"type": "slack", "url": "https://hooks.slack.com/services/T/B/X"}


def test_validate_channel_accepts_names_that_do_not_resolve_now() -> None:
    channel = {"type": "webhook", "url": "https://hooks.invalid/x"}
    assert validate_channel(channel, (), resolve=resolver({})) == channel


@pytest.mark.parametrize(
    ("channel", "message"),
    [
        (
            {"url": "https://hooks.example/x"},
            r"channels\[1\]\.type: must be one of 'webhook', 'slack', 'alertmanager', 'pagerduty'",
        ),
        ({"type": "email", "url": "https://hooks.example/x"}, r"channels\[1\]\.type"),
        ({"type": "webhook"}, r"channels\[1\]\.url: required"),
        ({"type": "webhook", "url": ""}, r"channels\[1\]\.url: required"),
        ({"type": "webhook", "url": "hooks.example/x"}, r"channels\[1\]\.url: .*scheme"),
        ({"type": "webhook", "url": "http://10.0.0.8/x"}, r"channels\[1\]\.url: .*private"),
        ({"type": "webhook", "url": "https://internal.example/"}, r"channels\[1\]\.url: .*10\.1"),
        (
            {"type": "slack", "url": "https://hooks.example/services/T"},
            r"channels\[1\]\.url: Slack",
        ),
        ({"type": "slack", "url": "http://hooks.slack.com/services/T"}, r"channels\[1\]\.url: Sla"),
        (
            {"type": "slack", "url": "https://hooks.slack.com/services/T", "secret": "x"},
            r"channels\[1\]: unknown field\(s\) secret; a slack channel takes type, url",
        ),
        ({"type": "pagerduty"}, r"channels\[1\]\.routing_key: required"),
        (
            {"type": "pagerduty", "routing_key": "k", "severity": "high"},
            r"channels\[1\]\.severity: one of critical, error, warning, info",
        ),
        ({"type": "alertmanager"}, r"channels\[1\]\.url: required"),
        ({"type": "webhook", "url": "https://hooks.example/", "secret": ""}, r"\.secret: must"),
        ({"type": "webhook", "url": "https://hooks.example/", "secret": 5}, r"\.secret: must"),
        ({"type": "webhook", "url": "https://hooks.example/", "token": "x"}, r"unknown.*token"),
    ],
)
def test_validate_channel_names_the_field(channel: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_channel(channel, (), field="channels[1]", resolve=DNS)


def test_slack_channel_may_point_at_an_allow_listed_host(receiver: WebhookReceiver) -> None:
    url = receiver.url("/services/T/B/X")
    assert validate_channel({"type": "slack", "url": url}, LOCAL)["url"] == url
    with pytest.raises(ValueError, match="Slack"):
        validate_channel({"type": "slack", "url": url}, ())


@pytest.mark.parametrize(
    ("channel", "shown"),
    [
        (
            {"type": "webhook", "url": "https://hooks.example/x?token=abc&v=2", "secret": "s3"},
            {
                "type": "webhook",
                "url": "https://hooks.example/x?token=••••&v=••••",
                "secret": "••••",
            },
        ),
        (
            {"type": "webhook", "url": "https://bot:pw@hooks.example:8443/x#frag"},
            {"type": "webhook", "url": "https://bot:••••@hooks.example:8443/x#••••"},
        ),
        (
            {"type": "webhook", "url": "http://[::1]:8080/x"},
            {"type": "webhook", "url": "http://[::1]:8080/x"},
        ),
        (
            {"type": "slack", "url": "https://hooks.slack.com/services/T0/B0/XyZ"},
            {"type": "slack", "url": "https://hooks.slack.com/services/••••"},
        ),
        (
            {"type": "slack", "url": "http://127.0.0.1:9/hook/T0/B0/XyZ"},
            {"type": "slack", "url": "http://127.0.0.1:9/••••"},
        ),
        ({"type": "webhook", "url": "http://[bad/x"}, {"type": "webhook", "url": "••••"}),
    ],
)
def test_mask_channel(channel: dict[str, Any], shown: dict[str, Any]) -> None:
    original = dict(channel)
    assert mask_channel(channel) == shown
    assert channel == original
    assert mask_channel(shown) == shown  # masking a masked channel changes nothing
