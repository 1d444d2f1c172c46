"""The run page's "Ask the trainer" section: an admin asks the run's trainer to checkpoint
or to stop, with a reason, and everyone sees the requests and how far each got (pending,
delivered in an answer to a metric batch, seen by the trainer, expired with the run).

The trainer reads a request between its steps (`normwatch.client.Run.should_stop` /
``should_checkpoint``); the request is drawn on the chart as a ``control`` event."""

from __future__ import annotations

from typing import Any, Protocol

import dash
from dash import Input, Output, State, dcc, html

from normwatch.server.auth import Principal
from normwatch.server.schemas.control import ControlAction, ControlOut

from ..refusals import Refusal, said
from ..session import viewer
from ..wiring import TriggerId, clicked, in_thread, triggered_id
from .run_view import RunView

REFRESH_MS = 3000
BUTTONS: dict[str, ControlAction] = {"control-checkpoint": "checkpoint", "control-stop": "stop"}
STATE_TEXT = {
    "pending": "waiting for the trainer's next batch",
    "delivered": "handed to the trainer",
    "seen": "read by the trainer",
    "expired": "the run finished first",
}


class ControlAccess(Protocol):
    def control_requests(self, who: Principal, run_id: str) -> list[ControlOut]: ...

    def request_control(
        self, who: Principal, run_id: str, action: ControlAction, reason: str
    ) -> tuple[ControlOut, bool]: ...


def section(who: Principal) -> html.Div:
    """The section; its form is disabled for a viewer who is not an admin (who still sees
    the requests)."""
    admin = who.can("admin")
    form: list[Any] = [
        dcc.Input(
            id="control-reason",
            placeholder="why (shown to the trainer and on the chart)",
            maxLength=1000,
            disabled=not admin,
            className="control-reason",
        ),
        html.Button("Checkpoint", id="control-checkpoint", n_clicks=0, disabled=not admin),
        html.Button("Stop", id="control-stop", n_clicks=0, disabled=not admin, className="danger"),
    ]
    if not admin:
        form.append(html.Span("An admin can ask this run's trainer to checkpoint or to stop."))
    return html.Div(
        [
            html.H3("Ask the trainer"),
            html.Div(form, className="controls control-form"),
            html.Div(id="control-message", className="muted"),
            html.Div(id="control-list"),
            dcc.Interval(id="control-refresh", interval=REFRESH_MS),
        ],
        className="control-section",
    )


def requests_table(requests: list[ControlOut]) -> Any:
    if not requests:
        return html.P("No requests yet.", className="muted")
    head = html.Tr([html.Th(h) for h in ("asked", "by", "why", "at step", "state")])
    rows = [
        html.Tr(
            [
                html.Td(r.action),
                html.Td(r.requested_by),
                html.Td(r.reason or "—"),
                html.Td("—" if r.step is None else f"{r.step:,}"),
                html.Td(STATE_TEXT[r.state], className=f"control-state control-{r.state}"),
            ]
        )
        for r in requests
    ]
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table control-table")


def act(
    data: ControlAccess,
    who: Principal,
    view: RunView | None,
    trigger: TriggerId,
    pressed: bool,
    reason: object,
) -> tuple[Any, Any]:
    """The message and the requests table after a button (``trigger``, a real click when
    ``pressed``) or a refresh. A stop needs a reason: it ends someone's run."""
    asked = isinstance(trigger, str) and trigger in BUTTONS and pressed
    if view is None:
        return (refused("no such run in your project") if asked else ""), requests_table([])
    message: Any = dash.no_update
    if asked:
        assert isinstance(trigger, str)
        action = BUTTONS[trigger]
        text = reason.strip() if isinstance(reason, str) else ""
        if action == "stop" and not text:
            message = refused("say why the run should stop: the reason is shown to the trainer")
        else:
            try:
                made, created = data.request_control(who, view.run, action, text)
            except Refusal as exc:
                message = refused(said(exc))
            else:
                message = (
                    f"Asked the trainer to {action} (request {made.id})."
                    if created
                    else f"A {action} request (request {made.id}) is already waiting."
                )
    try:
        requests = data.control_requests(who, view.run)
    except Refusal:  # a run outside the viewer's project: nothing of it is shown
        return (message if asked else ""), requests_table([])
    return message, requests_table(requests)


def refused(why: str) -> html.Span:
    return html.Span(f"Not asked: {why}.", className="error")


def register(app: dash.Dash, data: ControlAccess) -> None:
    @app.callback(
        Output("control-message", "children"),
        Output("control-list", "children"),
        Input("control-checkpoint", "n_clicks"),
        Input("control-stop", "n_clicks"),
        Input("control-refresh", "n_intervals"),
        State("control-reason", "value"),
        State("view", "data"),
    )
    async def on_control(
        _checkpoint: object, _stop: object, _n: object, reason: object, store: object
    ) -> tuple[Any, Any]:
        return await in_thread(
            act, data, viewer(), RunView.from_store(store), triggered_id(), clicked(), reason
        )
