"""The rules page's layout and callbacks, called directly with the dashboard's real data on
Postgres: admins change their project's rules, readers are refused, and another project's
rules look like no rules at all."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import dash
import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages import rule_form
from normwatch.dashboard.pages.rule_form import Editing
from normwatch.dashboard.pages.rules import (
    PICK_FIRST,
    READ_ONLY,
    act,
    edit,
    layout,
    refresh,
    run_preview,
    submit,
)
from normwatch.server.alerts.delivery import Deliverer
from normwatch.server.alerts.targets import parse_allow
from normwatch.server.services import alert_rules
from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .components import find, rows, text, tree
from .seed import Viewers, create_rule, create_run, post_points, threshold_rule, viewers

ADMIN_ONLY = "changing alert rules needs an admin token"
UNCHANGED = [dash.no_update] * len(rule_form.FIELDS)
HOOK = "http://127.0.0.1:9/hook"


@dataclass(frozen=True)
class World:
    project: str
    tenant: Tenant
    mine: Viewers
    theirs: Viewers
    run: str
    their_rule: int
    their_run: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    run = create_run(pg_server, mine, "rules-run")
    post_points(pg_server, mine, run, [0, 1, 2, 3], {"grad/norm/total": [1.0, 6.0, 1.0, 1.0]})
    their_rule = create_rule(pg_server, theirs, threshold_rule("their-rule", 5.0))
    their_run = create_run(pg_server, theirs, "their-run")
    return World(
        mine.project,
        mine,
        viewers(dashboard_sessions, mine),
        viewers(dashboard_sessions, theirs),
        run,
        int(their_rule["id"]),
        their_run,
    )


def fresh_rule(world: World, pg_server: ServerProcess, **fields: Any) -> tuple[int, str]:
    name = f"rule-{uuid.uuid4().hex[:8]}"
    made = create_rule(pg_server, world.tenant, {**threshold_rule(name, 5.0), **fields})
    return int(made["id"]), name


def form_values(name: str, **changes: Any) -> dict[str, Any]:
    fresh = dict(zip(rule_form.FIELDS, rule_form.defaults(), strict=True))
    return {**fresh, "rule-name": name, "rule-value": 5, **changes}


def rule_named(data: DashboardData, world: World, name: str) -> Any:
    return next((r for r in data.rules(world.mine.read) if r.name == name), None)


def message(span: Any) -> tuple[str, str]:
    """A message span's text and class."""
    shown = tree(span)
    return shown["props"]["children"], shown["props"]["className"]


# --- submit -------------------------------------------------------------------------------


def test_submit_creates_a_rule_for_an_admin(world: World, dashboard_data: DashboardData) -> None:
    name = f"made-{uuid.uuid4().hex[:8]}"
    said, changed, editing, *fields = (
        submit(dashboard_data, world.mine.admin, 1, 4, None, form_values(name)) or ()
    )
    assert message(said) == (f"Created rule {name}.", "ok")
    assert (changed, editing, fields) == (5, dash.no_update, UNCHANGED)
    made = rule_named(dashboard_data, world, name)
    assert (made.metric, made.condition["value"], made.enabled) == ("grad/norm/total", 5.0, True)


def test_submit_refuses_a_reader_and_an_invalid_form(
    world: World, dashboard_data: DashboardData
) -> None:
    name = f"refused-{uuid.uuid4().hex[:8]}"
    cases = [
        (world.mine.read, form_values(name), ADMIN_ONLY),
        (
            world.mine.admin,
            form_values(name, **{"rule-value": None}),
            "condition.threshold.value: Field required",
        ),
        (
            world.mine.admin,
            form_values(name, **{"rule-channel-url": "http://10.1.2.3/hook"}),
            "channels[0].url: 10.1.2.3 is a private address; alerts may target it only if "
            "NORMWATCH_WEBHOOK_ALLOW lists '10.1.2.3' or a network containing 10.1.2.3",
        ),
    ]
    for who, values, reason in cases:
        found = submit(dashboard_data, who, 1, 4, None, values)
        assert found is not None
        said, *rest = found
        assert message(said) == (reason, "error")
        assert rest == [dash.no_update, dash.no_update, *UNCHANGED]
    assert rule_named(dashboard_data, world, name) is None


def test_submit_before_a_click_changes_nothing(world: World, dashboard_data: DashboardData) -> None:
    for clicks in (0, None):
        found = submit(dashboard_data, world.mine.admin, clicks, 0, None, form_values("x"))
        assert found is None


