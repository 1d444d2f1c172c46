"""Alert pages in real headless Chromium: rules made in the form fire on posted data,
show on /alerts and as markers on the run chart; a read-only viewer cannot change rules."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page

from normwatch.testing import ServerProcess
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.tenants import Tenant, make_tenant

GRAPH = "#overlay .js-plotly-plot"
TRACES_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data) return null;
  return gd.data.map(t => ({{name: t.name, yaxis: t.yaxis || 'y', x: Array.from(t.x || []),
                             text: t.text ? Array.from(t.text) : null,
                             symbol: t.marker && t.marker.symbol}}));
}}"""


@pytest.fixture(scope="module")
def hook() -> Iterator[WebhookReceiver]:
    """One receiver for the module's rules (its notifications are checked in order)."""
    with WebhookReceiver() as receiver:
        yield receiver


def post_points(
    server: ServerProcess, tenant: Tenant, run_id: str, values: dict[int, float]
) -> None:
    body = {"steps": list(values), "metrics": {"grad/norm/total": list(values.values())}}
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        assert api.post(f"/api/v1/runs/{run_id}/metrics", json=body).status_code == 202


def seed_run(server: ServerProcess, tenant: Tenant) -> str:
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        run = api.post("/api/v1/runs", json={"name": "alert-run", "start_step": 0}).json()
    post_points(server, tenant, run["id"], {s: 1.0 for s in range(1000)})
    return str(run["id"])


def login(page: Page, server: ServerProcess, token: str) -> None:
    page.goto(f"{server.url}/login?token={token}")
    page.wait_for_selector("main .card")


def traces(page: Page) -> list[dict[str, Any]]:
    page.wait_for_function(f"() => {{ const t = ({TRACES_JS})(); return t && t.length >= 3; }}")
    result: list[dict[str, Any]] = page.evaluate(f"({TRACES_JS})()")
    return result


