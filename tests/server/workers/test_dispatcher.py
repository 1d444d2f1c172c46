"""The dispatcher in a real server process: the stale clock, retries through a receiver that is
down or failing, a SIGKILL before delivery, an outage; each notification arrives once.
(A two-minute outage, played in seconds on a clock of the test's own:
``test_dispatcher_clock.py``.)
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from normwatch.testing import ServerProcess, start_server
from tests.helpers.api import client_for, create_rule, create_run, post_metrics
from tests.helpers.notifications import FLAPS
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.servers import ALERTING
from tests.helpers.tenants import make_tenant


def test_stale_fires_for_a_run_that_stops_sending(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        create_rule(
            api, receiver.url(), name="hung", metric="*", condition={"kind": "stale", "seconds": 1}
        )
        run = create_run(api, name="r", start_step=0)
        post_metrics(api, run, [0, 1], loss=[1.0, 1.0])
        [firing] = receiver.wait_for(1, timeout=10)
        assert (firing["state"], firing["run"]["id"], firing["step"]) == ("firing", run, 1)
        post_metrics(api, run, [2], loss=[1.0])
        payloads = receiver.wait_for(2, timeout=10)
        assert payloads[1]["state"] == "resolved"


def test_receiver_down_then_failing_then_up_delivers_each_once(
    alerting_server: ServerProcess,
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    receiver = WebhookReceiver(fail_first=3)  # not listening yet: connection refused
    with client_for(alerting_server, tenant) as api:
        create_rule(
            api,
            receiver.url(),
            name="down",
            metric="g",
            condition={"kind": "threshold", "op": ">", "value": 1.0},
        )
        run = create_run(api, name="r", start_step=0)
        # Firing, resolved, firing, resolved.
        post_metrics(api, run, [0, 1, 2, 3], g=[2.0, 0.0, 2.0, 0.0])
        time.sleep(1.5)
        receiver.start()
        try:
            payloads = receiver.wait_for(4, timeout=60)
            ids = [r.headers["x-normwatch-delivery"] for r in receiver.delivered]
            assert len(ids) == len(set(ids)) == 4
            assert sorted((p["step"], p["state"]) for p in payloads) == [
                (0, "firing"),
                (1, "resolved"),
                (2, "firing"),
                (3, "resolved"),
            ]
            history = api.get("/api/v1/alerts", params={"run": run}).json()
            assert all(a["notifications"][0]["attempts"] >= 2 for a in history)
        finally:
            receiver.stop()


def test_sigkill_before_delivery_delivers_after_restart_once(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    pg_url = fresh_pg_url
    receiver = WebhookReceiver()  # down while the alert fires
    # A notification the killed worker was sending is another's after the lease: 3 s here.
    settings = {**ALERTING, "NORMWATCH_DISPATCH_LEASE_S": "3"}
    server = start_server(pg_url, tmp_path, **settings)
    tenant = make_tenant(pg_url)
    try:
        with client_for(server, tenant) as api:
            create_rule(
                api,
                receiver.url(),
                name="kill",
                metric="g",
                condition={"kind": "threshold", "op": ">", "value": 1.0},
            )
            run = create_run(api, name="r", start_step=0)
            post_metrics(api, run, [0], g=[2.0])
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        receiver.start()
        port = int(server.url.rsplit(":", 1)[1])
        server = start_server(pg_url, tmp_path, port=port, **settings)
        payloads = receiver.wait_for(1, timeout=60)
        time.sleep(1.0)
        assert [(p["state"], p["step"]) for p in receiver.payloads()] == [("firing", 0)]
        assert payloads[0]["run"]["id"] == run
    finally:
        server.stop()
        receiver.stop()


@pytest.mark.slow
def test_an_outage_then_every_notification_arrives_once(fresh_pg_url: str, tmp_path: Path) -> None:
    """Refused connections, then 500s, then up: all arrive, each once, from a real server's
    dispatcher thread. (Two minutes of it, on a clock of the test's own:
    ``test_dispatcher_clock.py``.)"""
    pg_url = fresh_pg_url
    receiver = WebhookReceiver()
    server = start_server(pg_url, tmp_path, NORMWATCH_RETRY_MAX_DELAY_S="1", **ALERTING)
    tenant = make_tenant(pg_url)
    try:
        with client_for(server, tenant) as api:
            create_rule(
                api,
                receiver.url(),
                name="outage",
                metric="g",
                condition={"kind": "threshold", "op": ">", "value": 1.0},
            )
            run = create_run(api, name="r", start_step=0)
            post_metrics(api, run, list(range(6)), g=[2.0, 0.0] * 3)  # 3 firings, 3 resolves
            started = time.monotonic()
            time.sleep(6)  # connection refused all along
            receiver.healthy_at = time.monotonic() + 6
            receiver.start()  # then 500s
            payloads = receiver.wait_for(6, timeout=60)
            assert time.monotonic() - started >= 12
            time.sleep(2)
            ids = [r.headers["x-normwatch-delivery"] for r in receiver.delivered]
            assert len(ids) == len(set(ids)) == 6
            assert sorted((p["step"], p["state"]) for p in payloads) == FLAPS
            history = api.get("/api/v1/alerts", params={"run": run}).json()
            attempts = [a["notifications"][0]["attempts"] for a in history]
            assert all(n >= 5 for n in attempts), attempts
            assert all(a["notifications"][0]["status"] == "delivered" for a in history)
    finally:
        server.stop()
        receiver.stop()
