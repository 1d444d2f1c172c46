"""What the rules page shows: conditions and channels in a line, the rules table, test-send
results and a preview."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from normwatch.dashboard.figures import FIRING_RED, Line
from normwatch.dashboard.pages.rule_views import (
    NO_RULES,
    channels_text,
    condition_text,
    preview_result,
    repeats_text,
    rule_options,
    rules_table,
    send_test_text,
)
from normwatch.server.schemas import alerts as alert_bodies
from normwatch.server.schemas.alerts import AlertRuleOut, RulePreview

from .components import find, header, rows, text, tree

NOW = datetime(2025, 6, 1, tzinfo=UTC)
HOOK = {"type": "webhook", "url": "https://hooks.example/••••", "secret": "••••"}
SLACK = {"type": "slack", "url": "https://hooks.slack.com/services/••••"}


@pytest.mark.parametrize(
    ("condition", "said"),
    [
        ({"kind": "threshold", "op": ">", "value": 5.0, "for_steps": 1}, "threshold: value > 5"),
        (
            {"kind": "threshold", "op": "<=", "value": 0.25, "for_steps": 3, "cooldown_steps": 100},
            "threshold: value <= 0.25 (for 3 steps, cooldown 100)",
        ),
        (
            {
                "kind": "threshold",
                "op": ">=",
                "value": 5.0,
                "resolve_value": 4.0,
                "resolve_steps": 10,
            },
            "threshold: value >= 5 (resolves past 4, resolves after 10 calm steps)",
        ),
        ({"kind": "non_finite", "for_steps": 1}, "non_finite: value is NaN or ±Inf"),
        ({"kind": "spike", "factor": 2.0, "window": 50}, "spike: value > 2 × median of last 50"),
        (
            {"kind": "slope", "op": ">", "per_1k_steps": 0.5, "window": 100},
            "slope: slope per 1k steps > 0.5 over 100 points",
        ),
        (
            {"kind": "forecast", "op": ">=", "value": 10.0, "within_steps": 2000, "window": 100},
            "forecast: trend reaches >= 10 within 2,000 steps",
        ),
        ({"kind": "stale", "seconds": 600.0, "for_steps": 5}, "stale: no new step for 600 s"),
        ({"kind": "sudden"}, "sudden"),
        ({}, "?"),
    ],
)
def test_condition_text(condition: dict[str, Any], said: str) -> None:
    assert condition_text(condition) == said


def test_channels_text_shows_only_what_the_service_masked() -> None:
    assert channels_text([]) == "—"
    assert channels_text([HOOK, SLACK]) == (
        "webhook: https://hooks.example/•••• (signed); slack: https://hooks.slack.com/services/••••"
    )


def rule_out(rule_id: int, name: str, **fields: Any) -> AlertRuleOut:
    defaults: dict[str, Any] = {
        "id": rule_id,
        "project": "marin",
        "name": name,
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">", "value": 5.0, "for_steps": 1},
        "channels": [],
        "runs": {"name": "*", "tags": []},
        "enabled": True,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return AlertRuleOut.model_validate({**defaults, **fields})


RULES = [
    rule_out(3, "grad-high", channels=[HOOK]),
    rule_out(
        9,
        "nan-watch",
        metric="grad/norm/**",
        condition={"kind": "non_finite"},
        runs={"name": "32b-*", "tags": ["32b", "ep"]},
        enabled=False,
    ),
]


def test_rules_table_for_a_reader() -> None:
    table = rules_table(RULES, admin=False)
    assert tree(table)["props"]["className"] == "runs rules"
    assert header(table) == ["name", "metric", "condition", "runs", "channels", "enabled"]
    assert rows(table) == [
        [
            "grad-high",
            "grad/norm/total",
            "threshold: value > 5",
            "*",
            "webhook: https://hooks.example/•••• (signed)",
            "enabled",
        ],
        [
            "nan-watch",
            "grad/norm/**",
            "non_finite: value is NaN or ±Inf",
            "32b-* tags 32b, ep",
            "—",
            "disabled",
        ],
    ]
    assert [s["className"] for s in find(table, "Span")] == [
        "badge badge-resolved",
        "badge badge-off",
    ]
    assert find(table, "Button") == []


def test_rules_table_for_an_admin_has_each_rules_buttons() -> None:
    table = rules_table(RULES, admin=True)
    assert header(table)[-1] == "actions"
    buttons = [(b["id"], b["children"], b["className"]) for b in find(table, "Button")]
    assert buttons == [
        ({"type": "rule-edit", "rule": 3}, "Edit", "small"),
        ({"type": "rule-toggle", "rule": 3}, "Disable", "small"),
        ({"type": "rule-test", "rule": 3}, "Send test", "small"),
        ({"type": "rule-delete", "rule": 3}, "Delete", "small danger"),
        ({"type": "rule-edit", "rule": 9}, "Edit", "small"),
        ({"type": "rule-toggle", "rule": 9}, "Enable", "small"),
        ({"type": "rule-test", "rule": 9}, "Send test", "small"),
        ({"type": "rule-delete", "rule": 9}, "Delete", "small danger"),
    ]
    assert {b["n_clicks"] for b in find(table, "Button")} == {0}


@pytest.mark.parametrize(
    ("steps", "seconds", "said"),
    [
        (None, None, ""),
        (1000, None, "repeats every 1,000 steps"),
        (None, 3600, "repeats every 1 h"),
        (1000, 1800, "repeats every 1,000 steps or 30 min"),
        (None, 90, "repeats every 90 s"),
        (None, 7 * 86_400, "repeats every 7 d"),
    ],
)
def test_repeats_text(steps: int | None, seconds: int | None, said: str) -> None:
    rule = rule_out(1, "r", repeat_every_steps=steps, repeat_every_seconds=seconds)
    assert repeats_text(rule) == said
    assert rows(rules_table([rule], admin=False))[0][2] == "; ".join(
        t for t in ("threshold: value > 5", said) if t
    )


def test_rules_table_without_rules() -> None:
    for admin in (False, True):
        empty = tree(rules_table([], admin=admin))
        assert (empty["type"], empty["props"]) == (
            "P",
            {"children": NO_RULES, "className": "empty"},
        )


def test_rule_options() -> None:
    assert rule_options(RULES) == [
        {"label": "grad-high", "value": 3},
        {"label": "nan-watch", "value": 9},
    ]


def sent(
    channel: str, ok: bool, status: int | None, error: str | None = None
) -> alert_bodies.TestDelivery:
    return alert_bodies.TestDelivery(
        channel=channel, ok=ok, status_code=status, error=error, duration_ms=3.0
    )


def test_send_test_text() -> None:
    assert send_test_text([]) == "This rule has no channels to test."
    results = [
        sent("webhook", True, 200),
        sent("slack", False, 404, "HTTP 404"),
        sent("webhook", False, None, "timeout"),
    ]
    assert send_test_text(results) == (
        "Test send: webhook: ok (HTTP 200); slack: failed (HTTP 404) — HTTP 404; "
        "webhook: failed — timeout"
    )


def preview(*transitions: dict[str, Any], metrics: int = 1) -> RulePreview:
    return RulePreview.model_validate(
        {"run": "r1", "metrics": metrics, "transitions": list(transitions)}
    )


def transition(metric: str, state: str, step: int, value: float | str) -> dict[str, Any]:
    return {
        "metric": metric,
        "state": state,
        "step": step,
        "value": value,
        "threshold": 5.0,
        "reason": f"{state} reason",
    }


def test_preview_result_without_transitions_is_its_summary() -> None:
    summary = tree(preview_result(preview(metrics=3), None))
    assert (summary["type"], summary["props"]) == (
        "P",
        {
            "children": "0 transition(s) over 3 matching metric(s).",
            "className": "muted preview-summary",
        },
    )


def test_preview_result_lists_transitions_and_marks_the_first_metrics() -> None:
    result = preview(
        transition("grad/norm/a", "firing", 1002, 6.0),
        transition("grad/norm/b", "firing", 1003, "NaN"),
        transition("grad/norm/a", "resolved", 1_004, 1.0),
        metrics=2,
    )
    line = Line("grad/norm/a", [1000, 1002, 1004], [1.0, 6.0, 1.0])
    shown = preview_result(result, line)
    assert text(find(shown, "P")[0]["children"]) == "3 transition(s) over 2 matching metric(s)."
    assert [text(li["children"]) for li in find(shown, "Li")] == [
        "firing step 1,002 · grad/norm/a = 6 · firing reason",
        "firing step 1,003 · grad/norm/b = NaN · firing reason",
        "resolved step 1,004 · grad/norm/a = 1 · resolved reason",
    ]
    (graph,) = find(shown, "Graph", id="preview-chart")
    data = graph["figure"]["data"]
    assert [(t["name"], t["x"]) for t in data] == [
        ("grad/norm/a", [1000, 1002, 1004]),
        ("alert firing", [1002]),
        ("alert resolved", [1004]),
    ]
    assert data[1]["marker"]["color"] == FIRING_RED
    assert data[1]["text"] == ["grad/norm/a = 6 · firing reason"]
    assert (graph["figure"]["layout"]["height"], graph["figure"]["layout"]["uirevision"]) == (
        320,
        "preview",
    )


def test_a_long_preview_lists_its_first_transitions_and_marks_them_all() -> None:
    fired = [transition("grad/norm/a", "firing", 1_000 + i, 6.0) for i in range(53)]
    shown = preview_result(preview(*fired, metrics=1), None)
    assert text(find(shown, "P")[0]["children"]) == "53 transition(s) over 1 matching metric(s)."
    items = [text(li["children"]) for li in find(shown, "Li")]
    assert len(items) == 51
    assert items[49] == "firing step 1,049 · grad/norm/a = 6 · firing reason"
    assert items[50] == "… and 3 more, each marked on the chart (the API lists them all)"
    (graph,) = find(shown, "Graph", id="preview-chart")
    assert graph["figure"]["data"][0]["x"] == list(range(1_000, 1_053))


def test_preview_result_of_a_metric_without_points_still_marks_it() -> None:
    shown = preview_result(preview(transition("grad/norm/a", "firing", 5, 9.0)), None)
    (graph,) = find(shown, "Graph")
    assert [t["name"] for t in graph["figure"]["data"]] == ["alert firing"]
