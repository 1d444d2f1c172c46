"""What the rules page shows, built from the service's answers. Pure.

The rules table (with admin buttons), a condition and channels in one line, the result of
a test send, and a preview's transitions listed and marked on a chart. Channel URLs and
secrets appear only masked, as the service returns them.
"""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from normwatch.server.schemas.alerts import AlertRuleOut, RulePreview, TestDelivery

from ..figures import AlertMark, Line, OverlayView, overlay_figure
from ..graph_config import GRAPH_CONFIG
from .alerts import number_text

__all__ = [
    "ACTIONS",
    "NO_RULES",
    "channels_text",
    "condition_text",
    "preview_result",
    "repeats_text",
    "rule_options",
    "rules_table",
    "send_test_text",
]

NO_RULES = "No alert rules yet."
ACTIONS = ("rule-edit", "rule-toggle", "rule-test", "rule-delete")
"""The pattern-id types of an admin's buttons on each row, in the row's order."""


def rule_options(rules: list[AlertRuleOut]) -> list[dict[str, Any]]:
    return [{"label": r.name, "value": r.id} for r in rules]


def condition_text(condition: dict[str, Any]) -> str:
    """A rule's condition in one line: ``threshold: value > 5 (for 3 steps, cooldown 100)``."""
    kind = condition.get("kind", "?")
    if kind == "threshold":
        text = f"value {condition['op']} {condition['value']:g}"
    elif kind == "non_finite":
        text = "value is NaN or ±Inf"
    elif kind == "spike":
        text = f"value > {condition['factor']:g} × median of last {condition['window']}"
    elif kind == "slope":
        text = (
            f"slope per 1k steps {condition['op']} {condition['per_1k_steps']:g}"
            f" over {condition['window']} points"
        )
    elif kind == "forecast":
        text = (
            f"trend reaches {condition['op']} {condition['value']:g}"
            f" within {condition['within_steps']:,} steps"
        )
    elif kind == "stale":
        return f"stale: no new step for {condition['seconds']:g} s"
    else:
        return str(kind)
    extras = []
    if condition.get("for_steps", 1) > 1:
        extras.append(f"for {condition['for_steps']} steps")
    if condition.get("resolve_value") is not None:
        extras.append(f"resolves past {condition['resolve_value']:g}")
    if condition.get("resolve_steps", 1) > 1:
        extras.append(f"resolves after {condition['resolve_steps']} calm steps")
    if condition.get("cooldown_steps", 0):
        extras.append(f"cooldown {condition['cooldown_steps']}")
    return f"{kind}: {text}" + (f" ({', '.join(extras)})" if extras else "")


def repeats_text(rule: AlertRuleOut) -> str:
    """How often a firing alert is sent again: ``repeats every 1,000 steps or 1 h``, or
    nothing when it is not."""
    every = []
    if rule.repeat_every_steps:
        every.append(f"{rule.repeat_every_steps:,} steps")
    if rule.repeat_every_seconds:
        every.append(_duration(rule.repeat_every_seconds))
    return f"repeats every {' or '.join(every)}" if every else ""


def _duration(seconds: int) -> str:
    """``90 s``, ``10 min``, ``2 h``, ``7 d``: the largest whole unit."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds:,} s"


def channels_text(channels: list[dict[str, Any]]) -> str:
    """Masked channels as the service returned them; never the stored URL or secret."""
    if not channels:
        return "—"
    return "; ".join(
        f"{c.get('type')}: {c.get('url')}" + (" (signed)" if c.get("secret") else "")
        for c in channels
    )


def _actions(rule: AlertRuleOut) -> html.Td:
    labels = ("Edit", "Disable" if rule.enabled else "Enable", "Send test", "Delete")
    return html.Td(
        [
            html.Button(
                label,
                id={"type": kind, "rule": rule.id},
                n_clicks=0,
                className="small danger" if kind == "rule-delete" else "small",
            )
            for kind, label in zip(ACTIONS, labels, strict=True)
        ],
        className="actions",
    )


def rules_table(rules: list[AlertRuleOut], *, admin: bool) -> Any:
    """One row a rule; an admin's rows end with its buttons."""
    if not rules:
        return html.P(NO_RULES, className="empty")
    columns = ["name", "metric", "condition", "runs", "channels", "enabled"]
    header = html.Tr([html.Th(c) for c in columns + (["actions"] if admin else [])])
    rows = []
    for r in rules:
        runs = r.runs.name + (f" tags {', '.join(r.runs.tags)}" if r.runs.tags else "")
        cells = [
            html.Td(r.name, className="rule-name"),
            html.Td(r.metric, className="metric"),
            html.Td("; ".join(t for t in (condition_text(r.condition), repeats_text(r)) if t)),
            html.Td(runs),
            html.Td(channels_text(r.channels), className="channels"),
            html.Td(
                html.Span(
                    "enabled" if r.enabled else "disabled",
                    className=f"badge badge-{'resolved' if r.enabled else 'off'}",
                )
            ),
        ]
        if admin:
            cells.append(_actions(r))
        rows.append(html.Tr(cells, className="rule-row"))
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs rules")


def send_test_text(results: list[TestDelivery]) -> str:
    """'Test send: webhook: ok (HTTP 200); slack: failed — timeout'."""
    if not results:
        return "This rule has no channels to test."
    return "Test send: " + "; ".join(
        f"{t.channel}: {'ok' if t.ok else 'failed'}"
        + (f" (HTTP {t.status_code})" if t.status_code is not None else "")
        + (f" — {t.error}" if t.error else "")
        for t in results
    )


PREVIEW_LISTED = 50
"""Transitions a preview lists; the rest are only marked on its chart. Dash renders each
list item as components of their own: a rule that fired 560 times on the demo run took the
browser 11 s to draw as a list, and no one reads that far."""


def preview_summary(result: RulePreview) -> html.P:
    return html.P(
        f"{len(result.transitions)} transition(s) over {result.metrics} matching metric(s).",
        className="muted preview-summary",
    )


def preview_result(result: RulePreview, line: Line | None) -> Any:
    """A preview's transitions listed, and those of its first metric marked on ``line``
    (that metric's series); the summary alone when there is no transition."""
    transitions = result.transitions
    if not transitions:
        return preview_summary(result)
    metric = transitions[0].metric
    marks = [
        AlertMark(t.step, t.state, f"{t.metric} = {number_text(t.value)} · {t.reason}")
        for t in transitions
        if t.metric == metric
    ]
    figure = overlay_figure(
        OverlayView(left=line, right=None, alerts=marks, height=320, uirevision="preview")
    )
    items = [
        html.Li(
            [
                html.Span(t.state, className=f"badge badge-{t.state}"),
                f" step {t.step:,} · {t.metric} = {number_text(t.value)} · {t.reason}",
            ]
        )
        for t in transitions[:PREVIEW_LISTED]
    ]
    if len(transitions) > PREVIEW_LISTED:
        more = len(transitions) - PREVIEW_LISTED
        items.append(
            html.Li(
                f"… and {more:,} more, each marked on the chart (the API lists them all)",
                className="muted",
            )
        )
    return html.Div(
        [
            preview_summary(result),
            html.Ul(items, className="events preview-transitions"),
            dcc.Graph(id="preview-chart", figure=figure, config=GRAPH_CONFIG),
        ]
    )
