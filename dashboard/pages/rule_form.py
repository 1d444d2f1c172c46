"""The admin form that adds or edits an alert rule: fields per condition kind, and parsing.

Only the chosen kind's fields are shown and sent; an empty field takes the condition's
default. Validation is the service's own (``AlertRuleCreate``, ``AlertRuleUpdate``), shown as
one readable line. Editing loads a rule's fields but never its channels' URLs or secrets: a
blank URL keeps the rule's channels as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash
from dash import Input, Output, dcc, html
from pydantic import ValidationError

from normwatch.server.schemas.alerts import AlertRuleCreate, AlertRuleOut, AlertRuleUpdate

KINDS = ("threshold", "non_finite", "spike", "slope", "forecast", "stale")
_STEPS = ("for_steps", "resolve_steps", "cooldown_steps")
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "threshold": ("op", "value", "resolve_value", *_STEPS),
    "non_finite": _STEPS,
    "spike": ("factor", "window", *_STEPS),
    "slope": ("op", "per_1k_steps", "window", *_STEPS),
    "forecast": ("op", "value", "within_steps", "window", *_STEPS),
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
    "resolve_value",
    "for_steps",
    "resolve_steps",
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
    "resolve_value": "blank: the threshold",
    "resolve_steps": "1 (spike 5, forecast 10)",
    "cooldown_steps": "0",
}
CHANNELS = ("webhook", "slack", "alertmanager", "pagerduty")
REPEAT = "rule-repeat-every-steps"
"""The rule's ``repeat_every_steps`` (not a condition field)."""
REPEAT_SECONDS = "rule-repeat-every-seconds"
"""The rule's ``repeat_every_seconds``: repeats by the clock, also while no steps come."""
GROUP_WAIT = "rule-group-wait-steps"
"""The rule's ``group_wait_steps``: how long a glob rule's first message waits for more."""


def field_id(name: str) -> str:
    return "rule-" + name.replace("_", "-")


FIELDS = (
    "rule-name",
    "rule-metric",
    "rule-kind",
    *(field_id(n) for n in CONDITION_FIELDS),
    REPEAT,
    REPEAT_SECONDS,
    GROUP_WAIT,
    "rule-channel-type",
    "rule-channel-url",
    "rule-channel-secret",
    "rule-run-name",
)
CREATE_LABEL = "Create rule"
SAVE_LABEL = "Save changes"
NEW_TITLE = "New rule"
URL_HINT = "https://…"
KEEP_URL_HINT = "blank keeps the current channels"
# A new rule as someone who has been paged at 3 a.m. would set it: it resolves after ten
# calm steps (not on the first dip), says it is still firing every 1,000 steps and, should
# the trainer hang, every hour, and has no cooldown (which could hide a condition that
# comes back).
_DEFAULTS: dict[str, Any] = {
    "rule-metric": "grad/norm/total",
    "rule-kind": "threshold",
    field_id("op"): ">",
    field_id("resolve_steps"): 10,
    REPEAT: 1000,
    REPEAT_SECONDS: 3600,
    GROUP_WAIT: 5,
    "rule-channel-type": "webhook",
    "rule-run-name": "*",
}


def defaults() -> list[Any]:
    """The values of ``FIELDS`` on a fresh form."""
    return [_DEFAULTS.get(f) for f in FIELDS]


