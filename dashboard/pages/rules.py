"""Alert rules: the project's rules; for admins, a form to add or edit one and buttons to
enable, disable, delete and test-send; for everyone, a preview of where a rule would have fired.

Channel URLs and secrets only ever appear masked, as the service returns them.
"""

from __future__ import annotations

from typing import Any

import anyio
import dash
from dash import ALL, Input, Output, State, ctx, dcc, html
from dash.exceptions import PreventUpdate
from normwatch.server.auth import Principal
from normwatch.server.schemas import AlertRuleOut, RulePreview, TestDelivery

from ..data import DashboardData, RuleRefused
from ..figures import AlertMark, OverlayView, overlay_figure
from ..session import viewer
from . import rule_form
from .alerts import number_text

ROUTES = ("/rules",)
PREVIEW_POINTS = 1000


def match(path: str) -> dict[str, str] | None:
    return {} if path.rstrip("/") == "/rules" else None


def layout(data: DashboardData, who: Principal, **_params: str) -> html.Div:
    admin = who.can("admin")
    rules = data.rules(who)
    runs = data.runs(who)
    return html.Div(
        [
            html.H1(f"Alert rules in {who.project}"),
            html.P(
                "Read-only: log in with an admin token to add or change rules.",
                className="muted read-only",
            )
            if not admin
            else None,
            html.Div(id="rule-message", className="message"),
            html.Div(rules_table(rules, admin=admin), id="rules-table"),
            rule_form.form() if admin else None,
            html.H3("Preview on a stored run"),
            html.Div(
                [
                    html.Label(
                        [
                            "rule",
                            dcc.Dropdown(
                                id="preview-rule",
                                options=rule_options(rules),
                                value=rules[0].id if rules else None,
                            ),
                        ],
                        className="picker",
                    ),
                    html.Label(
                        [
                            "run",
                            dcc.Dropdown(
                                id="preview-run",
                                options=[{"label": r.name, "value": r.id} for r in runs],
                                value=runs[0].id if runs else None,
                            ),
                        ],
                        className="picker",
                    ),
                    html.Button("Preview", id="preview-go", n_clicks=0),
                ],
                className="controls",
            ),
            html.Div(id="preview-result"),
            dcc.Store(id="rules-changed", data=0),
        ],
        className="card rules-page",
    )


def rule_options(rules: list[AlertRuleOut]) -> list[dict[str, Any]]:
    return [{"label": r.name, "value": r.id} for r in rules]


def condition_text(condition: dict[str, Any]) -> str:
    """A rule's condition in one line: ``threshold > 5 for 3 steps, cooldown 100``."""
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
    if condition.get("cooldown_steps", 0):
        extras.append(f"cooldown {condition['cooldown_steps']}")
    return f"{kind}: {text}" + (f" ({', '.join(extras)})" if extras else "")


def channels_text(channels: list[dict[str, Any]]) -> str:
    """Masked channels as the service returned them; never the stored URL or secret."""
    if not channels:
        return "—"
    return "; ".join(
        f"{c.get('type')}: {c.get('url')}" + (" (signed)" if c.get("secret") else "")
        for c in channels
    )


