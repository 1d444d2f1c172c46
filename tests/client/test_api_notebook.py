"""docs/client.md's notebook example, run as written against a real server holding the
demo's run around its config change: it prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import httpx
import numpy as np
import pytest

from normwatch.client import Api
from normwatch.demo import RUN_NAME
from normwatch.simulate import SimulatedRun
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- notebook example: tests/client/test_api_notebook.py runs this block -->"


def example() -> tuple[str, str]:
    """The example's code and the output the page shows for it."""
    text = (ROOT / "docs" / "client.md").read_text()
    after = text[text.index(MARK) :]
    code, shown = re.findall(r"```(?:python|text)\n(.*?)```", after, re.DOTALL)[:2]
    return code, shown


def test_the_notebook_example_prints_what_the_docs_say(
    pg_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = make_tenant(pg_server.database_url)
    steps, metrics = SimulatedRun(seed=0).block(76_000, 86_000)
    wanted = ["params/norm/final_norm.weight", "grad/norm/total"]
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("ingest"), timeout=60) as api:
        run = api.post("/api/v1/runs", json={"name": RUN_NAME}).json()
        for lo in range(0, len(steps), 5000):
            body = {
                "steps": steps[lo : lo + 5000].tolist(),
                "metrics": {m: metrics[m][lo : lo + 5000].tolist() for m in wanted},
            }
            assert api.post(f"/api/v1/runs/{run['id']}/metrics", json=body).status_code == 202
        event = {"step": 81_000, "kind": "config", "text": "near-dropless EP routing"}
        assert api.post(f"/api/v1/runs/{run['id']}/events", json=event).status_code == 201
    assert np.isfinite(metrics[wanted[0]]).all()

    monkeypatch.setenv("NORMWATCH_URL", pg_server.url)
    monkeypatch.setenv("NORMWATCH_TOKEN", tenant.read)
    code, shown = example()
    printed = io.StringIO()
    namespace: dict[str, object] = {}
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "docs/client.md", "exec"), namespace)  # noqa: S102 - the docs' own
    finally:
        client = namespace.get("api")
        if isinstance(client, Api):
            client.close()  # a notebook leaves it open; a test closes its connections
    assert printed.getvalue() == shown
