"""Alert notifications as the dispatcher hands them to the deliverer."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from normwatch.server.alerts.payloads import Notification, dashboard_link

FLAPS = [(step, "firing" if step % 2 == 0 else "resolved") for step in range(6)]
"""(step, state) of the notifications a ``> 1`` rule owes for ``[2.0, 0.0] * 3`` at steps
0-5: three firings, each resolved a step later."""

NOW = 1_700_000_000.0
"""The deliverer's clock in these tests: the ``X-Normwatch-Timestamp`` it sends."""


def notification(**changes: Any) -> Notification:
    """A firing threshold notification of a grad norm at step 81,000, with ``changes``."""
    base = Notification(
        id="ntf_01",
        state="firing",
        rule_id="rule_7",
        rule_name="grad norm 5+",
        condition={"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 1},
        run_id="run_42",
        run_name="32b-exp1295",
        project="marin",
        metric="grad/norm/total",
        step=81000,
        value=7.25,
        threshold=5.0,
        reason="grad/norm/total = 7.25 >= 5 for 1 step",
        fired_at=datetime(2024, 5, 1, 12, 30, tzinfo=UTC),
        url=dashboard_link("https://nw.example", "run_42", "grad/norm/total", 81000),
    )
    return dataclasses.replace(base, **changes)
