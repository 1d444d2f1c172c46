"""The run page's header follows the run: its status, segment and config come with the
tick when the run changed, read through the dashboard's real data on Postgres."""

from __future__ import annotations

import doctest
from typing import Any

import dash
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard import transforms
from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages import run_axes, run_header
from normwatch.dashboard.pages.run import layout
from normwatch.dashboard.pages.run_header import HEADER_EVERY, header_due
from normwatch.dashboard.pages.run_tick import tick
from normwatch.dashboard.pages.run_view import RunView
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, rows, text
from .seed import api, create_run, post_points, viewers

LEFT = "grad/norm/total"
SKIP = dash.no_update


def poke(n: int, *, changed: bool) -> dict[str, Any]:
    """The live channel's script's poke: open, and whether the run changed."""
    return {"n": n, "on": True, "changed": changed, "hidden": False}


def test_the_tick_sends_the_header_when_the_run_resumes_takes_config_and_finishes(
    pg_server: ServerProcess,
    dashboard_data: DashboardData,
    dashboard_sessions: sessionmaker[Session],
) -> None:
    tenant = make_tenant(pg_server.database_url)
    who = viewers(dashboard_sessions, tenant).read
    run = create_run(pg_server, tenant, "resumed-live")
    post_points(pg_server, tenant, run, [0, 1, 2], {LEFT: [1.0, 2.0, 3.0]})
    page = layout(dashboard_data, who, {}, run)
    (state,) = find(page, "Span", id="run-state")
    assert text(state["children"]) == "runningsegment 1"
    (config,) = find(page, "Details", id="run-config")
    assert text(config["children"][0]) == "Config (0 keys)"
    (seen_store,) = find(page, "Store", id="ticks-seen")
    view = RunView(run, LEFT)

    # The channel opens; nothing changed since the page was built: the header stays.
    out = tick(dashboard_data, who, view, 0, None, seen_store["data"], poke(1, changed=False))
    assert out[15:] == (SKIP, SKIP, SKIP)
    # Told the run changed, but the header shows the same: it is read and not sent.
    out = tick(dashboard_data, who, view, 0, None, out[6], poke(2, changed=True))
    assert out[15:] == (SKIP, SKIP, SKIP)

    # The trainer resumes from step 2 with two config keys, then finishes the run.
    with api(pg_server, tenant) as client:
        resumed = client.post(
            "/api/v1/runs",
            json={"name": "resumed-live", "start_step": 2, "config": {"lr": 3e-4, "seed": 7}},
        )
        assert resumed.status_code == 200, resumed.text
    post_points(pg_server, tenant, run, [2, 3, 4], {LEFT: [3.5, 4.0, 5.0]})
    out = tick(dashboard_data, who, view, 0, None, out[6], poke(3, changed=True))
    state_now, config_now, _ = out[15:]
    assert text(state_now) == "runningsegment 2 · restarted at 2"
    assert find(state_now, "Span", id="run-status")[0]["className"] == "status status-running"
    assert text(config_now[0]) == "Config (2 keys)"
    assert rows(config_now[1]) == [["lr", "0.0003"], ["seed", "7"]]
    assert out[2] == "last step 4"

    with api(pg_server, tenant) as client:
        finished = client.patch(f"/api/v1/runs/{run}", json={"status": "finished"})
        assert finished.status_code == 200, finished.text
    out = tick(dashboard_data, who, view, 0, None, out[6], poke(4, changed=True))
    state_now, config_now, _ = out[15:]
    assert text(state_now) == "finishedsegment 2 · restarted at 2"
    assert find(state_now, "Span", id="run-status")[0]["className"] == "status status-finished"
    assert config_now[0].children == "Config (2 keys)"

    # The channel open and quiet: five-second ticks read no run and send no header.
    for n in (1, 2, 3):
        out = tick(dashboard_data, who, view, n, None, out[6], poke(4, changed=True))
        assert out[15:] == (SKIP, SKIP, SKIP)


def test_without_the_channel_the_header_is_looked_at_every_few_beats() -> None:
    due = [
        b
        for b in range(1, 16)
        if header_due(told=False, version_seen=True, channel_open=False, beats=range(b, b + 1))
    ]
    assert due == [HEADER_EVERY, 2 * HEADER_EVERY, 3 * HEADER_EVERY] == [5, 10, 15]
    quiet = [
        header_due(told=False, version_seen=True, channel_open=True, beats=range(b, b + 1))
        for b in range(1, 16)
    ]
    assert quiet == [False] * 15
    assert header_due(told=True, version_seen=True, channel_open=True, beats=range(0))
    assert header_due(told=False, version_seen=False, channel_open=True, beats=range(0))


def test_doctests() -> None:
    for module in (run_header, run_axes, transforms):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 0) == (0, True), module.__name__