def test_rule_from_form_fires_on_alerts_page_and_run_chart(
    page: Page, alerting_server: ServerProcess, hook: WebhookReceiver, artifacts: Path
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    run_id = seed_run(alerting_server, tenant)
    login(page, alerting_server, tenant.admin)
    page.click("a#nav-rules")
    page.wait_for_selector("#rule-form")
    assert "No alert rules yet." in page.inner_text("#rules-table")

    # A refused channel URL is a readable message, not a crash.
    page.fill("#rule-name", "grad-high")
    page.fill("#rule-value", "5")
    page.fill("#rule-channel-url", "http://10.1.2.3/hook")
    page.click("#rule-create")
    page.wait_for_selector("#rule-message .error")
    refused = page.inner_text("#rule-message")
    assert refused.startswith("channels[0].url: ") and "10.1.2.3" in refused
    # A missing threshold names the field.
    page.fill("#rule-value", "")
    page.click("#rule-create")
    page.wait_for_function(
        "() => document.querySelector('#rule-message').innerText.includes('condition')"
    )
    assert "value" in page.inner_text("#rule-message")

    page.fill("#rule-value", "5")
    page.fill("#rule-channel-url", hook.url())
    page.fill("#rule-channel-secret", "s3cret-value")
    page.click("#rule-create")
    page.wait_for_selector("#rule-message :text('Created rule grad-high.')")
    page.wait_for_selector("tr.rule-row")
    row = page.inner_text("tr.rule-row")
    assert "grad-high" in row and "grad/norm/total" in row
    assert "threshold: value > 5 (resolves after 10 calm steps)" in row and "enabled" in row
    assert "repeats every 1,000 steps" in row
    assert f"webhook: {hook.url()} (signed)" in row
    assert "s3cret-value" not in page.inner_html("#rules-table")
    # The same name again is refused by the service.
    page.click("#rule-create")
    page.wait_for_selector("#rule-message :text('already has a rule named')")

    # Send test: one delivery to the receiver, reported on the page.
    page.click("tr.rule-row button:text('Send test')")
    page.wait_for_selector("#rule-message :text('Test send: webhook: ok (HTTP 200)')")
    # The API's test send builds the same sample notification.
    with httpx.Client(base_url=alerting_server.url, headers=tenant.headers("admin")) as api:
        (rule,) = api.get("/api/v1/alert-rules").json()
        sent = api.post(f"/api/v1/alert-rules/{rule['id']}/test").json()
    assert [(t["channel"], t["ok"], t["status_code"]) for t in sent] == [("webhook", True, 200)]
    # The receiver records an answer once it has written it, a moment after the sender read it.
    delivered = hook.wait_for(2)
    assert [(b["state"], b["rule"]["name"], b["run"]["name"]) for b in delivered] == [
        ("firing", "grad-high", "(test notification)")
    ] * 2

    # Data crosses the threshold at step 1002: firing now, with a link to the zoomed run.
    post_points(alerting_server, tenant, run_id, {1000: 1.0, 1001: 2.0, 1002: 6.0, 1003: 7.0})
    page.click("a#nav-alerts")
    page.wait_for_selector("#alerts-firing tr.alert-row")
    firing = page.inner_text("#alerts-firing tr.alert-row")
    assert "grad-high" in firing and "alert-run" in firing and "1,002" in firing
    assert "firing" in firing and "6 > 5 for 1 step" in firing
    link = page.get_attribute("#alerts-firing a.alert-run-link", "href")
    assert link == f"/runs/{run_id}?left=grad%2Fnorm%2Ftotal&start=802&end=1202"
    assert page.locator("#alerts-firing .badge-firing").count() == 1
    page.wait_for_selector("#alerts-recent .delivery-delivered", timeout=10_000)
    assert "webhook: delivered" in page.inner_text("#alerts-recent")

    # It resolves after ten calm steps, the new rule's default (1004-1013: at step 1013);
    # the open page catches up without a reload.
    post_points(alerting_server, tenant, run_id, {1004: 1.0, 1005: 1.0})
    time.sleep(0.5)
    assert "Nothing is firing." not in page.inner_text("#alerts-firing")
    post_points(alerting_server, tenant, run_id, {s: 1.0 for s in range(1006, 1016)})
    page.wait_for_selector("#alerts-firing :text('Nothing is firing.')", timeout=10_000)
    page.wait_for_selector("#alerts-recent .badge-resolved")
    states = page.locator("#alerts-recent .badge").all_inner_texts()
    assert states == ["resolved", "firing"]
    page.wait_for_function(
        "() => document.querySelectorAll('#alerts-recent .delivery-delivered').length === 2",
        timeout=10_000,
    )
    assert [(b["state"], b["step"]) for b in hook.payloads()[2:]] == [
        ("firing", 1002),
        ("resolved", 1013),
    ]
    page.screenshot(path=str(artifacts / "alerts.png"), full_page=True)

    # The run page, from the alert's link: markers at the firing and resolving steps.
    page.click("#alerts-recent tr.alert-firing a.alert-run-link")
    page.wait_for_url(f"**/runs/{run_id}?*")
    data = traces(page)
    assert (data[0]["name"], data[0]["yaxis"]) == ("grad/norm/total", "y")
    by_name = {t["name"]: t for t in data}
    assert by_name["alert firing"]["x"] == [1002] and by_name["alert firing"]["yaxis"] == "y3"
    assert by_name["alert firing"]["symbol"] == "triangle-down"
    assert "grad-high · grad/norm/total = 6 ·" in by_name["alert firing"]["text"][0]
    assert by_name["alert resolved"]["x"] == [1013]
    page.screenshot(path=str(artifacts / "run-alerts.png"), full_page=True)
    assert page.get_attribute("#run-alerts-link", "href") == f"/alerts?run={run_id}"
    page.click("#run-alerts-link")
    page.wait_for_selector("#alerts-recent tr.alert-row")
    assert f"for run {run_id}" in page.inner_text("main h1")
    assert page.locator("#alerts-recent tr.alert-row").count() == 2

    # Preview replays the rule on the stored run: the same two transitions, charted.
    page.click("a#nav-rules")
    page.wait_for_selector("tr.rule-row")
    page.click("#preview-go")
    page.wait_for_selector(".preview-summary")
    assert "2 transition(s) over 1 matching metric(s)." in page.inner_text(".preview-summary")
    items = page.locator(".preview-transitions li").all_inner_texts()
    assert [i.split(" · ")[0] for i in items] == ["firing step 1,002", "resolved step 1,013"]
    page.wait_for_function(
        "() => { const g = document.querySelector('#preview-chart .js-plotly-plot');"
        " return g && g.data && g.data.length === 3; }"
    )
    page.screenshot(path=str(artifacts / "rules.png"), full_page=True)

    # Edit: the form loads the rule, never its channel's URL or secret; Cancel goes back.
    with httpx.Client(base_url=alerting_server.url, headers=tenant.headers("admin")) as api:
        before = api.get(f"/api/v1/alert-rules/{rule['id']}").json()
    assert before["channels"][0]["secret"] != "s3cret-value"
    page.click("tr.rule-row button:text('Edit')")
    page.wait_for_selector("#rule-create:text('Save changes')")
    assert page.input_value("#rule-name") == "grad-high"
    assert page.input_value("#rule-metric") == "grad/norm/total"
    assert page.input_value("#rule-value") == "5"
    assert page.input_value("#rule-run-name") == "*"
    assert page.input_value("#rule-channel-url") == ""
    assert page.input_value("#rule-channel-secret") == ""
    assert "Edit rule grad-high" in page.inner_text("#rule-form-title")
    page.click("#rule-cancel")
    page.wait_for_selector("#rule-create:text('Create rule')")
    assert page.input_value("#rule-name") == "" and not page.is_visible("#rule-cancel")

    # A refused edit is the same readable message; a valid one saves, channels kept.
    page.click("tr.rule-row button:text('Edit')")
    page.wait_for_function("() => document.querySelector('#rule-value').value === '5'")
    page.fill("#rule-value", "")
    page.click("#rule-create")
    page.wait_for_selector("#rule-message .error")
    assert "condition" in page.inner_text("#rule-message")
    assert "value" in page.inner_text("#rule-message")
    page.fill("#rule-value", "7")
    page.click("#rule-create")
    page.wait_for_selector("#rule-message :text('Saved rule grad-high.')")
    page.wait_for_selector("tr.rule-row :text('threshold: value > 7')")
    assert f"webhook: {hook.url()} (signed)" in page.inner_text("tr.rule-row")
    assert page.inner_text("#rule-create") == "Create rule"
    with httpx.Client(base_url=alerting_server.url, headers=tenant.headers("admin")) as api:
        after = api.get(f"/api/v1/alert-rules/{rule['id']}").json()
    assert after["condition"]["value"] == 7 and after["condition"]["op"] == ">"
    assert after["channels"] == before["channels"]
    assert (after["name"], after["metric"], after["runs"]) == (
        "grad-high",
        "grad/norm/total",
        before["runs"],
    )
    assert "s3cret-value" not in page.content()

    # Disable, then delete.
    page.click("tr.rule-row button:text('Disable')")
    page.wait_for_selector("#rule-message :text('Rule grad-high disabled.')")
    page.wait_for_selector("tr.rule-row button:text('Enable')")
    assert "disabled" in page.inner_text("tr.rule-row")
    page.click("tr.rule-row button:text('Delete')")
    page.wait_for_selector("#rules-table :text('No alert rules yet.')")


def test_read_only_viewer_sees_rules_without_form(
    page: Page, alerting_server: ServerProcess
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    rule = {
        "name": "nan-watch",
        "metric": "grad/norm/**",
        "condition": {"kind": "non_finite"},
        "channels": [
            {"type": "slack", "url": "https://hooks.slack.com/services/T000/B000/XXXXSECRET"}
        ],
    }
    with httpx.Client(base_url=alerting_server.url, headers=tenant.headers("admin")) as api:
        assert api.post("/api/v1/alert-rules", json=rule).status_code == 201
    login(page, alerting_server, tenant.read)
    page.goto(f"{alerting_server.url}/rules")
    page.wait_for_selector("tr.rule-row")
    row = page.inner_text("tr.rule-row")
    assert "nan-watch" in row and "non_finite: value is NaN or ±Inf" in row
    assert "slack: https://hooks.slack.com/services/••••" in row
    assert "XXXXSECRET" not in page.content()
    assert "Read-only" in page.inner_text("main")
    assert page.locator("#rule-form").count() == 0
    assert page.locator("tr.rule-row button").count() == 0
    page.goto(f"{alerting_server.url}/alerts")
    page.wait_for_selector("#alerts-recent :text('No alerts yet.')")


def test_acknowledge_and_silence_from_the_alerts_page(
    page: Page, alerting_server: ServerProcess, receiver: WebhookReceiver, artifacts: Path
) -> None:
    """An admin takes a firing alert on (its repeats stop going out), silences the metric
    (the resolve is recorded, not sent) and expires the silence; a read viewer sees both
    and can change neither."""
    page.set_default_timeout(30_000)  # the tables refresh every 2 s, slower on a busy machine
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tenant = make_tenant(alerting_server.database_url)
    run_id = seed_run(alerting_server, tenant)
    rule = {
        "name": "grad-5",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
        "repeat_every_steps": 2,
        "channels": [{"type": "webhook", "url": receiver.url()}],
    }
    with httpx.Client(base_url=alerting_server.url, headers=tenant.headers("admin")) as api:
        assert api.post("/api/v1/alert-rules", json=rule).status_code == 201
    post_points(alerting_server, tenant, run_id, {1000: 6.0})
    [firing] = receiver.wait_for(1)
    assert (firing["state"], firing["step"]) == ("firing", 1000)

    login(page, alerting_server, tenant.admin)
    page.click("a#nav-alerts")
    page.wait_for_selector("#alerts-firing tr.alert-row")
    page.click("#alerts-firing button:text('Acknowledge')")
    page.wait_for_selector("#oncall-message :text('acknowledged: its repeats are no longer sent')")
    page.wait_for_selector("#alerts-firing :text('acknowledged by admin token')")
    assert page.locator("#alerts-firing button").count() == 0
    # Repeats at 1002 and 1004 are recorded and not sent; the firing row counts them.
    post_points(alerting_server, tenant, run_id, {1001: 6.5, 1002: 7.0, 1003: 6.0, 1004: 8.0})
    page.wait_for_selector("#alerts-firing :text('repeat 2')")
    assert page.locator("#alerts-recent .alert-repeat").all_inner_texts() == [
        "repeat 2",
        "repeat 1",
    ]

    # The form refuses what cannot be a silence, then silences the metric for an hour.
    page.fill("#silence-hours", "")
    page.fill("#silence-comment", "planned restart")
    page.click("#silence-create")
    page.wait_for_selector("#oncall-message .error:has-text('a silence must end')")
    page.fill("#silence-steps", "100")
    page.click("#silence-create")
    page.wait_for_selector("#oncall-message .error:has-text('pick the run')")
    page.fill("#silence-steps", "")
    page.fill("#silence-hours", "1")
    page.fill("#silence-metric", "grad/norm/*")
    page.fill("#silence-by", "alice")
    page.click("#silence-create")
    page.wait_for_selector("#oncall-message .ok:has-text('Silenced grad/norm/* until')")
    page.wait_for_selector("#silences-table tr.silence-active")
    row = page.inner_text("#silences-table tr.silence-row")
    assert "grad/norm/*" in row and "alice" in row and "planned restart" in row
    assert "in force" in row
    # Ten calm steps later the rule resolves: recorded as silenced, not sent.
    post_points(alerting_server, tenant, run_id, {s: 1.0 for s in range(1005, 1016)})
    page.wait_for_selector("#alerts-firing :text('Nothing is firing.')")
    page.wait_for_selector("#alerts-recent .alert-resolved .alert-silenced")
    assert "not sent: silence #" in page.inner_text("#alerts-recent tr.alert-resolved")
    page.screenshot(path=str(artifacts / "silences.png"), full_page=True)
    time.sleep(1.5)  # two dispatcher ticks: nothing else is on its way
    assert [(p["state"], p["step"]) for p in receiver.payloads()] == [("firing", 1000)]

    page.click("#silences-table button:text('Expire')")
    page.wait_for_selector("#oncall-message :text('expired.')")
    page.wait_for_selector("#silences-table tr.silence-ended :text('expired')")
    assert page.locator("#silences-table button").count() == 0

    # A read viewer sees the silence and the acknowledgement, and no form or button.
    login(page, alerting_server, tenant.read)
    page.goto(f"{alerting_server.url}/alerts")
    page.wait_for_selector("#silences-table tr.silence-row")
    assert page.locator("#silence-form").count() == 0
    assert page.locator("main button").count() == 0
    assert "acknowledged by admin token" in page.inner_text("#alerts-recent")
    assert errors == []
