"""The alerts page's on-call half: silences (a form for admins, the list for everyone, an
Expire button on those in force) and the Acknowledge button of a firing alert.

A silence names a rule, a run and a metric glob, each optional, and lasts for a number of
hours, for a number of steps past the run's latest step, or until the first of the two;
the comment (why) is required, and who is the viewer's token unless typed in. Every change
goes through `DashboardData`, which refuses a viewer without an admin token.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, dcc, html
from plotly.utils import PlotlyJSONEncoder
from pydantic import ValidationError

from normwatch.server.auth import Principal
from normwatch.server.errors import Invalid, NotFound, RunNotFound
from normwatch.server.schemas import RunOut
from normwatch.server.schemas.alerts import AlertRuleOut, SilenceCreate, SilenceOut

from ..refusals import Refusal, invalid, said
from ..session import viewer
from ..wiring import TriggerId, clicked, in_thread, or_prevent, triggered_id
from .runs import ago

FIELDS = (
    "silence-rule",
    "silence-run",
    "silence-metric",
    "silence-hours",
    "silence-steps",
    "silence-comment",
    "silence-by",
)
"""The silence form's inputs, in the order `silence_body` reads them."""
DEFAULT_HOURS = 2
NO_SILENCES = "No silences."
SILENCE_COLUMNS = ("silences", "until", "by", "why", "state", "")
NEEDS_AN_END = "Give hours, steps or both: a silence must end."
STEPS_NEED_A_RUN = "Steps count from a run's latest step: pick the run."


class OnCallAccess(Protocol):
    """What the on-call half reads and changes; changes refuse (`Invalid`) non-admins."""

    def rules(self, who: Principal) -> list[AlertRuleOut]: ...

    def runs(self, who: Principal) -> list[RunOut]: ...

    def silences(self, who: Principal) -> list[SilenceOut]: ...

    def create_silence(self, who: Principal, body: SilenceCreate) -> SilenceOut: ...

    def expire_silence(self, who: Principal, silence_id: int) -> None: ...

    def acknowledge(self, who: Principal, alert_id: int, comment: str = "") -> None: ...


@dataclass(frozen=True)
class Names:
    """Rules' and runs' names by id, to say what a silence covers."""

    rules: Mapping[int, str]
    runs: Mapping[str, RunOut]

    @classmethod
    def read(cls, data: OnCallAccess, who: Principal) -> Names:
        return cls({r.id: r.name for r in data.rules(who)}, {r.id: r for r in data.runs(who)})


def section(data: OnCallAccess, who: Principal) -> html.Div:
    """The Silences heading, the form (admins only), the list and the change counter."""
    admin = who.can("admin")
    names = Names.read(data, who)
    table = silences_table(data.silences(who), names, admin=admin)
    return html.Div(
        [
            html.H3("Silences"),
            html.Div(id="oncall-message", className="message"),
            silence_form(names) if admin else None,
            html.Div(table, id="silences-table"),
            dcc.Store(id="oncall-changed", data=0),
            dcc.Store(id="silences-shown", data=fingerprint(table)),
        ],
        className="silences",
    )


def silence_form(names: Names) -> html.Div:
    def field(label: str, control: Any) -> html.Label:
        return html.Label([label, control], className="field")

    return html.Div(
        [
            field(
                "rule",
                dcc.Dropdown(
                    id="silence-rule",
                    options=[{"label": n, "value": i} for i, n in names.rules.items()],
                    placeholder="any rule",
                ),
            ),
            field(
                "run",
                dcc.Dropdown(
                    id="silence-run",
                    options=[{"label": r.name, "value": r.id} for r in names.runs.values()],
                    placeholder="any run",
                ),
            ),
            field("metric", dcc.Input(id="silence-metric", placeholder="any (a glob)")),
            field(
                "for hours",
                dcc.Input(id="silence-hours", type="number", min=0, value=DEFAULT_HOURS),
            ),
            field(
                "for steps",
                dcc.Input(id="silence-steps", type="number", min=1, placeholder="past latest"),
            ),
            field("why", dcc.Input(id="silence-comment", placeholder="required")),
            field("who", dcc.Input(id="silence-by", placeholder="your token's name")),
            html.Button("Silence", id="silence-create", n_clicks=0),
        ],
        id="silence-form",
        className="controls silence-form",
    )