def values_of(rule: AlertRuleOut) -> list[Any]:
    """The values of ``FIELDS`` for editing ``rule``: its own, but no channel URL or secret."""
    values = dict(zip(FIELDS, defaults(), strict=True))
    values["rule-name"] = rule.name
    values["rule-metric"] = rule.metric
    values["rule-kind"] = rule.condition.get("kind", "threshold")
    for name in CONDITION_FIELDS:
        if name in rule.condition:
            values[field_id(name)] = rule.condition[name]
    # A rule stored without these has its kind's defaults, not a new rule's.
    if "resolve_steps" not in rule.condition:
        values[field_id("resolve_steps")] = None
    values[REPEAT] = rule.repeat_every_steps
    values[REPEAT_SECONDS] = rule.repeat_every_seconds
    values[GROUP_WAIT] = rule.group_wait_steps
    if rule.channels and rule.channels[0].get("type") in CHANNELS:
        values["rule-channel-type"] = rule.channels[0]["type"]
    values["rule-run-name"] = rule.runs.name
    return [values[f] for f in FIELDS]


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
                id=field_id(name),
                type="number",
                value=_DEFAULTS.get(field_id(name)),
                placeholder=_HINTS[name],
                debounce=False,
            )
        condition_controls.append(_labelled(name, control, name=name))
    return html.Div(
        [
            html.H3(NEW_TITLE, id="rule-form-title"),
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
            html.Div(
                [
                    *condition_controls,
                    _labelled(
                        "repeat every (steps)",
                        dcc.Input(id=REPEAT, type="number", value=1000, placeholder="blank: never"),
                    ),
                    _labelled(
                        "and every (seconds, also while no steps come)",
                        dcc.Input(
                            id=REPEAT_SECONDS, type="number", value=3600, placeholder="blank: never"
                        ),
                    ),
                    _labelled(
                        "group wait (steps, glob rules)",
                        dcc.Input(id=GROUP_WAIT, type="number", value=5, placeholder="0"),
                    ),
                ],
                className="form-row",
            ),
            html.Div(
                [
                    _labelled(
                        "channel",
                        dcc.RadioItems(
                            id="rule-channel-type",
                            options=list(CHANNELS),
                            value="webhook",
                            inline=True,
                        ),
                    ),
                    _labelled(
                        "URL (optional)",
                        dcc.Input(id="rule-channel-url", placeholder=URL_HINT, className="wide"),
                    ),
                    _labelled(
                        "secret (webhook, optional) or routing key (PagerDuty)",
                        dcc.Input(id="rule-channel-secret", type="password"),
                    ),
                ],
                className="form-row",
            ),
            html.Button(CREATE_LABEL, id="rule-create", n_clicks=0, className="primary"),
            html.Button("Cancel", id="rule-cancel", n_clicks=0, style={"display": "none"}),
            dcc.Store(id="rule-editing", data=None),
        ],
        id="rule-form",
        className="rule-form",
    )


def _text(values: Mapping[str, Any], field: str) -> str:
    """A text field's value, stripped; a browser sends strings, a crafted request anything
    (which the service's validation then names)."""
    value = values.get(field)
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else str(value)


def _condition(values: Mapping[str, Any]) -> dict[str, Any]:
    kind = values.get("rule-kind") or "threshold"
    condition: dict[str, Any] = {"kind": kind}
    for name in KIND_FIELDS.get(kind, ()) if isinstance(kind, str) else ():
        value = values.get(field_id(name))
        if value is not None and value != "":
            condition[name] = value
    return condition


