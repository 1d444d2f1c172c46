"""The token routes against real servers: listing without secrets, creation, revocation and
rotation, and how soon every worker refuses a token that is no longer valid.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from normwatch.testing import ServerProcess, running_server
from tests.helpers.tenants import Tenant, make_tenant

LISTED_KEYS = {
    "id",
    "project",
    "scope",
    "name",
    "prefix",
    "created_at",
    "last_used_at",
    "expires_at",
    "revoked_at",
    "state",
}


# Over HTTP, against a real server on each backend.


def listed(api: httpx.Client, tenant: Tenant, **params: str) -> list[dict[str, object]]:
    answer = api.get("/api/v1/tokens", params=params, headers=tenant.headers("admin"))
    assert answer.status_code == 200, answer.text
    body: list[dict[str, object]] = answer.json()
    return body


def test_admins_list_their_projects_tokens_without_secrets(
    api: httpx.Client, tenant: Tenant
) -> None:
    tokens = listed(api, tenant)
    assert [(t["scope"], t["name"], t["state"]) for t in tokens] == [
        ("ingest", "ingest token", "active"),
        ("read", "read token", "active"),
        ("admin", "admin token", "active"),
    ]
    assert all(set(t) == LISTED_KEYS and t["project"] == tenant.project for t in tokens)
    assert [t["prefix"] for t in tokens] == [
        tenant.ingest[:10],
        tenant.read[:10],
        tenant.admin[:10],
    ]
    assert tenant.read not in api.get("/api/v1/tokens", headers=tenant.headers()).text
    assert api.get("/api/v1/tokens", headers=tenant.headers("read")).status_code == 403
    assert api.get("/api/v1/tokens").status_code == 401
    other = api.get("/api/v1/tokens", params={"project": "x"}, headers=tenant.headers())
    assert other.status_code == 403


def test_create_through_the_api(api: httpx.Client, tenant: Tenant) -> None:
    made = api.post(
        "/api/v1/tokens", json={"scope": "read", "name": "notebook"}, headers=tenant.headers()
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert set(body) == LISTED_KEYS | {"secret"}
    assert (body["project"], body["scope"], body["name"], body["state"]) == (
        tenant.project,
        "read",
        "notebook",
        "active",
    )
    assert body["expires_at"] is None and body["prefix"] == body["secret"][:10]
    reader = {"Authorization": f"Bearer {body['secret']}"}
    assert api.get("/api/v1/runs", headers=reader).status_code == 200
    assert "secret" not in listed(api, tenant)[-1]

    at = datetime(2030, 1, 1, 12, tzinfo=UTC)
    dated = api.post(
        "/api/v1/tokens",
        json={"scope": "ingest", "expires_at": "2030-01-01T14:00:00+02:00"},
        headers=tenant.headers(),
    )
    assert dated.status_code == 201
    assert datetime.fromisoformat(dated.json()["expires_at"]) == at
    soon = api.post(
        "/api/v1/tokens", json={"scope": "ingest", "expires_in_s": 3600}, headers=tenant.headers()
    ).json()
    left = datetime.fromisoformat(soon["expires_at"]) - datetime.fromisoformat(soon["created_at"])
    assert abs(left - timedelta(hours=1)) < timedelta(seconds=1)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"scope": "root"}, 422, "scope"),
        ({"scope": "read", "name": "n" * 129}, 422, "name"),
        ({"scope": "read", "name": "a\nb"}, 422, "name"),
        ({"scope": "read", "name": "bell\x07"}, 422, "name"),
        ({"scope": "read", "expires_in_s": 0}, 422, "expires_in_s"),
        ({"scope": "read", "expires_in_s": 10**12}, 422, "expires_in_s"),
        ({"scope": "read", "expires_at": "2001-01-01T00:00:00Z"}, 422, "not in the future"),
        ({"scope": "read", "expires_at": "2999-01-01T00:00:00Z"}, 422, "ten years"),
        (
            {"scope": "read", "expires_in_s": 60, "expires_at": "2030-01-01T00:00:00Z"},
            422,
            "not both",
        ),
        ({"scope": "read", "secret": "nw_mine"}, 422, "secret"),
        ({"scope": "read", "project": "someone-else"}, 403, "belongs to project"),
    ],
)
def test_bad_token_requests_are_refused(
    api: httpx.Client, tenant: Tenant, body: dict[str, object], status: int, says: str
) -> None:
    answer = api.post("/api/v1/tokens", json=body, headers=tenant.headers())
    assert answer.status_code == status, answer.text
    assert says in answer.text
    assert len(listed(api, tenant, all="true")) == 3


def test_revoke_through_the_api(api: httpx.Client, tenant: Tenant, server: ServerProcess) -> None:
    ids = {t["scope"]: t["id"] for t in listed(api, tenant)}
    other = make_tenant(server.database_url)
    theirs = api.delete(f"/api/v1/tokens/{ids['read']}", headers=other.headers())
    assert theirs.status_code == 403 and "another project" in theirs.text
    assert api.delete("/api/v1/tokens/2147483647", headers=tenant.headers()).status_code == 404
    for bad in ("0", "2147483648", "-1", "x"):
        assert api.delete(f"/api/v1/tokens/{bad}", headers=tenant.headers()).status_code == 422
    assert (
        api.delete(f"/api/v1/tokens/{ids['read']}", headers=tenant.headers("read")).status_code
        == 403
    )
    for _ in range(2):  # idempotent
        gone = api.delete(f"/api/v1/tokens/{ids['read']}", headers=tenant.headers())
        assert gone.status_code == 204 and gone.content == b""
    assert [t["scope"] for t in listed(api, tenant)] == ["ingest", "admin"]
    states = {t["scope"]: t["state"] for t in listed(api, tenant, all="true")}
    assert states == {"ingest": "active", "read": "revoked", "admin": "active"}


def test_rotate_through_the_api(api: httpx.Client, tenant: Tenant, server: ServerProcess) -> None:
    ids = {t["scope"]: t["id"] for t in listed(api, tenant)}
    kept = api.post(
        f"/api/v1/tokens/{ids['ingest']}/rotate", json={"grace_s": 600}, headers=tenant.headers()
    )
    assert kept.status_code == 201, kept.text
    body = kept.json()
    assert set(body) == LISTED_KEYS | {"secret", "replaces"}
    assert (body["scope"], body["name"], body["state"]) == ("ingest", "ingest token", "active")
    old = body["replaces"]
    assert (old["id"], old["state"], old["revoked_at"]) == (ids["ingest"], "active", None)
    grace = datetime.fromisoformat(old["expires_at"]) - datetime.fromisoformat(body["created_at"])
    assert abs(grace - timedelta(seconds=600)) < timedelta(seconds=1)
    for secret in (tenant.ingest, body["secret"]):  # both work during the grace period
        run = api.post(
            "/api/v1/runs", json={"name": "r"}, headers={"Authorization": f"Bearer {secret}"}
        )
        assert run.status_code == 200

    now = api.post(f"/api/v1/tokens/{ids['read']}/rotate", headers=tenant.headers())
    assert now.status_code == 201 and now.json()["replaces"]["state"] == "revoked"
    again = api.post(f"/api/v1/tokens/{ids['read']}/rotate", headers=tenant.headers())
    assert again.status_code == 409 and "is revoked" in again.text
    other = make_tenant(server.database_url)
    assert (
        api.post(f"/api/v1/tokens/{ids['admin']}/rotate", headers=other.headers()).status_code
        == 403
    )
    assert api.post("/api/v1/tokens/99999999/rotate", headers=tenant.headers()).status_code == 404
    long = api.post(
        f"/api/v1/tokens/{ids['admin']}/rotate",
        json={"grace_s": 31 * 86_400},
        headers=tenant.headers(),
    )
    assert long.status_code == 422 and "grace_s" in long.text


def test_a_token_mints_no_token_that_outlives_it(api: httpx.Client, tenant: Tenant) -> None:
    short = api.post(
        "/api/v1/tokens",
        json={"scope": "admin", "name": "ten minutes", "expires_in_s": 600},
        headers=tenant.headers(),
    ).json()
    ends = datetime.fromisoformat(short["expires_at"])
    its = {"Authorization": f"Bearer {short['secret']}"}

    def create(**body: object) -> httpx.Response:
        return api.post("/api/v1/tokens", json={"scope": "admin", **body}, headers=its)

    # Asked for a later expiry: refused, naming the caller's own.
    for body in ({"expires_in_s": 3600}, {"expires_at": "2030-01-01T00:00:00Z"}):
        refused = create(**body)
        assert refused.status_code == 403 and ends.isoformat() in refused.text, refused.text
    # ...given none, or as long, the new token expires with the caller; sooner stays sooner.
    for body, expected in [({}, ends), ({"expires_at": ends.isoformat()}, ends)]:
        made = create(**body)
        assert made.status_code == 201, made.text
        assert datetime.fromisoformat(made.json()["expires_at"]) == expected
    sooner = create(expires_in_s=60).json()
    assert datetime.fromisoformat(sooner["expires_at"]) < ends
    for scope in ("read", "ingest"):
        assert create(scope=scope).json()["expires_at"] == short["expires_at"]

    # Rotation likewise: a never-expiring token's successor, made by the short-lived token,
    # expires with it, and asking for longer is refused, the old token left as it was.
    reader = next(t for t in listed(api, tenant) if t["scope"] == "read")
    longer = api.post(
        f"/api/v1/tokens/{reader['id']}/rotate", json={"expires_in_s": 7200}, headers=its
    )
    assert longer.status_code == 403 and ends.isoformat() in longer.text
    assert next(t for t in listed(api, tenant) if t["id"] == reader["id"])["state"] == "active"
    rotated = api.post(f"/api/v1/tokens/{reader['id']}/rotate", headers=its)
    assert rotated.status_code == 201, rotated.text
    assert datetime.fromisoformat(rotated.json()["expires_at"]) == ends
    # A token without an expiry still creates long-lived ones.
    forever = api.post("/api/v1/tokens", json={"scope": "read"}, headers=tenant.headers())
    assert forever.status_code == 201 and forever.json()["expires_at"] is None


def test_an_expired_token_is_refused_at_once_despite_the_cache(
    api: httpx.Client, tenant: Tenant
) -> None:
    made = api.post(
        "/api/v1/tokens", json={"scope": "read", "expires_in_s": 2}, headers=tenant.headers()
    ).json()
    reader = {"Authorization": f"Bearer {made['secret']}"}
    assert api.get("/api/v1/runs", headers=reader).status_code == 200  # now in the cache
    expires = datetime.fromisoformat(made["expires_at"])
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.1)
    refused = api.get("/api/v1/runs", headers=reader)
    assert refused.status_code == 401  # well inside the 5 s the cache trusts a token
    assert [t["state"] for t in listed(api, tenant, all="true")][-1] == "expired"


def answers_by_worker(server: ServerProcess, token: str) -> dict[str, set[int]]:
    """Status codes of ``GET /api/v1/runs`` by the worker that answered, asked on fresh
    connections until both workers have answered (at most 200 times)."""
    seen: dict[str, set[int]] = {}
    for _ in range(200):
        answer = httpx.get(
            f"{server.url}/api/v1/runs", headers={"Authorization": f"Bearer {token}"}
        )
        seen.setdefault(answer.headers["x-normwatch-worker"], set()).add(answer.status_code)
        if len(seen) == 2:
            break
    return seen


def test_revocation_reaches_every_worker_within_the_cache_ttl(pg_url: str, tmp_path: Path) -> None:
    tenant = make_tenant(pg_url)
    with running_server(pg_url, tmp_path, workers=2, NORMWATCH_TOKEN_CACHE_S="1") as server:
        # Both workers check the token and then trust it for 1 s.
        warm = answers_by_worker(server, tenant.read)
        assert list(warm.values()) == [{200}, {200}]
        with httpx.Client(base_url=server.url) as api:
            [read_id] = [t["id"] for t in listed(api, tenant) if t["scope"] == "read"]
            gone = api.delete(f"/api/v1/tokens/{read_id}", headers=tenant.headers())
        assert gone.status_code == 204
        time.sleep(1.1)
        after = answers_by_worker(server, tenant.read)
        assert after.keys() == warm.keys()
        assert list(after.values()) == [{401}, {401}]