def covers(silence: SilenceOut, names: Names) -> str:
    """'rule grad-high · run 32b-exp1295 · grad/norm/layers.*', or the whole project."""
    parts = []
    if silence.rule_id is not None:
        parts.append(f"rule {names.rules.get(silence.rule_id, f'#{silence.rule_id}')}")
    if silence.run is not None:
        run = names.runs.get(silence.run)
        parts.append(f"run {run.name if run is not None else silence.run}")
    if silence.metric is not None:
        parts.append(silence.metric)
    return " · ".join(parts) or "every alert of the project"


def until_text(silence: SilenceOut) -> str:
    """'step 82,000', '2026-12-02 08:00 UTC', or both joined by 'or' (the first ends it)."""
    bounds = []
    if silence.until_step is not None:
        bounds.append(f"step {silence.until_step:,}")
    if silence.ends_at is not None:
        bounds.append(silence.ends_at.strftime("%Y-%m-%d %H:%M UTC"))
    return " or ".join(bounds)


def silences_table(
    silences: Sequence[SilenceOut], names: Names, *, admin: bool, now: datetime | None = None
) -> Any:
    """One row a silence, newest first; an Expire button for admins on those in force."""
    if not silences:
        return html.P(NO_SILENCES, className="empty")
    rows = []
    for s in silences:
        state = "in force" if s.active else ("expired" if s.expired_at else "ended")
        button = (
            html.Button("Expire", id={"type": "silence-expire", "silence": s.id}, n_clicks=0)
            if admin and s.active
            else None
        )
        rows.append(
            html.Tr(
                [
                    html.Td(covers(s, names), className="metric"),
                    html.Td(until_text(s)),
                    html.Td(s.created_by),
                    html.Td(s.comment),
                    html.Td(
                        html.Span(
                            state, className=f"badge badge-{'silenced' if s.active else 'off'}"
                        ),
                        title=f"created {ago(s.created_at, now)}",
                    ),
                    html.Td(button),
                ],
                className=f"silence-row {'silence-active' if s.active else 'silence-ended'}",
            )
        )
    header = html.Tr([html.Th(c) for c in SILENCE_COLUMNS])
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs silences-table")


def _number(value: object) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise Invalid(f"not a number: {value!r}")
    try:
        return float(value)
    except ValueError:
        raise Invalid(f"not a number: {value!r}") from None


def _text(value: object) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def silence_body(
    form: Mapping[str, Any], names: Names, now: datetime | None = None
) -> SilenceCreate:
    """The silence the form's values (by field id) ask for; `Invalid` saying what is
    missing or wrong (no end, steps without a run, a run or rule the viewer has not)."""
    rule = form.get("silence-rule")
    if rule is not None and (not isinstance(rule, int) or rule not in names.rules):
        raise NotFound(f"no alert rule with id {rule!r}")
    run_id = form.get("silence-run") or None
    run = names.runs.get(run_id) if isinstance(run_id, str) else None
    if run_id is not None and run is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    hours, steps = _number(form.get("silence-hours")), _number(form.get("silence-steps"))
    if not hours and not steps:
        raise Invalid(NEEDS_AN_END)
    until_step = None
    if steps:
        if run is None:
            raise Invalid(STEPS_NEED_A_RUN)
        if steps < 1 or steps != int(steps):
            raise Invalid("for steps: a whole number of steps, 1 or more")
        until_step = (run.last_step or 0) + int(steps)
    ends_at = None
    if hours:
        if not 0 < hours <= 24 * 366:
            raise Invalid("for hours: more than 0 and at most a year")
        ends_at = (now or datetime.now(UTC)) + timedelta(hours=hours)
    try:
        return SilenceCreate(
            rule_id=rule,
            run=run.id if run is not None else None,
            metric=_text(form.get("silence-metric")),
            ends_at=ends_at,
            until_step=until_step,
            comment=_text(form.get("silence-comment")) or "",
            created_by=_text(form.get("silence-by")),
        )
    except ValidationError as exc:
        raise invalid(exc, names={"comment": "why", "created_by": "who"}) from None


