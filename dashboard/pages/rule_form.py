"""The admin form that adds an alert rule: fields per condition kind, and its parsing.

Only the chosen kind's fields are shown and sent; an empty field takes the condition's
default. Validation is the service's own (``AlertRuleCreate``), shown as one readable line.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, dcc, html
from normwatch.server.schemas import AlertRuleCreate
from pydantic import ValidationError

KINDS = ("threshold", "non_finite", "spike", "slope", "forecast", "stale")
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "threshold": ("op", "value", "for_steps", "cooldown_steps"),
    "non_finite": ("for_steps", "cooldown_steps"),
    "spike": ("factor", "window", "for_steps", "cooldown_steps"),
    "slope": ("op", "per_1k_steps", "window", "for_steps", "cooldown_steps"),
    "forecast": ("op", "value", "within_steps", "window", "for_steps", "cooldown_steps"),
    "stale": ("seconds",),
}
CONDITION_FIELDS = (
    "op",
    "value",
    "factor",
    "window",
    "per_1k_steps",
    "within_steps",
    "seconds",
    "for_steps",
    "cooldown_steps",
)
# Placeholders show the condition's default, so an empty field reads as "use the default".
_HINTS = {
    "value": "e.g. 5",
    "factor": "2",
    "window": "50 (spike), 100 (slope, forecast)",
    "per_1k_steps": "e.g. 0.5",
    "within_steps": "e.g. 2000",
    "seconds": "e.g. 600",
    "for_steps": "1",
    "cooldown_steps": "0",
}


def field_id(name: str) -> str:
    return "rule-" + name.replace("_", "-")


FIELDS = (
    "rule-name",
    "rule-metric",
    "rule-kind",
    *(field_id(n) for n in CONDITION_FIELDS),
    "rule-channel-type",
    "rule-channel-url",
    "rule-channel-secret",
    "rule-run-name",
)


def _labelled(label: str, control: Any, *, name: str | None = None) -> html.Label:
    if name is None:
        return html.Label([label, control], className="field")
    return html.Label([label, control], id=f"{field_id(name)}-field", className="field")


def form() -> html.Div:
    condition_controls = []
    for name in CONDITION_FIELDS:
        if name == "op":
            control: Any = dcc.RadioItems(
                id=field_id(name),
                options=[">", ">=", "<", "<="],
                value=">",
                inline=True,
                className="ops",
            )
        else:
            control = dcc.Input(
                id=field_id(name), type="number", placeholder=_HINTS[name], debounce=False
            )
        condition_controls.append(_labelled(name, control, name=name))
    return html.Div(
        [
            html.H3("New rule"),
            html.Div(
                [
                    _labelled("name", dcc.Input(id="rule-name", placeholder="grad-norm-high")),
                    _labelled(
                        "metric (glob)",
                        dcc.Input(id="rule-metric", value="grad/norm/total"),
                    ),
                    _labelled(
                        "kind",
                        dcc.Dropdown(
                            id="rule-kind",
                            options=list(KINDS),
                            value="threshold",
                            clearable=False,
                        ),
                    ),
                    _labelled("runs (name glob)", dcc.Input(id="rule-run-name", value="*")),
                ],
                className="form-row",
            ),
            html.Div(condition_controls, className="form-row"),
            html.Div(
                [
                    _labelled(
                        "channel",
                        dcc.RadioItems(
                            id="rule-channel-type",
                            options=["webhook", "slack"],
                            value="webhook",
                            inline=True,
                        ),
                    ),
                    _labelled(
                        "URL (optional)",
                        dcc.Input(id="rule-channel-url", placeholder="https://…", className="wide"),
                    ),
                    _labelled(
                        "secret (webhook, optional)",
                        dcc.Input(id="rule-channel-secret", type="password"),
                    ),
                ],
                className="form-row",
            ),
            html.Button("Create rule", id="rule-create", n_clicks=0, className="primary"),
        ],
        id="rule-form",
        className="rule-form",
    )


def to_create(values: dict[str, Any]) -> AlertRuleCreate:
    """The request body for the form's values; raises ``ValidationError`` (a ``ValueError``)."""
    kind = values.get("rule-kind") or "threshold"
    condition: dict[str, Any] = {"kind": kind}
    for name in KIND_FIELDS.get(kind, ()):
        value = values.get(field_id(name))
        if value is not None and value != "":
            condition[name] = value
    channels = []
    url = (values.get("rule-channel-url") or "").strip()
    if url:
        channel = {"type": values.get("rule-channel-type") or "webhook", "url": url}
        secret = values.get("rule-channel-secret")
        if secret:
            channel["secret"] = secret
        channels.append(channel)
    return AlertRuleCreate.model_validate(
        {
            "name": (values.get("rule-name") or "").strip(),
            "metric": (values.get("rule-metric") or "").strip(),
            "condition": condition,
            "channels": channels,
            "runs": {"name": (values.get("rule-run-name") or "").strip() or "*"},
        }
    )


def explain(exc: ValueError) -> str:
    """One line per problem, ``field: message``, for the page."""
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return str(exc)


def register(app: dash.Dash) -> None:
    @app.callback(
        [Output(f"{field_id(n)}-field", "style") for n in CONDITION_FIELDS],
        Input("rule-kind", "value"),
    )
    async def show_fields(kind: str | None) -> list[dict[str, str]]:
        shown = KIND_FIELDS.get(kind or "threshold", ())
        return [{} if n in shown else {"display": "none"} for n in CONDITION_FIELDS]