def test_submit_saves_the_rule_being_edited(
    world: World, pg_server: ServerProcess, dashboard_data: DashboardData
) -> None:
    rule_id, name = fresh_rule(world, pg_server)
    values = form_values(name, **{"rule-value": 7, "rule-op": ">="})
    said, changed, editing, *fields = (
        submit(dashboard_data, world.mine.admin, 2, 0, Editing(rule_id, name), values) or ()
    )
    assert message(said) == (f"Saved rule {name}.", "ok")
    assert (changed, editing, fields) == (1, None, rule_form.defaults())
    assert rule_named(dashboard_data, world, name).condition["value"] == 7.0

    refused = submit(dashboard_data, world.mine.read, 3, 1, Editing(rule_id, name), values)
    assert refused is not None and message(refused[0]) == (ADMIN_ONLY, "error")


def test_submit_refuses_to_edit_another_projects_rule(
    world: World, dashboard_data: DashboardData
) -> None:
    editing = Editing(world.their_rule, "their-rule")
    for who in (world.mine.admin, world.mine.read):
        found = submit(dashboard_data, who, 1, 0, editing, form_values("mine-now"))
        assert found is not None
        assert message(found[0]) == (f"no alert rule with id {world.their_rule}", "error")
    (theirs,) = dashboard_data.rules(world.theirs.read)
    assert theirs.name == "their-rule"


# --- edit ---------------------------------------------------------------------------------


def test_edit_loads_the_clicked_rule(
    world: World, pg_server: ServerProcess, dashboard_data: DashboardData
) -> None:
    channel = {"type": "webhook", "url": "https://hooks.example/x", "secret": "s3cret"}
    rule_id, name = fresh_rule(world, pg_server, channels=[channel])
    trigger = {"type": "rule-edit", "rule": rule_id}
    for who in (world.mine.read, world.mine.admin):
        found = edit(dashboard_data, who, trigger, True)
        assert found is not None
        said, editing, *fields = found
        assert (said, editing) == (None, {"id": rule_id, "name": name})
        loaded = dict(zip(rule_form.FIELDS, fields, strict=True))
        assert loaded == form_values(
            name,
            **{
                "rule-value": 5.0,
                "rule-for-steps": 1,
                "rule-resolve-steps": 1,
                "rule-cooldown-steps": 0,
                "rule-repeat-every-steps": None,
                "rule-repeat-every-seconds": None,
                "rule-group-wait-steps": None,
            },
        )
        assert "s3cret" not in json.dumps(fields) and "hooks.example" not in json.dumps(fields)


def test_edit_cancel_resets_the_form(world: World, dashboard_data: DashboardData) -> None:
    cancelled = edit(dashboard_data, world.mine.read, "rule-cancel", True)
    assert cancelled == (None, None, *rule_form.defaults())


@pytest.mark.parametrize(
    ("trigger", "click"),
    [
        (None, True),
        ({"type": "rule-edit", "rule": 1}, False),  # a button appearing with 0 clicks
        ({"type": "rule-edit", "rule": "1"}, True),
        ({"type": "rule-edit"}, True),
        ("rule-edit", True),
    ],
)
def test_edit_without_a_real_click_on_a_rule_changes_nothing(
    world: World, dashboard_data: DashboardData, trigger: Any, click: bool
) -> None:
    assert edit(dashboard_data, world.mine.admin, trigger, click) is None


def test_edit_refuses_another_projects_rule(world: World, dashboard_data: DashboardData) -> None:
    trigger = {"type": "rule-edit", "rule": world.their_rule}
    found = edit(dashboard_data, world.mine.admin, trigger, True)
    assert found is not None
    said, editing, *fields = found
    assert message(said) == (f"no alert rule with id {world.their_rule}", "error")
    assert (editing, fields) == (dash.no_update, UNCHANGED)


# --- act ----------------------------------------------------------------------------------


def test_act_disables_enables_and_deletes_for_an_admin(
    world: World, pg_server: ServerProcess, dashboard_data: DashboardData
) -> None:
    rule_id, name = fresh_rule(world, pg_server)
    toggle = {"type": "rule-toggle", "rule": rule_id}
    said, changed = act(dashboard_data, world.mine.admin, toggle, True, 3) or ()
    assert (message(said), changed) == ((f"Rule {name} disabled.", "ok"), 4)
    assert rule_named(dashboard_data, world, name).enabled is False
    said, changed = act(dashboard_data, world.mine.admin, toggle, True, 4) or ()
    assert (message(said), changed) == ((f"Rule {name} enabled.", "ok"), 5)

    delete = {"type": "rule-delete", "rule": rule_id}
    said, changed = act(dashboard_data, world.mine.admin, delete, True, 5) or ()
    assert (message(said), changed) == (("Rule deleted.", "ok"), 6)
    assert rule_named(dashboard_data, world, name) is None


