"""The alerts page: its texts and table, its filter, and its refresh on the dashboard's real
data (the viewer's alerts; another project's run looks like no run at all)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.alerts import (
    NO_ALERTS,
    NOTHING_FIRING,
    AlertsFilter,
    alerts_table,
    delivery_text,
    layout,
    number_text,
    refresh,
    run_href,
)
from normwatch.server.errors import RunNotFound
from normwatch.server.schemas.alerts import AlertOut, DeliveryOut
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, header, rows, text, tree
from .seed import Viewers, create_rule, create_run, post_points, threshold_rule, viewers

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
RUN = {"id": "0a1b", "name": "32b-exp1295"}


def delivery(status: str, attempts: int = 0, error: str | None = None) -> DeliveryOut:
    return DeliveryOut(
        channel="webhook",
        status=status,
        attempts=attempts,
        delivered_at=NOW if status == "delivered" else None,
        last_error=error,
    )


def alert_out(**fields: Any) -> AlertOut:
    defaults: dict[str, Any] = {
        "id": 1,
        "rule": {"id": 7, "name": "grad-high"},
        "run": RUN,
        "metric": "grad/norm/total",
        "state": "firing",
        "segment": 1,
        "step": 81_000,
        "value": 6.0,
        "threshold": 5.0,
        "reason": "6 > 5 for 1 step",
        "created_at": NOW - timedelta(minutes=5),
        "notifications": [],
    }
    return AlertOut.model_validate({**defaults, **fields})


@pytest.mark.parametrize(
    ("value", "said"),
    [(None, "—"), ("NaN", "NaN"), ("-Infinity", "-Infinity"), (5.0, "5"), (0.1 + 0.2, "0.3")],
)
def test_number_text(value: float | str | None, said: str) -> None:
    assert number_text(value) == said


def test_number_text_keeps_six_significant_digits() -> None:
    assert (number_text(1_234_567.0), number_text(3.14159265)) == ("1.23457e+06", "3.14159")


@pytest.mark.parametrize(
    ("notification", "said"),
    [
        (delivery("delivered", 1), "webhook: delivered"),
        (delivery("failed", 8, "HTTP 500"), "webhook: failed — HTTP 500"),
        (delivery("failed", 8), "webhook: failed — no error recorded"),
        (delivery("pending"), "webhook: pending"),
        (delivery("pending", 1), "webhook: pending (1 attempt)"),
        (delivery("pending", 2, "timeout"), "webhook: pending (2 attempts) — timeout"),
        (delivery("silenced"), "webhook: silenced"),
    ],
)
def test_delivery_text(notification: DeliveryOut, said: str) -> None:
    assert delivery_text(notification) == said


def test_run_href_zooms_on_the_alerts_step() -> None:
    assert run_href(alert_out()) == "/runs/0a1b?left=grad%2Fnorm%2Ftotal&start=80800&end=81200"
    assert run_href(alert_out(step=50)) == "/runs/0a1b?left=grad%2Fnorm%2Ftotal&start=0&end=250"


def test_run_href_without_a_step_opens_the_whole_run() -> None:
    stale = alert_out(step=None, metric="*", run={"id": "a/b?c", "name": "n"})
    assert run_href(stale) == "/runs/a%2Fb%3Fc?left=%2A"


def test_alerts_table_one_row_an_alert() -> None:
    alerts = [
        alert_out(notifications=[delivery("delivered", 1), delivery("failed", 3, "HTTP 404")]),
        alert_out(
            id=2,
            state="resolved",
            step=None,
            value="NaN",
            threshold=None,
            reason="finite again",
            created_at=NOW - timedelta(days=2),
        ),
    ]
    table = alerts_table(alerts, empty="unused", now=NOW)
    assert tree(table)["props"]["className"] == "runs alerts"
    assert header(table) == [
        "rule",
        "run",
        "metric",
        "state",
        "step",
        "value",
        "threshold",
        "reason",
        "time",
        "delivery",
    ]
    assert rows(table) == [
        [
            "grad-high",
            "32b-exp1295",
            "grad/norm/total",
            "firing",
            "81,000",
            "6",
            "5",
            "6 > 5 for 1 step",
            "5 min ago",
            "webhook: deliveredwebhook: failed — HTTP 404",
        ],
        [
            "grad-high",
            "32b-exp1295",
            "grad/norm/total",
            "resolved",
            "—",
            "NaN",
            "—",
            "finite again",
            "2 d ago",
            "no channels",
        ],
    ]
    assert [t["className"] for t in find(table, "Tr") if "className" in t] == [
        "alert-row alert-firing",
        "alert-row alert-resolved",
    ]
    assert [d["className"] for d in find(table, "Div")] == [
        "delivery delivery-delivered",
        "delivery delivery-failed",
    ]
    assert [link["href"] for link in find(table, "Link", className="alert-run-link")] == [
        run_href(alerts[0]),
        run_href(alerts[1]),
    ]


def test_alerts_table_without_alerts() -> None:
    empty = tree(alerts_table([], empty=NOTHING_FIRING))
    assert (empty["type"], empty["props"]) == (
        "P",
        {"children": NOTHING_FIRING, "className": "empty"},
    )


@pytest.mark.parametrize(
    ("store", "shown"),
    [
        ({"run": None}, AlertsFilter()),
        ({"run": "0a1b"}, AlertsFilter("0a1b")),
        ({}, AlertsFilter()),
        (None, None),
        (["0a1b"], None),
        ({"run": 5}, None),
        ({"run": {"id": "0a1b"}}, None),
    ],
)
def test_alerts_filter_from_store(store: Any, shown: AlertsFilter | None) -> None:
    assert AlertsFilter.from_store(store) == shown


def test_alerts_filter_round_trip() -> None:
    for shown in (AlertsFilter(), AlertsFilter("0a1b")):
        assert AlertsFilter.from_store(shown.to_store()) == shown


# --- on the real data ---------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    project: str
    mine: Viewers
    theirs: Viewers
    alerting_run: str
    quiet_run: str
    their_run: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    runs: dict[str, str] = {}
    for tenant, rule, names in (
        (mine, "grad-high", ("alerting", "quiet")),
        (theirs, "theirs", ("their",)),
    ):
        create_rule(pg_server, tenant, threshold_rule(rule, 5.0))
        for name in names:
            runs[name] = create_run(pg_server, tenant, f"{name}-run")
    grad = {"grad/norm/total": [1.0, 6.0, 7.0]}
    post_points(pg_server, mine, runs["alerting"], [0, 1, 2], grad)
    post_points(pg_server, mine, runs["quiet"], [0, 1, 2], {"grad/norm/total": [1.0] * 3})
    post_points(pg_server, theirs, runs["their"], [0, 1, 2], grad)
    return World(
        mine.project,
        viewers(dashboard_sessions, mine),
        viewers(dashboard_sessions, theirs),
        runs["alerting"],
        runs["quiet"],
        runs["their"],
    )


def alert_rows(table: Any) -> list[list[str]]:
    """The rows with the time cell checked and left out (it moves with the clock)."""
    found = rows(table)
    for row in found:
        assert re.fullmatch(r"\d+ (s|min) ago", row.pop(8)), row
    return found


def test_refresh_shows_the_viewers_alerts(world: World, dashboard_data: DashboardData) -> None:
    firing_row = [
        "grad-high",
        "alerting-run",
        "grad/norm/total",
        "firing",
        "1",
        "6",
        "5",
        "6 > 5 for 1 step",
        "no channels",
    ]
    for shown in (AlertsFilter(), AlertsFilter(world.alerting_run)):
        for who in (world.mine.read, world.mine.admin):
            firing, recent = refresh(dashboard_data, who, shown)
            # An admin may take the firing alert on; nobody acknowledges from the history.
            ack = "Acknowledge" if who is world.mine.admin else ""
            assert alert_rows(firing) == [firing_row[:3] + ["firing" + ack] + firing_row[4:]]
            assert alert_rows(recent) == [firing_row]
            buttons = find(firing, "Button")
            assert [b["id"]["type"] for b in buttons] == (["alert-ack"] if ack else [])


def test_refresh_of_a_quiet_run(world: World, dashboard_data: DashboardData) -> None:
    firing, recent = refresh(dashboard_data, world.mine.read, AlertsFilter(world.quiet_run))
    assert (text(firing), text(recent)) == (NOTHING_FIRING, NO_ALERTS)


def test_refresh_of_another_projects_run_or_no_filter_is_empty(
    world: World, dashboard_data: DashboardData
) -> None:
    for shown in (AlertsFilter(world.their_run), AlertsFilter("f" * 32), None):
        firing, recent = refresh(dashboard_data, world.mine.read, shown)
        assert (text(firing), text(recent)) == (NOTHING_FIRING, NO_ALERTS)


def test_layout_of_one_run(world: World, dashboard_data: DashboardData) -> None:
    page = layout(dashboard_data, world.mine.read, {"run": world.alerting_run})
    title = f"Alerts in {world.project} for run {world.alerting_run}"
    assert [h["children"] for h in find(page, "H1")] == [title]
    assert [link["href"] for link in find(page, "Link", children="all alerts")] == ["/alerts"]
    (store,) = find(page, "Store", id="alerts-filter")
    assert store["data"] == {"run": world.alerting_run}
    (firing,) = find(page, "Div", id="alerts-firing")
    assert "alerting-run" in text(firing["children"])


def test_layout_of_the_project(world: World, dashboard_data: DashboardData) -> None:
    page = layout(dashboard_data, world.mine.admin, {})
    assert [h["children"] for h in find(page, "H1")] == [f"Alerts in {world.project}"]
    assert find(page, "Link", children="all alerts") == []
    assert find(page, "Store", id="alerts-filter")[0]["data"] == {"run": None}
    assert "their-run" not in text(page)


def test_layout_of_another_projects_run_is_not_found(
    world: World, dashboard_data: DashboardData
) -> None:
    with pytest.raises(RunNotFound):
        layout(dashboard_data, world.mine.read, {"run": world.their_run})