def error(message: str) -> html.Span:
    return html.Span(message, className="error")


def ok(message: str) -> html.Span:
    return html.Span(message, className="ok")


def _next(changed: object) -> int:
    return (changed if isinstance(changed, int) and not isinstance(changed, bool) else 0) + 1


def submit(
    data: OnCallAccess, who: Principal, n_clicks: object, changed: object, form: Mapping[str, Any]
) -> tuple[Any, Any] | None:
    """Create the form's silence: a message, and the change counter one up when made;
    None before any click."""
    if not n_clicks:
        return None
    try:
        names = Names.read(data, who)
        made = data.create_silence(who, silence_body(form, names))
    except Refusal as exc:
        return error(said(exc)), dash.no_update
    return ok(f"Silenced {covers(made, names)} until {until_text(made)}."), _next(changed)


def fingerprint(component: Any) -> str:
    """A digest of what a component draws, to tell whether a refresh changed anything."""
    text = json.dumps(component, cls=PlotlyJSONEncoder, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def act(
    data: OnCallAccess, who: Principal, trigger: TriggerId, click: bool, changed: object
) -> tuple[Any, Any] | None:
    """The clicked button's action (``trigger``: ``{"type": "alert-ack", "alert": id}`` or
    ``{"type": "silence-expire", "silence": id}``): a message and the change counter one up;
    None without a real ``click``."""
    if not isinstance(trigger, Mapping) or not click:
        return None
    kind = trigger.get("type")
    key = {"alert-ack": "alert", "silence-expire": "silence"}.get(str(kind))
    target = trigger.get(key) if key else None
    if not isinstance(target, int) or isinstance(target, bool):
        return None
    try:
        if kind == "alert-ack":
            data.acknowledge(who, target)
            return ok(f"Alert {target} acknowledged: its repeats are no longer sent."), _next(
                changed
            )
        data.expire_silence(who, target)
    except Refusal as exc:
        return error(said(exc)), dash.no_update
    return ok(f"Silence {target} expired."), _next(changed)


def refresh(data: OnCallAccess, who: Principal) -> Any:
    """The silences table as it stands now."""
    return silences_table(data.silences(who), Names.read(data, who), admin=who.can("admin"))


def register(app: dash.Dash, data: OnCallAccess) -> None:
    @app.callback(
        Output("oncall-message", "children", allow_duplicate=True),
        Output("oncall-changed", "data", allow_duplicate=True),
        Input("silence-create", "n_clicks"),
        State("oncall-changed", "data"),
        *[State(f, "value") for f in FIELDS],
        prevent_initial_call=True,
    )
    async def on_submit(n: object, changed: object, *values: Any) -> tuple[Any, Any]:
        form = dict(zip(FIELDS, values, strict=True))
        return or_prevent(await in_thread(submit, data, viewer(), n, changed, form))

    @app.callback(
        Output("oncall-message", "children", allow_duplicate=True),
        Output("oncall-changed", "data", allow_duplicate=True),
        Input({"type": "alert-ack", "alert": ALL}, "n_clicks"),
        Input({"type": "silence-expire", "silence": ALL}, "n_clicks"),
        State("oncall-changed", "data"),
        prevent_initial_call=True,
    )
    async def on_act(_acks: object, _expires: object, changed: object) -> tuple[Any, Any]:
        found = await in_thread(act, data, viewer(), triggered_id(), clicked(), changed)
        return or_prevent(found)

    @app.callback(
        Output("silences-table", "children"),
        Output("silences-shown", "data"),
        Input("oncall-changed", "data"),
        Input("alerts-refresh", "n_intervals"),
        State("silences-shown", "data"),
        prevent_initial_call=True,
    )
    async def on_change(_changed: object, _n: object, shown: object) -> tuple[Any, Any]:
        # Drawn again only when it changed: a table drawn anew every refresh replaces its
        # Expire buttons, and a click's answer in flight then was dropped for the redraw's.
        table = await in_thread(refresh, data, viewer())
        drawn = fingerprint(table)
        if drawn == shown:
            return dash.no_update, dash.no_update
        return table, drawn
