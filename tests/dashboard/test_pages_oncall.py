"""The alerts page's on-call half on the dashboard's real data: the silence form's values
as the silence they ask for, silences made, listed and expired, firing alerts acknowledged,
and every change refused to a read-only viewer and to another project's objects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import dash
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.alerts import AlertsFilter
from normwatch.dashboard.pages.alerts import refresh as refresh_alerts
from normwatch.dashboard.pages.oncall import (
    FIELDS,
    NEEDS_AN_END,
    NO_SILENCES,
    STEPS_NEED_A_RUN,
    Names,
    act,
    covers,
    refresh,
    silence_body,
    submit,
    until_text,
)
from normwatch.server.errors import Invalid, ServiceError
from normwatch.server.schemas import RunOut
from normwatch.server.schemas.alerts import SilenceOut
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, rows, text
from .seed import Viewers, create_rule, create_run, post_points, threshold_rule, viewers

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

NEEDS_ADMIN = "silencing and acknowledging alerts needs an admin token"


def form(**values: Any) -> dict[str, Any]:
    """The form as a browser sends it: every field, the given ones filled in."""
    names = {f.removeprefix("silence-"): f for f in FIELDS}
    return {**dict.fromkeys(FIELDS), **{names[k]: v for k, v in values.items()}}


def run_out(run_id: str, name: str, last_step: int | None) -> RunOut:
    return RunOut.model_validate(
        {
            "id": run_id,
            "project": "p",
            "name": name,
            "status": "running",
            "segment": 1,
            "last_step": last_step,
            "created_at": NOW,
            "updated_at": NOW,
            "last_seen": NOW,
            "tags": [],
            "config": {},
        }
    )


NAMES = Names({3: "grad-high"}, {"r1": run_out("r1", "32b-exp1295", 81_250)})


def test_the_form_asks_for_an_end_and_counts_steps_from_the_runs_latest_step() -> None:
    with pytest.raises(Invalid, match=NEEDS_AN_END):
        silence_body(form(comment="x", hours=None), NAMES, NOW)
    with pytest.raises(Invalid, match=STEPS_NEED_A_RUN):
        silence_body(form(comment="x", hours=None, steps=500), NAMES, NOW)
    body = silence_body(
        form(rule=3, run="r1", metric=" grad/norm/layers.* ", steps=750, comment="router"),
        NAMES,
        NOW,
    )
    assert (body.rule_id, body.run, body.metric) == (3, "r1", "grad/norm/layers.*")
    assert (body.until_step, body.ends_at, body.comment) == (82_000, None, "router")
    both = silence_body(form(run="r1", hours=1.5, steps=10, comment="c", by="alice"), NAMES, NOW)
    assert (both.until_step, both.ends_at) == (81_260, NOW + timedelta(hours=1.5))
    assert both.created_by == "alice"


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"hours": 2}, "why: "),
        ({"hours": 2, "comment": "  "}, "why: "),
        ({"hours": -1, "comment": "c"}, "for hours: more than 0"),
        ({"hours": "soon", "comment": "c"}, "not a number"),
        ({"run": "r1", "steps": 2.5, "comment": "c"}, "for steps: a whole number"),
        ({"run": "nope", "hours": 1, "comment": "c"}, "no run with id 'nope'"),
        ({"rule": 4, "hours": 1, "comment": "c"}, "no alert rule with id 4"),
        ({"metric": "x" * 513, "hours": 1, "comment": "c"}, "metric: "),
    ],
)
def test_the_form_names_what_is_wrong(values: dict[str, Any], said: str) -> None:
    with pytest.raises(ServiceError) as refused:
        silence_body(form(**values), NAMES, NOW)
    assert str(refused.value).startswith(said), str(refused.value)


def silence_out(**fields: Any) -> SilenceOut:
    defaults: dict[str, Any] = {
        "id": 1,
        "project": "p",
        "rule_id": None,
        "run": None,
        "metric": None,
        "ends_at": None,
        "until_step": None,
        "created_by": "alice",
        "comment": "c",
        "created_at": NOW,
        "expired_at": None,
        "active": True,
    }
    return SilenceOut.model_validate({**defaults, **fields})


def test_what_a_silence_covers_and_until_when() -> None:
    assert covers(silence_out(), NAMES) == "every alert of the project"
    everything = silence_out(rule_id=3, run="r1", metric="loss*")
    assert covers(everything, NAMES) == "rule grad-high · run 32b-exp1295 · loss*"
    assert covers(silence_out(rule_id=9, run="gone"), NAMES) == "rule #9 · run gone"
    assert until_text(silence_out(until_step=82_000)) == "step 82,000"
    bounded = silence_out(until_step=82_000, ends_at=NOW)
    assert until_text(bounded) == "step 82,000 or 2026-06-01 12:00 UTC"


@dataclass(frozen=True)
class World:
    mine: Viewers
    theirs: Viewers
    run: str
    rule: int
    their_alert: int


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    rule = create_rule(
        pg_server, mine, {**threshold_rule("grad-high", 5.0), "repeat_every_steps": 2}
    )
    create_rule(pg_server, theirs, threshold_rule("theirs", 5.0))
    run = create_run(pg_server, mine, "oncall-run")
    their_run = create_run(pg_server, theirs, "their-run")
    # Fires at 1 and repeats at 3 and 5: the firing table shows the episode's opening alert.
    post_points(pg_server, mine, run, range(6), {"grad/norm/total": [1.0, 6, 7, 8, 6, 9]})
    post_points(pg_server, theirs, their_run, [0, 1], {"grad/norm/total": [1.0, 6.0]})
    theirs_viewers = viewers(dashboard_sessions, theirs)
    data = DashboardData(dashboard_sessions)
    (their_alert,) = data.firing(theirs_viewers.read)
    return World(viewers(dashboard_sessions, mine), theirs_viewers, run, rule["id"], their_alert.id)


def firing_rows(data: DashboardData, viewers: Viewers) -> list[list[str]]:
    firing, _ = refresh_alerts(data, viewers.admin, AlertsFilter())
    return [[cell for i, cell in enumerate(row) if i != 8] for row in rows(firing)]


def test_a_firing_alert_is_acknowledged_once_from_its_episodes_opening(
    world: World, dashboard_data: DashboardData
) -> None:
    (alert,) = dashboard_data.firing(world.mine.read)
    assert (alert.step, alert.repeat, alert.worst, alert.value) == (1, 2, 9.0, 6.0)
    assert firing_rows(dashboard_data, world.mine)[0][3] == "firingrepeat 2Acknowledge"
    trigger = {"type": "alert-ack", "alert": alert.id}

    refused, changed = act(dashboard_data, world.mine.read, trigger, True, 4)
    assert (text(refused), changed) == (NEEDS_ADMIN, dash.no_update)
    assert dashboard_data.firing(world.mine.read)[0].acked is None
    # Another project's alert: refused by the service, and nothing of it is said.
    other, _ = act(
        dashboard_data, world.mine.admin, {**trigger, "alert": world.their_alert}, True, 4
    )
    assert text(other) == "this alert belongs to another project"
    assert dashboard_data.firing(world.theirs.read)[0].acked is None
    assert act(dashboard_data, world.mine.admin, trigger, False, 4) is None  # no real click

    done, changed = act(dashboard_data, world.mine.admin, trigger, True, 4)
    assert (text(done), changed) == (
        f"Alert {alert.id} acknowledged: its repeats are no longer sent.",
        5,
    )
    (acked,) = dashboard_data.firing(world.mine.read)
    assert acked.acked is not None and acked.acked["by"] == "admin token"
    said = firing_rows(dashboard_data, world.mine)[0][3]
    assert said == "firingrepeat 2acknowledged by admin token"
    firing, _ = refresh_alerts(dashboard_data, world.mine.admin, AlertsFilter())
    assert find(firing, "Button") == []


def test_a_silence_is_made_listed_and_expired_by_an_admin_only(
    world: World, dashboard_data: DashboardData
) -> None:
    values = form(rule=world.rule, run=world.run, steps=100, comment="router warm-up", by="bob")
    assert submit(dashboard_data, world.mine.admin, 0, 0, values) is None  # before a click
    refused, changed = submit(dashboard_data, world.mine.read, 1, 0, values)
    assert (text(refused), changed) == (NEEDS_ADMIN, dash.no_update)
    assert dashboard_data.silences(world.mine.read) == []
    assert text(refresh(dashboard_data, world.mine.read)) == NO_SILENCES

    made, changed = submit(dashboard_data, world.mine.admin, 1, 0, values)
    assert changed == 1
    assert text(made) == "Silenced rule grad-high · run oncall-run until step 105."
    (silence,) = dashboard_data.silences(world.mine.read)
    assert (silence.until_step, silence.created_by, silence.comment) == (
        105,
        "bob",
        "router warm-up",
    )
    assert dashboard_data.silences(world.theirs.admin) == []
    table = refresh(dashboard_data, world.mine.admin)
    assert rows(table) == [
        [
            "rule grad-high · run oncall-run",
            "step 105",
            "bob",
            "router warm-up",
            "in force",
            "Expire",
        ]
    ]
    assert rows(refresh(dashboard_data, world.mine.read))[0][-1] == ""  # no button to read

    expire = {"type": "silence-expire", "silence": silence.id}
    refused, _ = act(dashboard_data, world.mine.read, expire, True, 1)
    assert text(refused) == NEEDS_ADMIN
    theirs, _ = act(dashboard_data, world.theirs.admin, expire, True, 1)
    assert text(theirs) == "this silence belongs to another project"
    assert dashboard_data.silences(world.mine.read)[0].active
    done, changed = act(dashboard_data, world.mine.admin, expire, True, 1)
    assert (text(done), changed) == (f"Silence {silence.id} expired.", 2)
    assert rows(refresh(dashboard_data, world.mine.admin))[0][4:] == ["expired", ""]
    # A silence on another project's run is refused.
    alien = form(run="f" * 32, hours=1, comment="c")
    said, _ = submit(dashboard_data, world.mine.admin, 1, 0, alien)
    assert text(said) == f"no run with id {'f' * 32!r}"
