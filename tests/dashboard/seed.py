"""Data for the page tests: runs, points, events and rules posted to a real server over its
API, and the viewers (principals) a page callback is called with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import Principal, authenticate
from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant


@dataclass(frozen=True)
class Viewers:
    """A tenant's read and admin tokens as the principals the dashboard gets."""

    read: Principal
    admin: Principal


def viewers(sessions: sessionmaker[Session], tenant: Tenant) -> Viewers:
    return Viewers(principal(sessions, tenant.read), principal(sessions, tenant.admin))


def principal(sessions: sessionmaker[Session], token: str) -> Principal:
    with sessions() as session, session.begin():
        who = authenticate(session, token)
    assert who is not None
    return who


def api(server: ServerProcess, tenant: Tenant, scope: str = "ingest") -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=tenant.headers(scope), timeout=30)


def create_run(
    server: ServerProcess, tenant: Tenant, name: str, config: Mapping[str, Any] | None = None
) -> str:
    body = {"name": name, "start_step": 0, **({"config": dict(config)} if config else {})}
    with api(server, tenant) as client:
        made = client.post("/api/v1/runs", json=body)
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


def post_points(
    server: ServerProcess,
    tenant: Tenant,
    run_id: str,
    steps: Sequence[int],
    metrics: Mapping[str, Sequence[Any]],
) -> None:
    body = {"steps": list(steps), "metrics": {k: list(v) for k, v in metrics.items()}}
    with api(server, tenant) as client:
        posted = client.post(f"/api/v1/runs/{run_id}/metrics", json=body)
    assert posted.status_code == 202, posted.text


def post_event(
    server: ServerProcess, tenant: Tenant, run_id: str, step: int, text: str, kind: str
) -> None:
    with api(server, tenant) as client:
        posted = client.post(
            f"/api/v1/runs/{run_id}/events", json={"step": step, "kind": kind, "text": text}
        )
    assert posted.status_code == 201, posted.text


def create_rule(server: ServerProcess, tenant: Tenant, rule: Mapping[str, Any]) -> dict[str, Any]:
    with api(server, tenant, "admin") as client:
        made = client.post("/api/v1/alert-rules", json=dict(rule))
    assert made.status_code == 201, made.text
    found: dict[str, Any] = made.json()
    return found


def threshold_rule(name: str, value: float, metric: str = "grad/norm/total") -> dict[str, Any]:
    return {
        "name": name,
        "metric": metric,
        "condition": {"kind": "threshold", "op": ">", "value": value},
    }
