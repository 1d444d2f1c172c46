"""A project's run-page workspace over HTTP to a real server (Postgres and SQLite): read
by any token of the project, saved by an admin, a bad layout a 422 that changes nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from normwatch.testing import ServerProcess
from tests.helpers.api import client_for
from tests.helpers.tenants import Tenant

LAYOUT = {
    "pinned": ["train/loss"],
    "hidden": ["optim/lr"],
    "order": ["grad/norm/b", "grad/norm/a"],
    "expressions": ["share(grad/norm/lm_head*, grad/norm/total)"],
    "collapsed": ["params/norm"],
}
EMPTY = {"pinned": [], "hidden": [], "order": [], "expressions": [], "collapsed": []}


def put_layout(api: httpx.Client, tenant: Tenant, body: Any) -> httpx.Response:
    return api.put(f"/api/v1/projects/{tenant.project}/workspace", json=body)


def test_a_project_saves_and_reads_its_layout(server: ServerProcess, tenant: Tenant) -> None:
    with client_for(server, tenant) as api:
        r = api.get(f"/api/v1/projects/{tenant.project}/workspace")
        assert r.status_code == 200, r.text
        assert r.json() == {
            "project": tenant.project,
            "layout": EMPTY,
            "revision": 0,
            "updated_by": None,
            "updated_at": None,
        }
        r = put_layout(api, tenant, LAYOUT)
        assert r.status_code == 200, r.text
        saved = r.json()
        assert (saved["layout"], saved["revision"]) == (LAYOUT, 1)
        assert saved["updated_at"] is not None
    with client_for(server, tenant, "read") as reader:
        read = reader.get(f"/api/v1/projects/{tenant.project}/workspace")
        assert read.status_code == 200 and read.json() == saved
    with client_for(server, tenant) as api:
        again = put_layout(api, tenant, {"pinned": ["grad/norm/total"]}).json()
        assert (again["layout"], again["revision"]) == ({**EMPTY, "pinned": ["grad/norm/total"]}, 2)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"pinned": ["a", "a"]}, "pinned names 'a' twice"),
        ({"hidden": ["x" * 513]}, "at most 512 items after validation, not 513"),
        ({"order": [f"m{i}" for i in range(1001)]}, "at most 1000 items"),
        ({"pinned": [f"m{i}" for i in range(101)]}, "at most 100 items"),
        ({"expressions": ["share(a)"]}, "share takes 2 arguments, got 1"),
        ({"expressions": ["train/loss"]}, "is a metric name, not an expression"),
        ({"order": [f"{i:03d}" + "y" * 508 for i in range(129)]}, "at most 65,536"),
        ({"pinned": "train/loss"}, "pinned"),
        ({"panels": []}, "panels"),
        ({"hidden": ["a\x00b"]}, "NUL"),
        ([], "Input should be a valid dictionary"),
    ],
)
def test_a_bad_layout_is_a_422_and_nothing_changes(
    server: ServerProcess, tenant: Tenant, body: Any, says: str
) -> None:
    with client_for(server, tenant) as api:
        r = put_layout(api, tenant, body)
        assert r.status_code == 422, r.text
        assert says in r.text
        assert api.get(f"/api/v1/projects/{tenant.project}/workspace").json()["revision"] == 0


def test_only_an_admin_of_the_project_saves_its_layout(
    server: ServerProcess, tenant: Tenant
) -> None:
    with client_for(server, tenant, "read") as api:
        r = put_layout(api, tenant, LAYOUT)
        assert r.status_code == 403 and "'admin' is needed" in r.text
        other = api.get("/api/v1/projects/another-project/workspace")
        assert other.status_code == 403 and "another-project" in other.text
    with client_for(server, tenant, "ingest") as api:
        assert api.get(f"/api/v1/projects/{tenant.project}/workspace").status_code == 403
        assert put_layout(api, tenant, LAYOUT).status_code == 403
    with client_for(server, tenant) as api:
        r = api.put("/api/v1/projects/another-project/workspace", json=LAYOUT)
        assert r.status_code == 403
        assert api.get(f"/api/v1/projects/{tenant.project}/workspace").json()["revision"] == 0
    no_token = httpx.get(f"{server.url}/api/v1/projects/{tenant.project}/workspace", timeout=10)
    assert no_token.status_code == 401
