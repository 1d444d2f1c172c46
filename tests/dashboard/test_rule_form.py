"""The rule form: its fields, the request bodies its values make, the messages of its
validation, and what it shows for each kind and mode."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from normwatch.dashboard.pages.rule_form import (
    CONDITION_FIELDS,
    CREATE_LABEL,
    FIELDS,
    KEEP_URL_HINT,
    KIND_FIELDS,
    NEW_TITLE,
    SAVE_LABEL,
    URL_HINT,
    Editing,
    defaults,
    explain,
    field_id,
    form,
    show_fields,
    show_mode,
    to_create,
    to_update,
    values_of,
)
from normwatch.server.schemas.alerts import AlertRuleOut

from .components import find

NOW = datetime(2025, 6, 1, tzinfo=UTC)
HIDDEN = {"display": "none"}


def values(**changes: Any) -> dict[str, Any]:
    """A fresh form's values by field id, with ``changes`` (``rule_value=5``: ``rule-value``)."""
    fresh = dict(zip(FIELDS, defaults(), strict=True))
    return {**fresh, **{k.replace("_", "-"): v for k, v in changes.items()}}


def rule_out(**fields: Any) -> AlertRuleOut:
    defaults_: dict[str, Any] = {
        "id": 4,
        "project": "marin",
        "name": "grad-high",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 3},
        "channels": [{"type": "slack", "url": "https://hooks.slack.com/services/••••"}],
        "runs": {"name": "32b-*", "tags": ["32b"]},
        "enabled": True,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return AlertRuleOut.model_validate({**defaults_, **fields})


def test_fields_and_a_fresh_forms_values() -> None:
    assert FIELDS == (
        "rule-name",
        "rule-metric",
        "rule-kind",
        "rule-op",
        "rule-value",
        "rule-factor",
        "rule-window",
        "rule-per-1k-steps",
        "rule-within-steps",
        "rule-seconds",
        "rule-resolve-value",
        "rule-for-steps",
        "rule-resolve-steps",
        "rule-cooldown-steps",
        "rule-repeat-every-steps",
        "rule-repeat-every-seconds",
        "rule-group-wait-steps",
        "rule-channel-type",
        "rule-channel-url",
        "rule-channel-secret",
        "rule-run-name",
    )
    assert values() == {
        **dict.fromkeys(FIELDS),
        "rule-metric": "grad/norm/total",
        "rule-kind": "threshold",
        "rule-op": ">",
        "rule-resolve-steps": 10,  # hysteresis and repeats on, as an on-call team sets them
        "rule-repeat-every-steps": 1000,
        "rule-repeat-every-seconds": 3600,  # and by the clock, should the trainer hang
        "rule-group-wait-steps": 5,
        "rule-channel-type": "webhook",
        "rule-run-name": "*",
    }
    assert field_id("per_1k_steps") == "rule-per-1k-steps"


def test_form_has_a_control_for_every_field() -> None:
    shown = form()
    ids = {props["id"] for props in find(shown) if isinstance(props.get("id"), str)}
    assert set(FIELDS) <= ids
    assert {f"{field_id(n)}-field" for n in CONDITION_FIELDS} <= ids
    (store,) = find(shown, "Store", id="rule-editing")
    assert store["data"] is None


def test_values_of_a_rule_load_its_fields_but_no_channel_url_or_secret() -> None:
    loaded = dict(zip(FIELDS, values_of(rule_out()), strict=True))
    assert loaded == values(
        rule_name="grad-high",
        rule_op=">=",
        rule_value=5.0,
        rule_for_steps=3,
        rule_resolve_steps=None,  # the kind's default
        rule_repeat_every_steps=None,
        rule_repeat_every_seconds=None,
        rule_group_wait_steps=None,
        rule_channel_type="slack",
        rule_run_name="32b-*",
    )
    plain = rule_out(condition={"kind": "stale", "seconds": 600.0}, channels=[])
    assert dict(zip(FIELDS, values_of(plain), strict=True)) == values(
        rule_name="grad-high",
        rule_kind="stale",
        rule_seconds=600.0,
        rule_run_name="32b-*",
        rule_resolve_steps=None,
        rule_repeat_every_steps=None,
        rule_repeat_every_seconds=None,
        rule_group_wait_steps=None,
    )
    hysteresis = rule_out(
        condition={"kind": "threshold", "op": ">=", "value": 5.0, "resolve_value": 4.0},
        repeat_every_steps=500,
    )
    loaded = dict(zip(FIELDS, values_of(hysteresis), strict=True))
    assert (loaded["rule-resolve-value"], loaded["rule-repeat-every-steps"]) == (4.0, 500)


def test_to_create_sends_only_the_kinds_fields() -> None:
    body = to_create(
        values(
            rule_name=" grad-spike ",
            rule_kind="spike",
            rule_factor=3,
            rule_value=5,  # a threshold's field: not sent for a spike
            rule_window="",
            rule_channel_url=" https://hooks.example/x ",
            rule_channel_secret="s3cret",
            rule_run_name="",
        )
    )
    assert body.model_dump(exclude_unset=True) == {
        "name": "grad-spike",
        "metric": "grad/norm/total",
        "condition": {"kind": "spike", "factor": 3.0, "resolve_steps": 10},
        "channels": [{"type": "webhook", "url": "https://hooks.example/x", "secret": "s3cret"}],
        "runs": {"name": "*"},
        "repeat_every_steps": 1000,
        "repeat_every_seconds": 3600,
        "group_wait_steps": 5,
    }


