"""Alerts end to end: real server process, real Postgres, a real local HTTP receiver."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest

from normwatch.server.alerts.conditions import parse_condition
from normwatch.server.alerts.evaluation import preview
from normwatch.server.alerts.signing import verify
from normwatch.testing import ServerProcess
from tests.helpers.api import WEBHOOK_SECRET, client_for, create_rule, create_run, post_metrics
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.tenants import make_tenant


def test_threshold_fires_at_the_step_then_resolves_signed(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api,
            receiver.url(),
            name="grad norm 5+",
            metric="grad/norm/total",
            condition={"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 2},
        )
        assert rule["channels"][0]["secret"] != WEBHOOK_SECRET  # masked
        run = create_run(api, name="r", start_step=0)
        post_metrics(api, run, list(range(10)), **{"grad/norm/total": [1.0] * 10})
        posted = time.monotonic()
        post_metrics(api, run, [10, 11, 12, 13], **{"grad/norm/total": [5.5, 4.0, 5.0, 6.0]})
        [firing] = receiver.wait_for(1)
        assert receiver.delivered[0].at - posted < 2.0
        assert (firing["state"], firing["step"], firing["value"], firing["threshold"]) == (
            "firing",
            13,
            6.0,
            5.0,
        )
        assert firing["metric"] == "grad/norm/total" and firing["run"]["id"] == run
        assert firing["rule"]["name"] == "grad norm 5+" and "secret" not in json.dumps(firing)
        assert "start=" in firing["url"] and f"/runs/{run}" in firing["url"]
        headers = receiver.delivered[0].headers
        assert verify(
            WEBHOOK_SECRET,
            headers["x-normwatch-timestamp"],
            headers["x-normwatch-signature"],
            receiver.delivered[0].body,
        )
        post_metrics(api, run, [14, 15], **{"grad/norm/total": [3.0, 7.0]})
        payloads = receiver.wait_for(2)
        assert [(p["state"], p["step"]) for p in payloads] == [("firing", 13), ("resolved", 14)]
        # Re-sending the same batch changes nothing.
        post_metrics(api, run, [14, 15], **{"grad/norm/total": [3.0, 7.0]})
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        assert [(a["state"], a["step"]) for a in history] == [("resolved", 14), ("firing", 13)]
        assert all(a["notifications"][0]["status"] == "delivered" for a in history)
        time.sleep(0.5)
        assert len(receiver.received) == 2


def test_glob_over_48_layers_fires_only_for_the_spiking_layer(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        create_rule(
            api,
            receiver.url(),
            name="layer spikes",
            metric="grad/norm/layers.*",
            condition={"kind": "spike", "factor": 3.0, "window": 20},
        )
        run = create_run(api, name="r", start_step=0)
        steps = list(range(60))
        layers = {f"grad/norm/layers.{i}": [1.0 + 0.01 * (s % 3) for s in steps] for i in range(48)}
        layers["grad/norm/layers.31"][45] = 9.0
        post_metrics(api, run, steps, **layers)
        payloads = receiver.wait_for(2)
        time.sleep(0.5)
        assert len(receiver.received) == 2
        assert [(p["state"], p["metric"], p["step"]) for p in payloads] == [
            ("firing", "grad/norm/layers.*", 45),
            ("resolved", "grad/norm/layers.*", 50),  # five calm steps end a spike
        ]
        assert [[(m["metric"], m["state"]) for m in p["alerts"]] for p in payloads] == [
            [("grad/norm/layers.31", "firing")],
            [("grad/norm/layers.31", "resolved")],
        ]


def test_a_spike_through_48_layers_is_one_firing_and_one_resolved_message(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        create_rule(
            api,
            receiver.url(),
            name="layer spikes",
            metric="grad/norm/layers.*",
            condition={"kind": "spike", "factor": 3.0, "window": 20},
            group_wait_steps=3,
        )
        run = create_run(api, name="r", start_step=0)
        steps = list(range(80))
        layers = {f"grad/norm/layers.{i}": [1.0 + 0.01 * (s % 3) for s in steps] for i in range(48)}
        for i in range(48):  # the wave reaches the deeper layers a step or two later
            for s in range(40 + i % 3, 44 + i % 3):
                layers[f"grad/norm/layers.{i}"][s] = 9.0
        for lo in range(0, 80, 20):  # as a trainer sends them
            post_metrics(
                api, run, steps[lo : lo + 20], **{k: v[lo : lo + 20] for k, v in layers.items()}
            )
        payloads = receiver.wait_for(2)
        time.sleep(0.5)
        assert len(receiver.received) == 2
        firing, resolved = payloads
        assert (firing["state"], firing["step"], resolved["state"]) == ("firing", 43, "resolved")
        assert len(firing["alerts"]) == 48 and {m["state"] for m in firing["alerts"]} == {"firing"}
        assert len(resolved["alerts"]) == 48
        assert {m["state"] for m in resolved["alerts"]} == {"resolved"}
        history = api.get("/api/v1/alerts", params={"run": run, "limit": 500}).json()
        assert sum(a["metric"] == "grad/norm/layers.*" for a in history) == 2
        assert sum(a["metric"] != "grad/norm/layers.*" for a in history) == 96  # kept, unsent


def test_nan_fires_and_preview_matches(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api, receiver.url(), name="nan", metric="train/loss", condition={"kind": "non_finite"}
        )
        run = create_run(api, name="r", start_step=0)
        post_metrics(api, run, [0, 1, 2, 3], **{"train/loss": [2.0, "NaN", None, 1.5]})
        payloads = receiver.wait_for(2)
        assert [(p["state"], p["step"], p["value"]) for p in payloads] == [
            ("firing", 1, "NaN"),
            ("resolved", 3, 1.5),
        ]
        preview = api.get(f"/api/v1/alert-rules/{rule['id']}/preview", params={"run": run}).json()
        assert [(t["state"], t["step"]) for t in preview["transitions"]] == [
            ("firing", 1),
            ("resolved", 3),
        ]


def test_a_rule_on_lm_heads_share_of_the_squared_total_fires_and_previews(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api,
            receiver.url(),
            name="lm_head dominates",
            metric="share(grad/norm/lm_head*, grad/norm/total)",
            condition={"kind": "threshold", "op": ">", "value": 0.8},
        )
        run = create_run(api, name="r", start_step=0)
        # lm_head grows against a fixed rest: its share passes 0.8 at step 5 (0.81).
        lm_head = [1.0, 1.2, 1.4, 1.6, 1.8, 2.06, 2.5, 1.0]
        rest = 1.0
        total = [(h * h + rest * rest) ** 0.5 for h in lm_head]
        steps = list(range(len(lm_head)))
        post_metrics(
            api,
            run,
            steps,
            **{
                "grad/norm/lm_head": lm_head,
                "grad/norm/embed": [rest] * len(steps),
                "grad/norm/total": total,
            },
        )
        payloads = receiver.wait_for(2)
        assert [(p["state"], p["step"], p["metric"]) for p in payloads] == [
            ("firing", 5, rule["metric"]),
            ("resolved", 7, rule["metric"]),
        ]
        assert payloads[0]["value"] == pytest.approx(2.06**2 / (2.06**2 + 1), rel=1e-12)
        preview = api.get(f"/api/v1/alert-rules/{rule['id']}/preview", params={"run": run})
        assert preview.status_code == 200, preview.text
        assert preview.json()["metrics"] == 1
        assert [(t["state"], t["step"]) for t in preview.json()["transitions"]] == [
            ("firing", 5),
            ("resolved", 7),
        ]
        bad = api.post(
            "/api/v1/alert-rules",
            json={
                "name": "bad",
                "metric": "share(grad/norm/lm_head*)",
                "condition": {"kind": "threshold", "op": ">", "value": 0.8},
            },
        )
        assert bad.status_code == 422 and "share takes 2 arguments, got 1" in bad.text


@pytest.mark.parametrize(
    ("condition", "series", "expected"),
    [
        # Flat, then rising 0.2 a step (200 per 1k steps) from step 50.
        (
            {"kind": "slope", "op": ">", "per_1k_steps": 100.0, "window": 10},
            [1.0 if s < 50 else 1.0 + 0.2 * (s - 49) for s in range(80)],
            range(51, 56),
        ),
        # Rising 0.01 a step toward 5: fewer than 100 steps to go from step 300 on.
        (
            {"kind": "forecast", "op": ">=", "value": 5.0, "within_steps": 100, "window": 20},
            [1.0 + 0.01 * s for s in range(350)],
            range(300, 303),
        ),
    ],
    ids=["slope", "forecast"],
)
def test_slope_and_forecast_fire_where_the_fit_says(
    alerting_server: ServerProcess,
    receiver: WebhookReceiver,
    condition: dict[str, Any],
    series: list[float],
    expected: range,
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api,
            receiver.url(),
            name=condition["kind"],
            metric="params/norm/final_norm",
            condition=condition,
        )
        run = create_run(api, name="r", start_step=0)
        for lo in range(0, len(series), 25):  # several batches, as a trainer sends them
            chunk = series[lo : lo + 25]
            post_metrics(
                api, run, list(range(lo, lo + len(chunk))), **{"params/norm/final_norm": chunk}
            )
        [firing] = receiver.wait_for(1)
        assert firing["state"] == "firing" and firing["step"] in expected
        preview = api.get(f"/api/v1/alert-rules/{rule['id']}/preview", params={"run": run}).json()
        assert preview["transitions"][0]["step"] == firing["step"]


def test_an_excursion_alerts_once_repeats_while_it_lasts_and_resolves_once(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    """The demo's grad norm after 83.7k: 2,000 steps mostly at 5-8.5 with dips under 5 of
    one to three steps, sent as a trainer would (100 steps a batch)."""
    rng = np.random.default_rng(5)
    high = 5.0 + 3.5 * rng.random(2000)
    for at in rng.choice(1997, size=60, replace=False):
        high[at : at + int(rng.integers(1, 4))] = 4.4
    high[0] = high[-1] = 6.0
    values = np.concatenate([np.full(200, 1.5), high, np.full(200, 1.5)])
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api,
            receiver.url(),
            name="grad norm 5+",
            metric="grad/norm/total",
            condition={"kind": "threshold", "op": ">=", "value": 5.0, "resolve_steps": 10},
            repeat_every_steps=500,
        )
        assert rule["repeat_every_steps"] == 500 and rule["condition"]["resolve_steps"] == 10
        run = create_run(api, name="r", start_step=0)
        for lo in range(0, len(values), 100):
            steps = list(range(lo, lo + 100))
            post_metrics(api, run, steps, **{"grad/norm/total": values[lo : lo + 100].tolist()})
        condition = parse_condition(rule["condition"])
        expected = preview(
            condition, list(range(len(values))), values.tolist(), repeat_every_steps=500
        )
        assert [(t.state, t.repeat) for t in expected] == [
            ("firing", 0),
            ("firing", 1),
            ("firing", 2),
            ("firing", 3),
            ("resolved", 0),
        ]
        payloads = receiver.wait_for(5)
        time.sleep(0.5)
        assert len(receiver.received) == 5  # nothing more is on its way
        assert [(p["state"], p["step"], p["repeat"]) for p in payloads] == [
            (t.state, t.step, t.repeat) for t in expected
        ]
        assert payloads[0]["step"] == 200 and payloads[-1]["step"] == 2209
        assert payloads[-1]["worst"] == pytest.approx(float(high.max()))
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        assert [(a["state"], a["repeat"]) for a in history][::-1] == [
            ("firing", 0),
            ("firing", 1),
            ("firing", 2),
            ("firing", 3),
            ("resolved", 0),
        ]


def _in_batches(seed: int, length: int) -> list[range]:
    """Consecutive step ranges of 25 to 100 steps, as a trainer sends them."""
    rng = np.random.default_rng(seed)
    batches: list[range] = []
    lo = 0
    while lo < length:
        hi = min(length, lo + int(rng.integers(25, 101)))
        batches.append(range(lo, hi))
        lo = hi
    return batches


def test_a_forecast_fires_once_and_hands_over_without_flapping(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    """A noisy rise to 5 that crosses back and forth around it for dozens of steps."""
    rng = np.random.default_rng(0)
    values = 1.0 + 0.01 * np.arange(600) + rng.normal(0.0, 0.15, size=600)
    above = values >= 5.0
    crossed_at = int(np.argmax(above))
    assert np.count_nonzero(above[1:] != above[:-1]) >= 15  # it hovers around the line
    assert not above[crossed_at + 1 : crossed_at + 4].all()
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        forecast = create_rule(
            api,
            receiver.url(),
            name="grad norm heading for 5",
            metric="grad/norm/total",
            condition={
                "kind": "forecast",
                "op": ">=",
                "value": 5.0,
                "within_steps": 100,
                "window": 50,
            },
        )
        threshold = create_rule(
            api,
            receiver.url(),
            name="grad norm 5+",
            metric="grad/norm/total",
            condition={"kind": "threshold", "op": ">=", "value": 5.0, "resolve_steps": 20},
        )
        assert forecast["condition"]["resolve_steps"] == 10
        run = create_run(api, name="r", start_step=0)
        for batch in _in_batches(1, len(values)):
            post_metrics(
                api,
                run,
                list(batch),
                **{"grad/norm/total": values[batch.start : batch.stop].tolist()},
            )
        steps = list(range(len(values)))
        predicted = preview(parse_condition(forecast["condition"]), steps, values.tolist())
        handed = preview(parse_condition(threshold["condition"]), steps, values.tolist())
        assert [t.state for t in predicted] == ["firing", "resolved"]
        assert predicted[0].step < crossed_at - 50 and predicted[1].step == crossed_at
        assert predicted[1].reason == (
            f"crossed: {values[crossed_at]:.4g} ≥ 5 (handed over to the threshold)"
        )
        assert [(t.state, t.step) for t in handed] == [("firing", crossed_at)]
        payloads = receiver.wait_for(3)
        time.sleep(0.5)
        assert len(receiver.received) == 3  # nothing more is on its way
        by_rule = {
            name: [
                (p["state"], p["step"], p["reason"]) for p in payloads if p["rule"]["name"] == name
            ]
            for name in ("grad norm heading for 5", "grad norm 5+")
        }
        assert by_rule == {
            "grad norm heading for 5": [(t.state, t.step, t.reason) for t in predicted],
            "grad norm 5+": [(t.state, t.step, t.reason) for t in handed],
        }
        assert payloads[0]["rule"]["name"] == "grad norm heading for 5"  # the warning came first


def test_a_spike_rule_fires_once_a_spike_through_its_recovery(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    """A falling loss with three spikes, each recovering raggedly: ``X`` a step over the
    limit, ``.`` one back in the band (never five in a row before the last ``X``)."""
    rng = np.random.default_rng(11)
    values = 0.8 + 2.2 * np.exp(-np.arange(900) / 250) + 0.04 * rng.standard_normal(900)
    spikes = {200: "XXXX.X..X...XX.X", 450: "XX..X.X...X..X", 700: "XXX.X..XX...X....X..X"}
    for at, recovery in spikes.items():
        for i, step in enumerate(recovery):
            if step == "X":
                values[at + i] *= 3.0 + rng.random()
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api,
            receiver.url(),
            name="loss spikes",
            metric="train/loss",
            condition={"kind": "spike", "factor": 2.0, "window": 50},
        )
        assert rule["condition"]["resolve_steps"] == 5
        run = create_run(api, name="r", start_step=0)
        for batch in _in_batches(2, len(values)):
            post_metrics(
                api, run, list(batch), **{"train/loss": values[batch.start : batch.stop].tolist()}
            )
        condition = parse_condition(rule["condition"])
        steps = list(range(len(values)))
        expected = preview(condition, steps, values.tolist())
        assert [(t.state, t.step) for t in expected] == [
            (state, at + offset)
            for at, recovery in spikes.items()
            for state, offset in (("firing", 0), ("resolved", recovery.rindex("X") + 5))
        ]
        flapping = preview(
            condition.model_copy(update={"resolve_steps": 1}), steps, values.tolist()
        )
        assert len(flapping) > 2 * len(expected)  # the recoveries are ragged
        payloads = receiver.wait_for(6)
        time.sleep(0.5)
        assert len(receiver.received) == 6  # nothing more is on its way
        assert [(p["state"], p["step"], p["reason"]) for p in payloads] == [
            (t.state, t.step, t.reason) for t in expected
        ]
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        assert [(a["state"], a["step"]) for a in history][::-1] == [
            (t.state, t.step) for t in expected
        ]


def test_alertmanager_and_pagerduty_channels_end_to_end(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        answer = api.post(
            "/api/v1/alert-rules",
            json={
                "name": "grad norm 5+ paged",
                "metric": "grad/norm/total",
                "condition": {"kind": "threshold", "op": ">=", "value": 5.0, "resolve_steps": 2},
                "channels": [
                    {"type": "alertmanager", "url": receiver.url("/api/v2/alerts")},
                    {
                        "type": "pagerduty",
                        "url": receiver.url("/v2/enqueue"),
                        "routing_key": "R0UTING-KEY",
                        "severity": "critical",
                    },
                ],
            },
        )
        assert answer.status_code == 201, answer.text
        assert answer.json()["channels"][1]["routing_key"] == "••••"
        run = create_run(api, name="r", start_step=0)
        post_metrics(api, run, [0, 1, 2, 3, 4], **{"grad/norm/total": [1.0, 6.0, 4.0, 4.0, 4.0]})
        received = receiver.wait_for(4)
    by_path: dict[str, list[Any]] = {}
    for request in receiver.delivered:
        by_path.setdefault(request.path, []).append(json.loads(request.body))
    firing, resolved = by_path["/api/v2/alerts"]
    assert firing[0]["labels"] == resolved[0]["labels"]
    assert firing[0]["labels"]["run_id"] == run and resolved[0]["endsAt"] < firing[0]["endsAt"]
    trigger, resolve = by_path["/v2/enqueue"]
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert trigger["dedup_key"] == resolve["dedup_key"] and trigger["routing_key"] == "R0UTING-KEY"
    assert trigger["payload"]["severity"] == "critical" and len(received) == 4


def test_a_silence_records_and_holds_back_then_ends_with_its_step(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api,
            receiver.url(),
            name="layers 5+",
            metric="grad/norm/layers.*",
            condition={"kind": "threshold", "op": ">=", "value": 5.0},
        )
        run = create_run(api, name="r", start_step=0)
        refused = [
            ({"comment": "no end"}, 422),
            ({"comment": "past", "ends_at": "2020-01-01T00:00:00Z"}, 422),
            ({"comment": "x", "until_step": 9, "rule_id": 2**31 - 1}, 404),
            ({"comment": "x", "until_step": 9, "run": "f" * 32}, 404),
            ({"comment": "", "until_step": 9}, 422),
        ]
        for body, status in refused:
            assert api.post("/api/v1/silences", json=body).status_code == status, body
        with client_for(alerting_server, tenant, "read") as reader:
            assert (
                reader.post("/api/v1/silences", json={"comment": "x", "until_step": 1}).status_code
                == 403
            )
        made = api.post(
            "/api/v1/silences",
            json={
                "rule_id": rule["id"],
                "run": run,
                "metric": "grad/norm/layers.*",
                "until_step": 20,
                "comment": "the layers spike while the router warms up",
                "created_by": "alice",
            },
        )
        assert made.status_code == 201, made.text
        silence = made.json()
        assert (silence["created_by"], silence["active"], silence["run"]) == ("alice", True, run)
        # Steps 10-11: the layers fire and resolve inside the silence; step 30: after it.
        layers = {
            "grad/norm/layers.3": [1.0, 6.0, 1.0, 6.0],
            "grad/norm/layers.4": [1.0, 6.0, 1.0, 1.0],
        }
        post_metrics(api, run, [0, 10, 11, 30], **layers)
        [sent] = receiver.wait_for(1)
        time.sleep(0.5)
        assert len(receiver.received) == 1
        assert (sent["state"], sent["step"], sent["metric"]) == ("firing", 30, "grad/norm/layers.*")
        assert [(m["metric"], m["state"]) for m in sent["alerts"]] == [
            ("grad/norm/layers.3", "firing")
        ]
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        held = sorted((a["step"], a["state"], a["metric"]) for a in history if a["silenced_by"])
        assert held == [
            (10, "firing", "grad/norm/layers.*"),
            (10, "firing", "grad/norm/layers.3"),
            (10, "firing", "grad/norm/layers.4"),
            (11, "resolved", "grad/norm/layers.*"),
            (11, "resolved", "grad/norm/layers.3"),
            (11, "resolved", "grad/norm/layers.4"),
        ]
        assert all(a["notifications"] == [] for a in history if a["silenced_by"])
        assert api.delete(f"/api/v1/silences/{silence['id']}").status_code == 204
        listed = api.get("/api/v1/silences").json()
        assert [(s["id"], s["active"]) for s in listed] == [(silence["id"], False)]
        assert api.get("/api/v1/silences", params={"active": True}).json() == []
        other = make_tenant(alerting_server.database_url)
        with client_for(alerting_server, other) as stranger:
            assert stranger.delete(f"/api/v1/silences/{silence['id']}").status_code == 403
            assert stranger.get("/api/v1/silences").json() == []


def test_an_acknowledged_alert_stops_repeating_and_still_resolves(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        create_rule(
            api,
            receiver.url(),
            name="grad norm 5+",
            metric="grad/norm/total",
            condition={"kind": "threshold", "op": ">=", "value": 5.0},
            repeat_every_steps=2,
        )
        run = create_run(api, name="r", start_step=0)
        post_metrics(api, run, [0, 1, 2, 3], **{"grad/norm/total": [6.0, 6.0, 6.0, 6.0]})
        assert [(p["state"], p["repeat"]) for p in receiver.wait_for(2)] == [
            ("firing", 0),
            ("firing", 1),
        ]
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        firing = next(a for a in history if a["state"] == "firing" and a["repeat"] == 0)
        repeat = next(a for a in history if a["repeat"] == 1)
        with client_for(alerting_server, tenant, "read") as reader:
            assert reader.post(f"/api/v1/alerts/{firing['id']}/ack", json={}).status_code == 403
        assert api.post(f"/api/v1/alerts/{repeat['id']}/ack", json={}).status_code == 409
        assert api.post("/api/v1/alerts/999999999/ack", json={}).status_code == 404
        ack = {"comment": "looking at the router", "by": "bob"}
        assert api.post(f"/api/v1/alerts/{firing['id']}/ack", json=ack).status_code == 204
        post_metrics(api, run, [4, 5, 6, 7], **{"grad/norm/total": [6.0, 6.0, 6.0, 1.0]})
        payloads = receiver.wait_for(3)
        time.sleep(0.5)
        assert len(receiver.received) == 3
        assert [(p["state"], p["step"], p["repeat"]) for p in payloads] == [
            ("firing", 0, 0),
            ("firing", 2, 1),
            ("resolved", 7, 0),  # the repeats at 4 and 6 were recorded, not sent
        ]
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        assert [(a["step"], a["repeat"], len(a["notifications"])) for a in history][::-1] == [
            (0, 0, 1),
            (2, 1, 1),
            (4, 2, 0),
            (6, 3, 0),
            (7, 0, 1),
        ]
        acked = next(a for a in history if a["id"] == firing["id"])["acked"]
        assert (acked["by"], acked["comment"]) == ("bob", "looking at the router")
        other = make_tenant(alerting_server.database_url)
        with client_for(alerting_server, other) as stranger:
            assert stranger.post(f"/api/v1/alerts/{firing['id']}/ack", json={}).status_code == 403


def test_a_firing_alert_repeats_by_the_clock_while_the_trainer_is_silent(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    """No steps after the firing one: the dispatcher's clock sends it again every 2 s (the
    test server allows that short an interval), until acknowledged; the resolve still goes."""
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        rule = create_rule(
            api,
            receiver.url(),
            name="grad norm 5+",
            metric="grad/norm/total",
            condition={"kind": "threshold", "op": ">=", "value": 5.0},
            repeat_every_seconds=2,
        )
        assert (rule["repeat_every_seconds"], rule["repeat_every_steps"]) == (2, None)
        run = create_run(api, name="r", start_step=0)
        post_metrics(api, run, [0, 1, 2], **{"grad/norm/total": [1.0, 6.0, 7.0]})
        payloads = receiver.wait_for(3, timeout=20)
        assert [(p["state"], p["step"], p["value"], p["repeat"]) for p in payloads] == [
            ("firing", 1, 6.0, 0),
            ("firing", 2, 7.0, 1),
            ("firing", 2, 7.0, 2),
        ]
        assert payloads[2]["worst"] == 7.0 and payloads[2]["threshold"] == 5.0
        assert payloads[2]["reason"].startswith("still firing since step 1, ")
        at = [r.at for r in receiver.delivered]
        assert at[1] - at[0] > 1.5 and at[2] - at[1] > 1.5  # not sooner than asked
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        firing = next(a for a in history if a["repeat"] == 0)
        assert api.post(f"/api/v1/alerts/{firing['id']}/ack", json={}).status_code == 204
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the next repeat: recorded, not sent
            history = api.get("/api/v1/alerts", params={"run": run}).json()
            if len(history) > len(receiver.received):
                break
            time.sleep(0.2)
        assert [(a["repeat"], len(a["notifications"])) for a in history][::-1][3] == (3, 0)
        post_metrics(api, run, [3], **{"grad/norm/total": [1.0]})
        payloads = receiver.wait_for(4)
        assert (payloads[3]["state"], payloads[3]["step"]) == ("resolved", 3)
        # The clock goes on: a second run kept firing is sent again every 2 s. Once it has
        # been sent twice more, the clock has passed the resolved run at least twice.
        beat = create_run(api, name="heartbeat", start_step=0)
        post_metrics(api, beat, [0], **{"grad/norm/total": [9.0]})
        deadline = time.monotonic() + 30
        while not any(p["run"]["id"] == beat and p["repeat"] >= 2 for p in receiver.payloads()):
            assert time.monotonic() < deadline, "the dispatcher's clock stopped"
            time.sleep(0.1)
        sent = [p for p in receiver.payloads() if p["run"]["id"] == run]
        assert len(sent) == 4  # resolved: the clock has nothing more to send
        history = api.get("/api/v1/alerts", params={"run": run}).json()
        assert history[0]["state"] == "resolved"  # and no repeat after it
        turned_off = api.patch(
            f"/api/v1/alert-rules/{rule['id']}", json={"repeat_every_seconds": 0}
        )
        assert turned_off.status_code == 200 and turned_off.json()["repeat_every_seconds"] is None