def test_act_refuses_a_reader(
    world: World, pg_server: ServerProcess, dashboard_data: DashboardData
) -> None:
    rule_id, name = fresh_rule(world, pg_server)
    for kind in ("rule-toggle", "rule-delete", "rule-test"):
        said, changed = (
            act(dashboard_data, world.mine.read, {"type": kind, "rule": rule_id}, True, 0) or ()
        )
        assert (message(said), changed) == ((ADMIN_ONLY, "error"), dash.no_update)
    assert rule_named(dashboard_data, world, name).enabled is True


def test_act_refuses_another_projects_rule(world: World, dashboard_data: DashboardData) -> None:
    # The page looks a rule up among the project's own; the service refuses the others.
    refusals = {
        "rule-toggle": f"no alert rule with id {world.their_rule}",
        "rule-delete": "this rule belongs to another project",
    }
    for kind, reason in refusals.items():
        trigger = {"type": kind, "rule": world.their_rule}
        said, changed = act(dashboard_data, world.mine.admin, trigger, True, 0) or ()
        assert (message(said), changed) == ((reason, "error"), dash.no_update)
    (theirs,) = dashboard_data.rules(world.theirs.admin)
    assert (theirs.name, theirs.enabled) == ("their-rule", True)


@pytest.mark.parametrize(
    ("trigger", "click"),
    [
        ({"type": "rule-toggle", "rule": 1}, False),
        ({"type": "rule-toggle", "rule": None}, True),
        ({"type": "rule-rename", "rule": 1}, True),
        ("rule-toggle", True),
        (None, True),
    ],
)
def test_act_without_a_real_click_on_a_rule_changes_nothing(
    world: World, dashboard_data: DashboardData, trigger: Any, click: bool
) -> None:
    assert act(dashboard_data, world.mine.admin, trigger, click, 0) is None


def test_act_test_sends_through_the_deliverer(
    world: World, pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]
) -> None:
    received: list[httpx.Request] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        received.append(request)
        return httpx.Response(200)

    allow = parse_allow("127.0.0.1")
    with Deliverer(transport=httpx.MockTransport(receiver), allow=allow) as deliverer:
        data = DashboardData(dashboard_sessions, deliverer=deliverer, webhook_allow=allow)
        made = data.create_rule(
            world.mine.admin,
            rule_form.to_create(
                form_values(f"hooked-{uuid.uuid4().hex[:8]}", **{"rule-channel-url": HOOK})
            ),
        )
        trigger = {"type": "rule-test", "rule": made.id}
        said, changed = act(data, world.mine.admin, trigger, True, 0) or ()
        theirs = {"type": "rule-test", "rule": world.their_rule}
        refused, _ = act(data, world.mine.admin, theirs, True, 0) or ()
    assert message(said) == ("Test send: webhook: ok (HTTP 200)", "test-result")
    assert changed is dash.no_update
    assert [(r.method, str(r.url)) for r in received] == [("POST", HOOK)]
    assert json.loads(received[0].content)["rule"]["name"] == made.name
    assert message(refused) == ("this rule belongs to another project", "error")

    plain_id, _ = fresh_rule(world, pg_server)
    said, _ = act(data, world.mine.admin, {"type": "rule-test", "rule": plain_id}, True, 0) or ()
    assert message(said) == ("This rule has no channels to test.", "test-result")


def test_act_test_without_a_deliverer_says_so(world: World, dashboard_data: DashboardData) -> None:
    trigger = {"type": "rule-test", "rule": 1}
    said, _ = act(dashboard_data, world.mine.admin, trigger, True, 0) or ()
    assert message(said) == (
        "test sends are not available here: no deliverer configured",
        "error",
    )


# --- refresh, preview, layout --------------------------------------------------------------


def test_refresh_shows_the_projects_rules(
    world: World, pg_server: ServerProcess, dashboard_data: DashboardData
) -> None:
    rule_id, name = fresh_rule(world, pg_server)
    table, options = refresh(dashboard_data, world.mine.admin)
    assert {"label": name, "value": rule_id} in options
    assert "their-rule" not in json.dumps(options)
    assert name in [row[0] for row in rows(table)]
    assert {"type": "rule-delete", "rule": rule_id} in [b["id"] for b in find(table, "Button")]
    read_table, read_options = refresh(dashboard_data, world.mine.read)
    assert read_options == options
    assert find(read_table, "Button") == []