def rules_table(rules: list[AlertRuleOut], *, admin: bool) -> Any:
    if not rules:
        return html.P("No alert rules yet.", className="empty")
    columns = ["name", "metric", "condition", "runs", "channels", "enabled"]
    header = html.Tr([html.Th(c) for c in columns + (["actions"] if admin else [])])
    rows = []
    for r in rules:
        runs = r.runs.name + (f" tags {', '.join(r.runs.tags)}" if r.runs.tags else "")
        cells = [
            html.Td(r.name, className="rule-name"),
            html.Td(r.metric, className="metric"),
            html.Td(condition_text(r.condition)),
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
            cells.append(
                html.Td(
                    [
                        html.Button(
                            "Edit",
                            id={"type": "rule-edit", "rule": r.id},
                            n_clicks=0,
                            className="small",
                        ),
                        html.Button(
                            "Disable" if r.enabled else "Enable",
                            id={"type": "rule-toggle", "rule": r.id},
                            n_clicks=0,
                            className="small",
                        ),
                        html.Button(
                            "Send test",
                            id={"type": "rule-test", "rule": r.id},
                            n_clicks=0,
                            className="small",
                        ),
                        html.Button(
                            "Delete",
                            id={"type": "rule-delete", "rule": r.id},
                            n_clicks=0,
                            className="small danger",
                        ),
                    ],
                    className="actions",
                )
            )
        rows.append(html.Tr(cells, className="rule-row"))
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs rules")


def test_text(results: list[TestDelivery]) -> str:
    if not results:
        return "This rule has no channels to test."
    return "Test send: " + "; ".join(
        f"{t.channel}: {'ok' if t.ok else 'failed'}"
        + (f" (HTTP {t.status_code})" if t.status_code is not None else "")
        + (f" — {t.error}" if t.error else "")
        for t in results
    )


def preview_view(data: DashboardData, who: Principal, rule_id: int, run_id: str) -> Any:
    """The transitions a rule would have made on a run, listed and marked on its metric."""
    try:
        result: RulePreview = data.preview(who, rule_id, run_id)
    except RuleRefused as exc:
        return html.P(str(exc), className="message error")
    transitions = result.transitions
    summary = html.P(
        f"{len(transitions)} transition(s) over {result.metrics} matching metric(s).",
        className="muted preview-summary",
    )
    if not transitions:
        return summary
    metric = transitions[0].metric
    lines = data.lines(who, run_id, [metric], start=None, end=None, points=PREVIEW_POINTS)
    marks = [
        AlertMark(t.step, t.state, f"{t.metric} = {number_text(t.value)} · {t.reason}")
        for t in transitions
        if t.metric == metric
    ]
    figure = overlay_figure(
        OverlayView(
            left=lines.get(metric), right=None, alerts=marks, height=320, uirevision="preview"
        )
    )
    items = [
        html.Li(
            [
                html.Span(t.state, className=f"badge badge-{t.state}"),
                f" step {t.step:,} · {t.metric} = {number_text(t.value)} · {t.reason}",
            ]
        )
        for t in transitions
    ]
    return html.Div(
        [
            summary,
            html.Ul(items, className="events preview-transitions"),
            dcc.Graph(id="preview-chart", figure=figure, config={"displaylogo": False}),
        ]
    )


def _clicked() -> bool:
    """Whether a real click triggered the callback (not a button appearing with 0 clicks)."""
    return any(t.get("value") for t in ctx.triggered)


def _rule(data: DashboardData, who: Principal, rule_id: int) -> AlertRuleOut:
    """One of the project's rules, as the table shows it (channels masked)."""
    found = next((r for r in data.rules(who) if r.id == rule_id), None)
    if found is None:
        raise RuleRefused(f"no alert rule with id {rule_id}")
    return found


def register(app: dash.Dash, data: DashboardData) -> None:
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
    async def submit(
        n: int, changed: int, editing: dict[str, Any] | None, *values: Any
    ) -> tuple[Any, ...]:
        if not n:
            raise PreventUpdate
        who = viewer()
        form = dict(zip(rule_form.FIELDS, values, strict=True))
        unchanged = [dash.no_update] * len(rule_form.FIELDS)
        try:
            if editing:
                rule_id = int(editing["id"])
                current = await anyio.to_thread.run_sync(lambda: _rule(data, who, rule_id))
                update = rule_form.to_update(form, current)
                rule = await anyio.to_thread.run_sync(
                    lambda: data.update_rule(who, rule_id, update)
                )
            else:
                body = rule_form.to_create(form)
                rule = await anyio.to_thread.run_sync(lambda: data.create_rule(who, body))
        except (RuleRefused, ValueError) as exc:
            message = str(exc) if isinstance(exc, RuleRefused) else rule_form.explain(exc)
            return html.Span(message, className="error"), dash.no_update, dash.no_update, *unchanged
        if editing:
            saved = html.Span(f"Saved rule {rule.name}.", className="ok")
            return saved, changed + 1, None, *rule_form.defaults()
        created = html.Span(f"Created rule {rule.name}.", className="ok")
        return created, changed + 1, dash.no_update, *unchanged

    @app.callback(
        Output("rule-message", "children", allow_duplicate=True),
        Output("rule-editing", "data", allow_duplicate=True),
        *field_outputs,
        Input({"type": "rule-edit", "rule": ALL}, "n_clicks"),
        Input("rule-cancel", "n_clicks"),
        prevent_initial_call=True,
    )
    async def edit(_e: list[int], _c: int) -> tuple[Any, ...]:
        trigger = ctx.triggered_id
        if trigger is None or not _clicked():
            raise PreventUpdate
        if trigger == "rule-cancel":
            return None, None, *rule_form.defaults()
        who = viewer()
        rule_id = int(trigger["rule"])
        try:
            rule = await anyio.to_thread.run_sync(lambda: _rule(data, who, rule_id))
        except RuleRefused as exc:
            unchanged = [dash.no_update] * len(rule_form.FIELDS)
            return html.Span(str(exc), className="error"), dash.no_update, *unchanged
        return None, {"id": rule.id, "name": rule.name}, *rule_form.values_of(rule)

    @app.callback(
        Output("rule-message", "children", allow_duplicate=True),
        Output("rules-changed", "data", allow_duplicate=True),
        Input({"type": "rule-toggle", "rule": ALL}, "n_clicks"),
        Input({"type": "rule-delete", "rule": ALL}, "n_clicks"),
        Input({"type": "rule-test", "rule": ALL}, "n_clicks"),
        State("rules-changed", "data"),
        prevent_initial_call=True,
    )
    async def act(_t: list[int], _d: list[int], _s: list[int], changed: int) -> tuple[Any, Any]:
        trigger = ctx.triggered_id
        if not isinstance(trigger, dict) or not _clicked():
            raise PreventUpdate
        who = viewer()
        rule_id = int(trigger["rule"])
        try:
            if trigger["type"] == "rule-test":
                results = await anyio.to_thread.run_sync(lambda: data.test_rule(who, rule_id))
                return html.Span(test_text(results), className="test-result"), dash.no_update
            if trigger["type"] == "rule-delete":
                await anyio.to_thread.run_sync(lambda: data.delete_rule(who, rule_id))
                return html.Span("Rule deleted.", className="ok"), changed + 1
            current = await anyio.to_thread.run_sync(lambda: _rule(data, who, rule_id))
            out = await anyio.to_thread.run_sync(
                lambda: data.set_enabled(who, rule_id, not current.enabled)
            )
        except RuleRefused as exc:
            return html.Span(str(exc), className="error"), dash.no_update
        state = "enabled" if out.enabled else "disabled"
        return html.Span(f"Rule {out.name} {state}.", className="ok"), changed + 1

    @app.callback(
        Output("rules-table", "children"),
        Output("preview-rule", "options"),
        Input("rules-changed", "data"),
        prevent_initial_call=True,
    )
    async def refresh(_changed: int) -> tuple[Any, Any]:
        who = viewer()
        rules = await anyio.to_thread.run_sync(lambda: data.rules(who))
        return rules_table(rules, admin=who.can("admin")), rule_options(rules)

    @app.callback(
        Output("preview-result", "children"),
        Input("preview-go", "n_clicks"),
        State("preview-rule", "value"),
        State("preview-run", "value"),
        prevent_initial_call=True,
    )
    async def run_preview(n: int, rule_id: int | None, run_id: str | None) -> Any:
        if not n:
            raise PreventUpdate
        if rule_id is None or run_id is None:
            return html.P("Pick a rule and a run first.", className="message error")
        who = viewer()
        return await anyio.to_thread.run_sync(
            lambda: preview_view(data, who, int(rule_id), str(run_id))
        )