def _channels(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The channel the form describes, if any: a URL (and a webhook's secret), or for
    PagerDuty a routing key (in the secret field; the URL then defaults to PagerDuty's)."""
    kind = values.get("rule-channel-type") or "webhook"
    url = _text(values, "rule-channel-url")
    secret = values.get("rule-channel-secret")
    if kind == "pagerduty":
        if not secret and not url:
            return []
        channel: dict[str, Any] = {"type": kind, "routing_key": secret or ""}
        if url:
            channel["url"] = url
        return [channel]
    if not url:
        return []
    channel = {"type": kind, "url": url}
    if secret and kind == "webhook":
        channel["secret"] = secret
    return [channel]


def to_create(values: Mapping[str, Any]) -> AlertRuleCreate:
    """The request body for the form's values; raises ``ValidationError`` (a ``ValueError``)."""
    return AlertRuleCreate.model_validate(
        {
            "name": _text(values, "rule-name"),
            "metric": _text(values, "rule-metric"),
            "condition": _condition(values),
            "channels": _channels(values),
            "runs": {"name": _text(values, "rule-run-name") or "*"},
            "repeat_every_steps": _repeat(values),
            "repeat_every_seconds": _repeat(values, REPEAT_SECONDS),
            "group_wait_steps": _group_wait(values),
        }
    )


def _group_wait(values: Mapping[str, Any]) -> Any:
    """The group-wait field's value; blank is 0."""
    value = values.get(GROUP_WAIT)
    return 0 if value is None or value == "" else value


def _repeat(values: Mapping[str, Any], field: str = REPEAT) -> Any:
    """A repeat field's value; blank is 0 (never)."""
    value = values.get(field)
    return 0 if value is None or value == "" else value


def to_update(values: Mapping[str, Any], current: AlertRuleOut) -> AlertRuleUpdate:
    """The changes the form makes to ``current``; raises ``ValidationError``.

    A blank URL keeps the rule's channels; a new one replaces them. The run selector is sent
    only when its name glob changed, and keeps the rule's tags.
    """
    body: dict[str, Any] = {
        "name": _text(values, "rule-name"),
        "metric": _text(values, "rule-metric"),
        "condition": _condition(values),
        "repeat_every_steps": _repeat(values),
        "repeat_every_seconds": _repeat(values, REPEAT_SECONDS),
        "group_wait_steps": _group_wait(values),
    }
    channels = _channels(values)
    if channels:
        body["channels"] = channels
    run_name = _text(values, "rule-run-name") or "*"
    if run_name != current.runs.name:
        body["runs"] = {"name": run_name, "tags": list(current.runs.tags)}
    return AlertRuleUpdate.model_validate(body)


def explain(exc: ValueError) -> str:
    """One line per problem, ``field: message``, for the page."""
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return str(exc)


@dataclass(frozen=True)
class Editing:
    """The rule the form is editing (the ``rule-editing`` store); no store: a new rule."""

    rule_id: int
    name: str

    def to_store(self) -> dict[str, Any]:
        return {"id": self.rule_id, "name": self.name}

    @classmethod
    def from_store(cls, data: object) -> Editing | None:
        """The rule a store names; None for no store, and for anything :meth:`to_store`
        cannot have written (which edits nothing: the form then makes a new rule)."""
        if not isinstance(data, dict):
            return None
        rule_id, name = data.get("id"), data.get("name")
        if isinstance(rule_id, bool) or not isinstance(rule_id, int) or not isinstance(name, str):
            return None
        return cls(rule_id, name)


def show_fields(kind: object) -> list[dict[str, str]]:
    """Each condition field's style: shown for ``kind`` (a threshold's before one is picked),
    else hidden; a kind the form does not know shows none."""
    name = kind or "threshold"
    shown = KIND_FIELDS.get(name, ()) if isinstance(name, str) else ()
    return [{} if n in shown else {"display": "none"} for n in CONDITION_FIELDS]


def show_mode(editing: Editing | None) -> tuple[str, dict[str, str], str, str]:
    """The submit button's label, the Cancel button's style, the title and the URL hint."""
    if editing is None:
        return CREATE_LABEL, {"display": "none"}, NEW_TITLE, URL_HINT
    return SAVE_LABEL, {}, f"Edit rule {editing.name}", KEEP_URL_HINT


def register(app: dash.Dash) -> None:
    app.callback(
        [Output(f"{field_id(n)}-field", "style") for n in CONDITION_FIELDS],
        Input("rule-kind", "value"),
    )(show_fields)

    @app.callback(
        Output("rule-create", "children"),
        Output("rule-cancel", "style"),
        Output("rule-form-title", "children"),
        Output("rule-channel-url", "placeholder"),
        Input("rule-editing", "data"),
    )
    def on_editing(store: object) -> tuple[str, dict[str, str], str, str]:
        return show_mode(Editing.from_store(store))