def test_run_preview_replays_the_rule_on_the_run(
    world: World, pg_server: ServerProcess, dashboard_data: DashboardData
) -> None:
    rule_id, _ = fresh_rule(world, pg_server)
    for who in (world.mine.read, world.mine.admin):
        shown = run_preview(dashboard_data, who, 1, rule_id, world.run)
        assert text(find(shown, "P")[0]["children"]) == (
            "2 transition(s) over 1 matching metric(s)."
        )
        assert [text(li["children"]) for li in find(shown, "Li")] == [
            "firing step 1 · grad/norm/total = 6 · 6 > 5 for 1 step",
            "resolved step 2 · grad/norm/total = 1 · 1 no longer > 5",
        ]
        (graph,) = find(shown, "Graph", id="preview-chart")
        assert [t["x"] for t in graph["figure"]["data"]] == [[0, 1, 2, 3], [1], [2]]


def test_run_preview_refuses_another_projects_rule_or_run(
    world: World, pg_server: ServerProcess, dashboard_data: DashboardData
) -> None:
    rule_id, _ = fresh_rule(world, pg_server)
    for rule, run, reason in (
        (world.their_rule, world.run, "this rule belongs to another project"),
        (rule_id, world.their_run, "this run belongs to another project"),
    ):
        shown = tree(run_preview(dashboard_data, world.mine.read, 1, rule, run))
        assert (shown["type"], shown["props"]) == (
            "P",
            {"children": reason, "className": "message error"},
        )


def test_run_preview_over_its_point_limit_is_a_message(
    world: World,
    pg_server: ServerProcess,
    dashboard_data: DashboardData,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the API answers 413 is a message on the page, not a failed callback."""
    rule_id, _ = fresh_rule(world, pg_server)
    monkeypatch.setattr(alert_rules, "PREVIEW_MAX_POINTS", 3)  # the run holds 4 points
    shown = tree(run_preview(dashboard_data, world.mine.read, 1, rule_id, world.run))
    assert (shown["type"], shown["props"]) == (
        "P",
        {
            "children": "the rule matches more than 3 stored points of this run; "
            "preview it with a narrower metric",
            "className": "message error",
        },
    )


def test_run_preview_needs_a_click_a_rule_and_a_run(
    world: World, dashboard_data: DashboardData
) -> None:
    assert run_preview(dashboard_data, world.mine.read, 0, 1, world.run) is None
    for rule, run in ((None, world.run), (1, None), ("1", world.run), (1, 5)):
        shown = tree(run_preview(dashboard_data, world.mine.read, 1, rule, run))
        assert shown["props"] == {"children": PICK_FIRST, "className": "message error"}


def test_layout_for_an_admin_and_a_reader(world: World, dashboard_data: DashboardData) -> None:
    admin = layout(dashboard_data, world.mine.admin, {})
    assert [h["children"] for h in find(admin, "H1")] == [f"Alert rules in {world.project}"]
    assert len(find(admin, "Div", id="rule-form")) == 1
    assert find(admin, "P", className="muted read-only") == []
    (preview_run,) = find(admin, "Dropdown", id="preview-run")
    assert preview_run["options"] == [{"label": "rules-run", "value": world.run}]
    assert preview_run["value"] == world.run

    reader = layout(dashboard_data, world.mine.read, {})
    assert find(reader, "Div", id="rule-form") == []
    assert [p["children"] for p in find(reader, "P", className="muted read-only")] == [READ_ONLY]
    assert "their-rule" not in text(reader) and "their-run" not in json.dumps(tree(reader))


@pytest.fixture
def no_rules(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> Viewers:
    """A project of its own, with neither rules nor runs."""
    return viewers(dashboard_sessions, make_tenant(pg_server.database_url))


def test_layout_of_a_project_without_rules_or_runs(
    no_rules: Viewers, dashboard_data: DashboardData
) -> None:
    page = layout(dashboard_data, no_rules.admin, {})
    (rules_table,) = find(page, "Div", id="rules-table")
    assert text(rules_table["children"]) == "No alert rules yet."
    for dropdown in ("preview-rule", "preview-run"):
        (found,) = find(page, "Dropdown", id=dropdown)
        assert (found["options"], found.get("value")) == ([], None)
