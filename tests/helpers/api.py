"""Runs and batches over the HTTP API of a real server."""

from __future__ import annotations

from typing import Any

import httpx

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant

WEBHOOK_SECRET = "s3cret"
"""The secret `create_rule` gives its webhook channel."""


def client_for(server: ServerProcess, tenant: Tenant, scope: str = "admin") -> httpx.Client:
    """A client of ``server`` sending ``tenant``'s token of ``scope`` with every request."""
    return httpx.Client(base_url=server.url, headers=tenant.headers(scope), timeout=30)


def create_run(
    api: httpx.Client, tenant: Tenant | None = None, name: str = "exp", **extra: object
) -> str:
    """Create (or resume) the run ``name`` with ``tenant``'s ingest token (default: the
    client's own headers); its id."""
    headers = tenant.headers("ingest") if tenant is not None else None
    r = api.post("/api/v1/runs", json={"name": name, **extra}, headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def post_batch(api: httpx.Client, tenant: Tenant, run_id: str, body: object) -> httpx.Response:
    """POST a metric batch with ``tenant``'s ingest token; the answer, whatever it is."""
    return api.post(f"/api/v1/runs/{run_id}/metrics", json=body, headers=tenant.headers("ingest"))


def post_metrics(api: httpx.Client, run_id: str, steps: list[int], **metrics: list[Any]) -> None:
    """POST ``metrics`` at ``steps`` with the client's own headers; it must be accepted."""
    r = api.post(f"/api/v1/runs/{run_id}/metrics", json={"steps": steps, "metrics": metrics})
    assert r.status_code == 202, r.text


def create_rule(api: httpx.Client, hook_url: str, **rule: Any) -> dict[str, Any]:
    """Create an alert rule posting to the webhook at ``hook_url``, signed with
    `WEBHOOK_SECRET`, with the client's own headers; the rule as the API returns it."""
    body = {
        "name": rule.pop("name", "rule"),
        "channels": [{"type": "webhook", "url": hook_url, "secret": WEBHOOK_SECRET}],
        **rule,
    }
    r = api.post("/api/v1/alert-rules", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())
