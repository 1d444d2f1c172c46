"""A run page's header follows its run with no reload, in real Chromium against a real
server fed by the real trainer client: a finished run resumed from a checkpoint reads
"running" and its new segment, the config keys the trainer posted appear, the last step
moves, and the run finished again reads "finished"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Page

from normwatch.client import Run
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

CHANNEL_OPEN_JS = """() => window.normwatchLive && window.normwatchLive.socket
  && window.normwatchLive.socket.readyState === WebSocket.OPEN"""
NAME = "resumed-in-view"


def header(page: Page) -> tuple[str, str, str, str]:
    """The status, the segment text, the config section's summary and the last step."""
    return (
        page.inner_text("#run-status"),
        page.inner_text("#run-restarts"),
        page.inner_text("#run-config summary"),
        page.inner_text("#run-last-step"),
    )


def shows(page: Page, wanted: tuple[str, str, str, str]) -> None:
    """Wait (10 s at most) until the header reads ``wanted``."""
    status, restarts, config, last = (s.replace("'", "\\'") for s in wanted)
    page.wait_for_function(
        f"""() => {{
          const t = (s) => (document.querySelector(s) || {{}}).innerText;
          return t('#run-status') === '{status}' && t('#run-restarts') === '{restarts}'
            && t('#run-config summary') === '{config}' && t('#run-last-step') === '{last}';
        }}""",
        timeout=10_000,
    )


def started(run: Run) -> str:
    deadline = time.monotonic() + 10
    while run.run_id is None:  # the client creates the run in the background
        assert time.monotonic() < deadline, "the client did not create the run"
        time.sleep(0.05)
    return run.run_id


@pytest.mark.slow
def test_the_header_follows_a_resume_new_config_and_the_finish(
    page: Page, pg_server: ServerProcess, artifacts: Path
) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tenant = make_tenant(pg_server.database_url)
    with Run(pg_server.url, token=tenant.ingest, name=NAME, start_step=0) as first:
        run_id = started(first)
        for step in range(10):
            first.log({"grad/norm/total": 1.0 + 0.1 * step}, step=step)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("main .card h1")
    page.goto(f"{pg_server.url}/runs/{run_id}")
    shows(page, ("finished", "segment 1", "Config (0 keys)", "last step 9"))
    page.wait_for_function(CHANNEL_OPEN_JS)

    # The trainer comes back from the checkpoint at step 6 with two config keys.
    with Run(
        pg_server.url,
        token=tenant.ingest,
        name=NAME,
        start_step=6,
        config={"optimizer": {"lr": 3e-4}, "seed": 7},
    ) as resumed:
        assert started(resumed) == run_id
        for step in range(6, 15):
            resumed.log({"grad/norm/total": 2.0}, step=step)
        shows(
            page,
            ("running", "segment 2 · restarted at 6", "Config (2 keys)", "last step 14"),
        )
        assert page.get_attribute("#run-status", "class") == "status status-running"
        page.click("#run-config summary")
        assert page.inner_text("#run-config table").split("\n")[1:] == [
            "optimizer.lr\t0.0003",
            "seed\t7",
        ]
    shows(page, ("finished", "segment 2 · restarted at 6", "Config (2 keys)", "last step 14"))
    assert page.get_attribute("#run-status", "class") == "status status-finished"
    # The section the reader opened stays open as the header is redrawn.
    assert page.get_attribute("#run-config", "open") == ""
    page.screenshot(path=str(artifacts / "run-header-live.png"))
    assert errors == []
