"""Requests to a run's trainer over HTTP, against a real server on Postgres and SQLite: an
admin asks, the answers to metric batches carry the request, the next batch acknowledges
it, and a finished run's unread requests expire."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.tenants import Tenant


def new_run(api: httpx.Client, tenant: Tenant, name: str) -> str:
    r = api.post("/api/v1/runs", json={"name": name}, headers=tenant.headers("ingest"))
    assert r.status_code == 200, r.text
    run_id: str = r.json()["id"]
    return run_id


def batch(
    api: httpx.Client, tenant: Tenant, run_id: str, steps: list[int], read: int | None
) -> dict[str, Any]:
    r = api.post(
        f"/api/v1/runs/{run_id}/metrics",
        params={} if read is None else {"control_read": read},
        json={"steps": steps, "metrics": {"grad/norm/total": [0.5] * len(steps)}},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 202, r.text
    answer: dict[str, Any] = r.json()
    return answer


def ask(api: httpx.Client, tenant: Tenant, run_id: str, **body: object) -> httpx.Response:
    return api.post(f"/api/v1/runs/{run_id}/control", json=body, headers=tenant.headers())


def requests_of(api: httpx.Client, tenant: Tenant, run_id: str) -> list[dict[str, Any]]:
    r = api.get(f"/api/v1/runs/{run_id}/control", headers=tenant.headers("read"))
    assert r.status_code == 200, r.text
    listed: list[dict[str, Any]] = r.json()
    return listed


def test_a_request_reaches_the_trainer_in_a_batch_answer_and_is_acknowledged(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = new_run(api, tenant, "asked")
    assert batch(api, tenant, run_id, [0, 1, 2], read=0) == {
        "accepted": 3,
        "ignored": 0,
        "segment": 1,
        "control": [],
    }
    r = ask(api, tenant, run_id, action="checkpoint", reason="loss spike at 2", by="ana")
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["action"] == "checkpoint" and made["state"] == "pending"
    assert (made["source"], made["requested_by"], made["step"]) == ("admin", "ana", 2)

    for_trainer = {
        "id": made["id"],
        "action": "checkpoint",
        "reason": "loss spike at 2",
        "source": "admin",
        "step": 2,
    }
    # Without control_read (an older client, a script) the answer carries no control list.
    assert batch(api, tenant, run_id, [3], read=None) == {
        "accepted": 1,
        "ignored": 0,
        "segment": 1,
    }
    assert batch(api, tenant, run_id, [4], read=0)["control"] == [for_trainer]
    assert requests_of(api, tenant, run_id)[0]["state"] == "delivered"
    # A retried batch whose answer was lost gets it again; nothing is marked seen yet.
    assert batch(api, tenant, run_id, [4], read=0)["control"] == [for_trainer]
    assert batch(api, tenant, run_id, [5], read=made["id"])["control"] == []
    [seen] = requests_of(api, tenant, run_id)
    assert seen["state"] == "seen" and seen["seen_at"] >= seen["delivered_at"]

    events = api.get(f"/api/v1/runs/{run_id}/events", headers=tenant.headers("read")).json()
    assert [(e["kind"], e["step"], e["text"]) for e in events] == [
        ("control", 2, "checkpoint requested by ana: loss spike at 2")
    ]


def test_asking_twice_answers_the_open_request_and_a_finished_run_expires_it(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = new_run(api, tenant, "asked-twice")
    first = ask(api, tenant, run_id, action="stop", reason="diverged")
    assert first.status_code == 201, first.text
    again = ask(api, tenant, run_id, action="stop", reason="diverged, really")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other = ask(api, tenant, run_id, action="checkpoint")
    assert other.status_code == 201 and other.json()["id"] > first.json()["id"]
    token = api.get("/api/v1/tokens", headers=tenant.headers()).json()
    names = {t["name"] for t in token if t["scope"] == "admin"}
    assert other.json()["requested_by"] in names | {"admin"}, "the token's name, if it has one"

    r = api.patch(
        f"/api/v1/runs/{run_id}", json={"status": "finished"}, headers=tenant.headers("ingest")
    )
    assert r.status_code == 200, r.text
    assert [q["state"] for q in requests_of(api, tenant, run_id)] == ["expired", "expired"]
    refused = ask(api, tenant, run_id, action="stop")
    assert refused.status_code == 409
    assert "finished" in refused.json()["detail"]
    # A resumed run's trainer is not told what the finished one never read.
    new_run(api, tenant, "asked-twice")
    assert batch(api, tenant, run_id, [0], read=0)["control"] == []


def test_a_finishing_trainer_acknowledges_what_its_last_answer_carried(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = new_run(api, tenant, "acknowledged-at-finish")
    stop = ask(api, tenant, run_id, action="stop", reason="enough").json()
    checkpoint = ask(api, tenant, run_id, action="checkpoint").json()
    assert [q["id"] for q in batch(api, tenant, run_id, [0], read=0)["control"]] == [
        stop["id"],
        checkpoint["id"],
    ]
    # The trainer read the stop, then finished before any other batch.
    r = api.patch(
        f"/api/v1/runs/{run_id}",
        params={"control_read": stop["id"]},
        json={"status": "finished"},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 200, r.text
    assert [(q["action"], q["state"]) for q in requests_of(api, tenant, run_id)] == [
        ("checkpoint", "expired"),
        ("stop", "seen"),
    ]


def test_only_admins_ask_and_bad_requests_are_refused(api: httpx.Client, tenant: Tenant) -> None:
    run_id = new_run(api, tenant, "refusals")
    for scope in ("ingest", "read"):
        r = api.post(
            f"/api/v1/runs/{run_id}/control",
            json={"action": "stop"},
            headers=tenant.headers(scope),
        )
        assert r.status_code == 403, (scope, r.text)
    assert ask(api, tenant, run_id, action="explode").status_code == 422
    assert ask(api, tenant, run_id, action="stop", reason="x" * 1001).status_code == 422
    assert ask(api, tenant, run_id, action="stop", extra=1).status_code == 422
    assert ask(api, tenant, "no-such-run", action="stop").status_code == 404
    r = api.post(
        f"/api/v1/runs/{run_id}/metrics",
        params={"control_read": -1},
        json={"steps": [0], "metrics": {"a": [1.0]}},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 422
    assert requests_of(api, tenant, run_id) == []


def test_a_rule_asks_for_a_checkpoint_when_it_fires_in_that_batch_answer(
    api: httpx.Client, tenant: Tenant
) -> None:
    rule = {
        "name": "checkpoint on grad norm 5+",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
        "control": "checkpoint",
    }
    r = api.post("/api/v1/alert-rules", json=rule, headers=tenant.headers())
    assert r.status_code == 201, r.text
    assert r.json()["control"] == "checkpoint"
    rule_id = r.json()["id"]
    run_id = new_run(api, tenant, "ruled")
    assert batch(api, tenant, run_id, [0, 1], read=0)["control"] == []
    r = api.post(
        f"/api/v1/runs/{run_id}/metrics",
        params={"control_read": 0},
        json={"steps": [2, 3, 4], "metrics": {"grad/norm/total": [0.4, 6.5, 7.0]}},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 202, r.text
    [request] = r.json()["control"]
    assert (request["action"], request["source"], request["step"]) == ("checkpoint", "rule", 3)
    assert request["reason"].startswith("checkpoint on grad norm 5+: grad/norm/total")
    [listed] = requests_of(api, tenant, run_id)
    assert (listed["rule_id"], listed["requested_by"]) == (rule_id, f"rule {rule['name']}")

    # Still firing: no second request; the trainer's acknowledgement marks it seen.
    assert batch(api, tenant, run_id, [5], read=request["id"])["control"] == []
    assert [q["state"] for q in requests_of(api, tenant, run_id)] == ["seen"]


def test_a_stale_rule_cannot_ask_the_trainer(api: httpx.Client, tenant: Tenant) -> None:
    rule = {
        "name": "quiet",
        "metric": "grad/norm/total",
        "condition": {"kind": "stale", "seconds": 600},
        "control": "stop",
    }
    r = api.post("/api/v1/alert-rules", json=rule, headers=tenant.headers())
    assert r.status_code == 422, r.text
    assert "stale" in r.text
