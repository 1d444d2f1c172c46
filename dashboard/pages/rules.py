"""Alert rules: the project's rules; for admins, a form to add or edit one and buttons to
enable, disable, delete and test-send; for everyone, a preview of where a rule would have fired.

Channel URLs and secrets only ever appear masked, as the service returns them. Every change
goes through `DashboardData`, which refuses a viewer without an admin token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, dcc, html

from normwatch.server.auth import Principal
from normwatch.server.errors import NotFound
from normwatch.server.schemas import RunOut
from normwatch.server.schemas.alerts import (
    AlertRuleCreate,
    AlertRuleOut,
    AlertRuleUpdate,
    RulePreview,
    TestDelivery,
)

from ..figures import Line
from ..refusals import Refusal, said
from ..session import viewer
from ..wiring import TriggerId, clicked, in_thread, or_prevent, triggered_id
from . import rule_form
from .rule_form import Editing
from .rule_views import preview_result, rule_options, rules_table, send_test_text

ROUTES = ("/rules",)
PREVIEW_POINTS = 1000
READ_ONLY = "Read-only: log in with an admin token to add or change rules."
PICK_FIRST = "Pick a rule and a run first."

Submitted = tuple[Any, ...]
"""The message, the change counter, the edit state and the form's `rule_form.FIELDS`."""
Edited = tuple[Any, ...]
"""The message, the edit state and the form's `rule_form.FIELDS`."""


class RuleAccess(Protocol):
    """What the rules page reads and changes; changes refuse (`RuleRefused`) non-admins."""

    def rules(self, who: Principal) -> list[AlertRuleOut]: ...

    def runs(self, who: Principal) -> list[RunOut]: ...

    def create_rule(self, who: Principal, body: AlertRuleCreate) -> AlertRuleOut: ...

    def update_rule(self, who: Principal, rule_id: int, body: AlertRuleUpdate) -> AlertRuleOut: ...

    def set_enabled(self, who: Principal, rule_id: int, enabled: bool) -> AlertRuleOut: ...

    def delete_rule(self, who: Principal, rule_id: int) -> None: ...

    def test_rule(self, who: Principal, rule_id: int) -> list[TestDelivery]: ...

    def preview(self, who: Principal, rule_id: int, run_id: str) -> RulePreview: ...

    def lines(
        self,
        who: Principal,
        run_id: str,
        metrics: list[str],
        *,
        start: int | None,
        end: int | None,
        points: int,
    ) -> dict[str, Line]: ...


def match(path: str) -> dict[str, str] | None:
    return {} if path.rstrip("/") == "/rules" else None


def layout(data: RuleAccess, who: Principal, query: Mapping[str, str]) -> html.Div:
    admin = who.can("admin")
    rules = data.rules(who)
    runs = data.runs(who)
    preview_rule = dcc.Dropdown(
        id="preview-rule", options=rule_options(rules), value=rules[0].id if rules else None
    )
    preview_run = dcc.Dropdown(
        id="preview-run",
        options=[{"label": r.name, "value": r.id} for r in runs],
        value=runs[0].id if runs else None,
    )
    return html.Div(
        [
            html.H1(f"Alert rules in {who.project}"),
            None if admin else html.P(READ_ONLY, className="muted read-only"),
            html.Div(id="rule-message", className="message"),
            html.Div(rules_table(rules, admin=admin), id="rules-table"),
            rule_form.form() if admin else None,
            html.H3("Preview on a stored run"),
            html.Div(
                [
                    html.Label(["rule", preview_rule], className="picker"),
                    html.Label(["run", preview_run], className="picker"),
                    html.Button("Preview", id="preview-go", n_clicks=0),
                ],
                className="controls",
            ),
            html.Div(id="preview-result"),
            dcc.Store(id="rules-changed", data=0),
        ],
        className="card rules-page",
    )


def error(message: str) -> html.Span:
    return html.Span(message, className="error")


