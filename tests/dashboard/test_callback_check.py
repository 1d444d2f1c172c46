"""Callback requests that fit no callback are 400s naming the fault, on a real server; a
callback that fails is a logged 500 carrying its error id, and `PreventUpdate` stays Dash's."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson
import pytest
from dash.exceptions import PreventUpdate
from starlette.types import Message, Receive, Scope, Send

from normwatch.dashboard.callback_check import CallbackErrors, callback_problem
from normwatch.testing import ServerProcess
from tests.helpers.coroutines import run_async
from tests.helpers.tenants import make_tenant

CALLBACKS: dict[str, Any] = {
    "runs-table.children": {
        "inputs": [{"id": "runs-refresh", "property": "n_intervals"}],
        "state": [],
    },
    "rule-message.children": {
        "inputs": [{"id": '{"rule":["ALL"],"type":"rule-edit"}', "property": "n_clicks"}],
        "state": [{"id": "rules-changed", "property": "data"}],
    },
}
OUT = {"id": "runs-table", "property": "children"}
TICK = {"id": "runs-refresh", "property": "n_intervals", "value": 1}
TICK_INPUT = {"id": "runs-refresh", "property": "n_intervals"}
EDIT = {"id": {"rule": 3, "type": "rule-edit"}, "property": "n_clicks", "value": 1}
CHANGED = {"id": "rules-changed", "property": "data", "value": 0}


def request(output: str, inputs: list[Any], state: list[Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"output": output, "outputs": OUT, "inputs": inputs}
    if state is not None:
        body["state"] = state
    return {**body, "changedPropIds": []}


def test_what_a_browser_sends_fits() -> None:
    assert callback_problem(request("runs-table.children", [TICK]), CALLBACKS) is None
    edit = request("rule-message.children", [[EDIT, EDIT]], [CHANGED])
    assert callback_problem(edit, CALLBACKS) is None
    none_yet = request("rule-message.children", [[]], [CHANGED])  # no rows: no buttons
    assert callback_problem(none_yet, CALLBACKS) is None


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ([1], "a callback request is a JSON object"),
        ({"inputs": []}, "output: the callback's output, a string"),
        (request("nope.children", [TICK]), "output: no callback of this dashboard"),
        ({**request("runs-table.children", [TICK]), "outputs": 3}, "outputs: an object"),
        (request("runs-table.children", []), "inputs: this callback takes 1"),
        (request("runs-table.children", [TICK, TICK]), "inputs: this callback takes 1"),
        (request("runs-table.children", [{**TICK, "id": "x"}]), "inputs[0]: not the declared"),
        (request("runs-table.children", [[TICK]]), "inputs[0]: not the declared"),
        (request("rule-message.children", [EDIT], [CHANGED]), "inputs[0]: not the declared"),
        (request("rule-message.children", [[TICK]], [CHANGED]), "inputs[0]: not the declared"),
        (request("rule-message.children", [[EDIT]]), "state: this callback takes 1"),
        (request("rule-message.children", [[EDIT]], [TICK]), "state[0]: not the declared"),
        (
            {**request("runs-table.children", [TICK]), "changedPropIds": [1]},
            "changedPropIds: a list of strings",
        ),
    ],
)
def test_what_does_not_fit_is_named(body: Any, said: str) -> None:
    problem = callback_problem(body, CALLBACKS)
    assert problem is not None and problem.startswith(said), problem


def test_crafted_callback_requests_are_400s_on_a_real_server(pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    url = "/_dash-update-component"
    with httpx.Client(base_url=pg_server.url, timeout=30) as browser:
        # Without a session the guard answers first, whatever the body.
        assert browser.post(url, content=b"not json").status_code == 401
        assert browser.get("/login", params={"token": tenant.read}).status_code == 303
        refresh = runs_refresh(browser.get("/_dash-dependencies").json())
        for body, said in (
            (b"not json", "the body is not JSON"),
            (b'{"output": "nope.children"}', "output: no callback of this dashboard"),
            (orjson.dumps({**refresh, "inputs": []}), "inputs: this"),
            (b"{" * 5000, "the body is not JSON"),
        ):
            answer = browser.post(url, content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 400, answer.text
            assert answer.json()["detail"].startswith(said)
        fitting = refresh
        # A body that fits, sent as something other than JSON (as a form or a script may):
        # refused naming the type, never passed to Dash to fail on.
        for kind in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {} if kind is None else {"content-type": kind}
            answer = browser.post(url, content=orjson.dumps(fitting), headers=headers)
            assert answer.status_code == 400, answer.text
            assert answer.json()["detail"].startswith("a callback request is JSON"), answer.text
        fits = browser.post(url, json=fitting)
        assert fits.status_code == 200 and "No runs yet" in fits.text
    assert "Traceback" not in pg_server.log()


def runs_refresh(dependencies: list[dict[str, Any]]) -> dict[str, Any]:
    """The request a browser sends when the runs list refreshes on its tick, from the
    callbacks the server lists (``/_dash-dependencies``): the view and the rest unset."""
    found = next(d for d in dependencies if "runs-table.children" in d["output"])
    outputs = [p.rpartition(".") for p in found["output"].strip(".").split("...")]

    def values(specs: list[dict[str, str]]) -> list[dict[str, Any]]:
        return [{**spec, "value": 1 if spec == TICK_INPUT else None} for spec in specs]

    return {
        "output": found["output"],
        "outputs": [{"id": i, "property": prop} for i, _, prop in outputs],
        "inputs": values(found["inputs"]),
        "state": values(found["state"]),
        "changedPropIds": ["runs-refresh.n_intervals"],
    }


def call(app: Any) -> tuple[list[Message], Any]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/_dash-update-component", "headers": []}
    try:
        run_async(CallbackErrors(app)(scope, receive, send))
    except PreventUpdate as exc:
        return sent, exc
    return sent, None


def test_a_failing_callback_is_a_logged_500_with_its_error_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise ZeroDivisionError("a bug")

    with caplog.at_level(logging.ERROR):
        sent, raised = call(failing)
    assert raised is None and sent[0]["status"] == 500
    error_id = httpx.Response(500, content=sent[1]["body"]).json()["error_id"]
    (record,) = [r for r in caplog.records if error_id in r.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError

    async def nothing_to_change(scope: Scope, receive: Receive, send: Send) -> None:
        raise PreventUpdate

    sent, raised = call(nothing_to_change)
    assert sent == [] and isinstance(raised, PreventUpdate)  # Dash answers it 204
