"""The request bodies of two on-call tools, as JSON Schema, written from their documentation:
Alertmanager's API v2 ``postableAlerts`` (``api/v2/openapi.yaml`` of prometheus/alertmanager)
and PagerDuty's Events API v2 event (developer.pagerduty.com, "Send an Alert Event")."""

from __future__ import annotations

from typing import Any

_LABEL_SET: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_DATE_TIME: dict[str, Any] = {"type": "string", "format": "date-time"}

ALERTMANAGER_POSTABLE_ALERTS: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "labels": _LABEL_SET,
            "annotations": _LABEL_SET,
            "startsAt": _DATE_TIME,
            "endsAt": _DATE_TIME,
            "generatorURL": {"type": "string", "format": "uri"},
        },
        "required": ["labels"],
    },
}

_PAGERDUTY_PAYLOAD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "minLength": 1, "maxLength": 1024},
        "source": {"type": "string", "minLength": 1},
        "severity": {"enum": ["critical", "error", "warning", "info"]},
        "timestamp": _DATE_TIME,
        "component": {"type": "string"},
        "group": {"type": "string"},
        "class": {"type": "string"},
        "custom_details": {"type": "object"},
    },
    "required": ["summary", "source", "severity"],
    "additionalProperties": False,
}

PAGERDUTY_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "routing_key": {"type": "string", "minLength": 1},
        "event_action": {"enum": ["trigger", "acknowledge", "resolve"]},
        "dedup_key": {"type": "string", "minLength": 1, "maxLength": 255},
        "payload": _PAGERDUTY_PAYLOAD,
        "images": {"type": "array"},
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"href": {"type": "string"}, "text": {"type": "string"}},
                "required": ["href"],
            },
        },
        "client": {"type": "string"},
        "client_url": {"type": "string"},
    },
    "required": ["routing_key", "event_action"],
    "additionalProperties": False,
    "allOf": [
        {
            "if": {"properties": {"event_action": {"const": "trigger"}}},
            "then": {"required": ["payload"]},
            "else": {"required": ["dedup_key"]},
        }
    ],
}