def test_to_create_without_a_url_makes_no_channel() -> None:
    body = to_create(values(rule_name="grad-high", rule_value=5, rule_channel_secret="unused"))
    assert body.model_dump(exclude_unset=True) == {
        "name": "grad-high",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">", "value": 5.0, "resolve_steps": 10},
        "channels": [],
        "runs": {"name": "*"},
        "repeat_every_steps": 1000,
        "repeat_every_seconds": 3600,
        "group_wait_steps": 5,
    }
    never = to_create(
        values(
            rule_name="once",
            rule_value=5,
            rule_repeat_every_steps="",
            rule_repeat_every_seconds=None,
        )
    )
    assert (never.repeat_every_steps, never.repeat_every_seconds) == (0, 0)


def test_to_update_keeps_channels_for_a_blank_url_and_the_runs_tags() -> None:
    current = rule_out()
    same = to_update(values(rule_name="grad-high", rule_value=7, rule_run_name="32b-*"), current)
    assert same.model_dump(exclude_unset=True) == {
        "name": "grad-high",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">", "value": 7.0, "resolve_steps": 10},
        "repeat_every_steps": 1000,
        "repeat_every_seconds": 3600,
        "group_wait_steps": 5,
    }
    moved = to_update(
        values(
            rule_name="grad-higher",
            rule_value=9,
            rule_run_name="64b-*",
            rule_channel_type="slack",
            rule_channel_url="https://hooks.slack.com/services/T/B/X",
        ),
        current,
    )
    assert moved.model_dump(exclude_unset=True) == {
        "name": "grad-higher",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">", "value": 9.0, "resolve_steps": 10},
        "repeat_every_steps": 1000,
        "repeat_every_seconds": 3600,
        "group_wait_steps": 5,
        "channels": [{"type": "slack", "url": "https://hooks.slack.com/services/T/B/X"}],
        "runs": {"name": "64b-*", "tags": ["32b"]},
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rule_name": "grad-high"}, "condition.threshold.value: Field required"),
        (
            {"rule_kind": "stale", "rule_seconds": -1},
            "name: String should have at least 1 character; "
            "condition.stale.seconds: Input should be greater than 0",
        ),
        (
            {"rule_name": "x", "rule_value": "five"},
            "condition.threshold.value: Input should be a valid number, "
            "unable to parse string as a number",
        ),
        (
            {"rule_name": "x", "rule_kind": ["threshold"]},
            "condition: Input tag '['threshold']' found using 'kind' does not match any of the "
            "expected tags: 'threshold', 'non_finite', 'spike', 'slope', 'forecast', 'stale'",
        ),
    ],
)
def test_validation_messages_name_each_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        to_create(values(**changes))
    assert explain(refused.value) == message


def test_explain_other_errors_by_their_message() -> None:
    assert explain(ValueError("no alert rule with id 5")) == "no alert rule with id 5"


@pytest.mark.parametrize("kind", sorted(KIND_FIELDS))
def test_show_fields_shows_the_kinds_fields(kind: str) -> None:
    shown = [n for n, style in zip(CONDITION_FIELDS, show_fields(kind), strict=True) if not style]
    assert shown == [n for n in CONDITION_FIELDS if n in KIND_FIELDS[kind]]
    assert all(style in ({}, HIDDEN) for style in show_fields(kind))


def test_show_fields_before_a_kind_is_picked_and_of_an_unknown_kind() -> None:
    for kind in (None, ""):
        assert show_fields(kind) == show_fields("threshold")
    for unknown in ("sudden", ["spike"], 5):
        assert show_fields(unknown) == [HIDDEN] * len(CONDITION_FIELDS)
    assert show_fields("stale") == [HIDDEN] * 6 + [{}] + [HIDDEN] * 4


def test_show_mode() -> None:
    assert show_mode(None) == (CREATE_LABEL, HIDDEN, NEW_TITLE, URL_HINT)
    assert show_mode(Editing(4, "grad-high")) == (
        SAVE_LABEL,
        {},
        "Edit rule grad-high",
        KEEP_URL_HINT,
    )


@pytest.mark.parametrize(
    ("store", "editing"),
    [
        ({"id": 4, "name": "grad-high"}, Editing(4, "grad-high")),
        (None, None),
        ({}, None),
        ({"id": "4", "name": "grad-high"}, None),
        ({"id": True, "name": "grad-high"}, None),
        ({"id": 4}, None),
        ([4, "grad-high"], None),
    ],
)
def test_editing_from_store(store: Any, editing: Editing | None) -> None:
    assert Editing.from_store(store) == editing


def test_editing_round_trip() -> None:
    editing = Editing(4, "grad-high")
    assert editing.to_store() == {"id": 4, "name": "grad-high"}
    assert Editing.from_store(editing.to_store()) == editing


def test_on_call_channels_from_the_form() -> None:
    paged = to_create(
        values(
            rule_name="paged",
            rule_value=5,
            rule_channel_type="pagerduty",
            rule_channel_secret="R0UTING",
        )
    )
    assert [c.get("type") for c in paged.channels] == ["pagerduty"]
    assert paged.channels[0] == {"type": "pagerduty", "routing_key": "R0UTING"}
    routed = to_create(
        values(
            rule_name="routed",
            rule_value=5,
            rule_channel_type="alertmanager",
            rule_channel_url="http://127.0.0.1:9093/api/v2/alerts",
            rule_channel_secret="ignored",
        )
    )
    assert routed.channels == [
        {"type": "alertmanager", "url": "http://127.0.0.1:9093/api/v2/alerts"}
    ]
    assert (
        to_create(values(rule_name="x", rule_value=5, rule_channel_type="pagerduty")).channels == []
    )