def ok(message: str) -> html.Span:
    return html.Span(message, className="ok")


def _rule(data: RuleAccess, who: Principal, rule_id: int) -> AlertRuleOut:
    """One of the project's rules, as the table shows it (channels masked)."""
    found = next((r for r in data.rules(who) if r.id == rule_id), None)
    if found is None:
        raise NotFound(f"no alert rule with id {rule_id}")
    return found


def _rule_id(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _next(changed: object) -> int:
    """The change counter after one more change (the table refreshes on it)."""
    return (changed if isinstance(changed, int) else 0) + 1


def submit(
    data: RuleAccess,
    who: Principal,
    n_clicks: object,
    changed: object,
    editing: Editing | None,
    form: Mapping[str, Any],
) -> Submitted | None:
    """Create a rule from the form's values (``form`` by field id), or save the rule being
    edited; None before any click.

    Created: a message, the counter one up, the form kept. Saved: a message, the counter
    one up, editing over and the form reset. Refused (by validation or the service, or for
    a viewer without an admin token): the reason, nothing else changed.
    """
    if not n_clicks:
        return None
    unchanged = [dash.no_update] * len(rule_form.FIELDS)
    try:
        if editing is not None:
            current = _rule(data, who, editing.rule_id)
            rule = data.update_rule(who, editing.rule_id, rule_form.to_update(form, current))
        else:
            rule = data.create_rule(who, rule_form.to_create(form))
    except Refusal as exc:
        return error(said(exc)), dash.no_update, dash.no_update, *unchanged
    except ValueError as exc:  # the form's own check
        return error(rule_form.explain(exc)), dash.no_update, dash.no_update, *unchanged
    if editing is not None:
        return ok(f"Saved rule {rule.name}."), _next(changed), None, *rule_form.defaults()
    return ok(f"Created rule {rule.name}."), _next(changed), dash.no_update, *unchanged


def edit(data: RuleAccess, who: Principal, trigger: TriggerId, click: bool) -> Edited | None:
    """Load the clicked rule into the form (never its channels' URLs or secrets), or with
    Cancel (``trigger == "rule-cancel"``) reset the form; None without a real ``click``."""
    if trigger is None or not click:
        return None
    if trigger == "rule-cancel":
        return None, None, *rule_form.defaults()
    rule_id = _rule_id(trigger.get("rule")) if isinstance(trigger, Mapping) else None
    if rule_id is None:
        return None
    try:
        rule = _rule(data, who, rule_id)
    except Refusal as exc:
        return error(said(exc)), dash.no_update, *[dash.no_update] * len(rule_form.FIELDS)
    return None, Editing(rule.id, rule.name).to_store(), *rule_form.values_of(rule)


def act(
    data: RuleAccess, who: Principal, trigger: TriggerId, click: bool, changed: object
) -> tuple[Any, Any] | None:
    """The clicked row button's action (``trigger``: ``{"type": "rule-toggle" | "rule-delete"
    | "rule-test", "rule": id}``): a message, and the change counter one up when a rule
    changed; None without a real ``click``."""
    if not isinstance(trigger, Mapping) or not click:
        return None
    rule_id = _rule_id(trigger.get("rule"))
    kind = trigger.get("type")
    if rule_id is None or kind not in ("rule-toggle", "rule-delete", "rule-test"):
        return None
    try:
        if kind == "rule-test":
            results = data.test_rule(who, rule_id)
            return html.Span(send_test_text(results), className="test-result"), dash.no_update
        if kind == "rule-delete":
            data.delete_rule(who, rule_id)
            return ok("Rule deleted."), _next(changed)
        current = _rule(data, who, rule_id)
        out = data.set_enabled(who, rule_id, not current.enabled)
    except Refusal as exc:
        return error(said(exc)), dash.no_update
    state = "enabled" if out.enabled else "disabled"
    return ok(f"Rule {out.name} {state}."), _next(changed)


def refresh(data: RuleAccess, who: Principal) -> tuple[Any, Any]:
    """The rules table and the preview's rule options as they stand now."""
    rules = data.rules(who)
    return rules_table(rules, admin=who.can("admin")), rule_options(rules)


def run_preview(
    data: RuleAccess, who: Principal, n_clicks: object, rule_id: object, run_id: object
) -> Any:
    """The transitions the picked rule would have made on the picked run, listed and
    charted; the service's refusal as a message; None before any click."""
    if not n_clicks:
        return None
    rule, run = _rule_id(rule_id), run_id if isinstance(run_id, str) else None
    if rule is None or run is None:
        return html.P(PICK_FIRST, className="message error")
    try:
        result = data.preview(who, rule, run)
        if not result.transitions:
            return preview_result(result, None)
        metric = result.transitions[0].metric
        lines = data.lines(who, run, [metric], start=None, end=None, points=PREVIEW_POINTS)
    except Refusal as exc:
        return html.P(said(exc), className="message error")
    return preview_result(result, lines.get(metric))


def register(app: dash.Dash, data: RuleAccess) -> None:
    rule_form.register(app)
    field_outputs = [Output(f, "value", allow_duplicate=True) for f in rule_form.FIELDS]

    @app.callback(
        Output("rule-message", "children", allow_duplicate=True),
        Output("rules-changed", "data", allow_duplicate=True),
        Output("rule-editing", "data", allow_duplicate=True),
        *field_outputs,
        Input("rule-create", "n_clicks"),
        State("rules-changed", "data"),
        State("rule-editing", "data"),
        *[State(field, "value") for field in rule_form.FIELDS],
        prevent_initial_call=True,
    )
    async def on_submit(n: object, changed: object, store: object, *values: Any) -> Submitted:
        form = dict(zip(rule_form.FIELDS, values, strict=True))
        editing = Editing.from_store(store)
        return or_prevent(await in_thread(submit, data, viewer(), n, changed, editing, form))

    @app.callback(
        Output("rule-message", "children", allow_duplicate=True),
        Output("rule-editing", "data", allow_duplicate=True),
        *field_outputs,
        Input({"type": "rule-edit", "rule": ALL}, "n_clicks"),
        Input("rule-cancel", "n_clicks"),
        prevent_initial_call=True,
    )
    async def on_edit(_edits: object, _cancel: object) -> Edited:
        return or_prevent(await in_thread(edit, data, viewer(), triggered_id(), clicked()))

    @app.callback(
        Output("rule-message", "children", allow_duplicate=True),
        Output("rules-changed", "data", allow_duplicate=True),
        Input({"type": "rule-toggle", "rule": ALL}, "n_clicks"),
        Input({"type": "rule-delete", "rule": ALL}, "n_clicks"),
        Input({"type": "rule-test", "rule": ALL}, "n_clicks"),
        State("rules-changed", "data"),
        prevent_initial_call=True,
    )
    async def on_act(*clicks_and_changed: object) -> tuple[Any, Any]:
        changed = clicks_and_changed[-1]
        found = await in_thread(act, data, viewer(), triggered_id(), clicked(), changed)
        return or_prevent(found)

    @app.callback(
        Output("rules-table", "children"),
        Output("preview-rule", "options"),
        Input("rules-changed", "data"),
        prevent_initial_call=True,
    )
    async def on_change(_changed: object) -> tuple[Any, Any]:
        return await in_thread(refresh, data, viewer())

    @app.callback(
        Output("preview-result", "children"),
        Input("preview-go", "n_clicks"),
        State("preview-rule", "value"),
        State("preview-run", "value"),
        prevent_initial_call=True,
    )
    async def on_preview(n: object, rule_id: object, run_id: object) -> Any:
        return or_prevent(await in_thread(run_preview, data, viewer(), n, rule_id, run_id))
