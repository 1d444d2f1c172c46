"""A run's note through the HTTP API, on Postgres and SQLite: set, replaced and removed by
``PATCH /api/v1/runs/{id}`` with a writing token, read by any, bounded in length."""

from __future__ import annotations

import httpx

from normwatch.server.schemas import MAX_NOTES
from tests.helpers.tenants import Tenant


def new_run(api: httpx.Client, tenant: Tenant, name: str) -> str:
    made = api.post("/api/v1/runs", json={"name": name}, headers=tenant.headers("ingest"))
    assert made.status_code == 200, made.text
    assert made.json()["notes"] is None
    return str(made.json()["id"])


def test_a_note_is_set_replaced_and_removed(api: httpx.Client, tenant: Tenant) -> None:
    run_id = new_run(api, tenant, "noted")
    path = f"/api/v1/runs/{run_id}"
    said = api.patch(
        path, json={"notes": "  lr too high: diverged at 4k  "}, headers=tenant.headers()
    )
    assert said.status_code == 200, said.text
    assert said.json()["notes"] == "lr too high: diverged at 4k"
    assert api.get(path, headers=tenant.headers("read")).json()["notes"] == (
        "lr too high: diverged at 4k"
    )
    # A change of tags or status leaves the note as it is.
    tagged = api.patch(path, json={"tags": ["x"]}, headers=tenant.headers("ingest"))
    assert (tagged.json()["tags"], tagged.json()["notes"]) == (["x"], "lr too high: diverged at 4k")
    longest = "é" * MAX_NOTES
    assert api.patch(path, json={"notes": longest}, headers=tenant.headers()).json()["notes"] == (
        longest
    )
    listed = api.get("/api/v1/runs", headers=tenant.headers("read")).json()
    assert [(r["name"], r["notes"]) for r in listed] == [("noted", longest)]
    cleared = api.patch(path, json={"notes": " "}, headers=tenant.headers())
    assert cleared.json()["notes"] is None
    assert api.get(path, headers=tenant.headers("read")).json()["notes"] is None


def test_a_note_too_long_or_unstorable_is_refused(api: httpx.Client, tenant: Tenant) -> None:
    run_id = new_run(api, tenant, "bounded")
    path = f"/api/v1/runs/{run_id}"
    for bad in ("x" * (MAX_NOTES + 1), "a\x00b", 5):
        refused = api.patch(path, json={"notes": bad}, headers=tenant.headers())
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "notes"]
    assert api.get(path, headers=tenant.headers("read")).json()["notes"] is None


def test_a_read_token_cannot_set_a_note(api: httpx.Client, tenant: Tenant) -> None:
    run_id = new_run(api, tenant, "read-only")
    path = f"/api/v1/runs/{run_id}"
    refused = api.patch(path, json={"notes": "mine"}, headers=tenant.headers("read"))
    assert refused.status_code == 403, refused.text
    assert api.get(path, headers=tenant.headers("read")).json()["notes"] is None
    unknown = api.patch("/api/v1/runs/" + "0" * 32, json={"notes": "x"}, headers=tenant.headers())
    assert unknown.status_code == 404
