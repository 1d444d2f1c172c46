"""A run page's header follows its run with no reload, in real Chromium against a real
server fed by the real trainer client: a finished run resumed from a checkpoint reads
"running" and its new segment, the config keys the trainer posted appear, the last step
moves, and the run finished again reads "finished". An admin edits the run's note under
its title; a reader reads it there."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page

from normwatch.client import Run
from normwatch.server.schemas import MAX_NOTES
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .browser_page import BrowserProblems

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


@pytest.mark.slow
def test_an_admin_edits_the_note_under_the_title_and_a_reader_reads_it(
    page: Page, browser: Browser, pg_server: ServerProcess
) -> None:
    tenant = make_tenant(pg_server.database_url)
    with Run(pg_server.url, token=tenant.ingest, name="noted-in-view", start_step=0) as run:
        run_id = started(run)
        run.log({"grad/norm/total": 1.0}, step=0)
    problems = BrowserProblems(page)
    page.goto(f"{pg_server.url}/login?token={tenant.admin}")
    page.wait_for_selector("main .card h1")
    page.goto(f"{pg_server.url}/runs/{run_id}")
    page.wait_for_selector("#run-note-edit")
    assert page.inner_text("#run-note") == ""
    page.click("#run-note-edit")
    page.wait_for_selector("#run-note-editor:not([hidden])")
    page.fill("#run-note-input", "x" * (MAX_NOTES + 1))  # past the box's own limit
    assert page.input_value("#run-note-input") == "x" * MAX_NOTES
    page.fill("#run-note-input", "diverged at 4k; rerun with warmup")
    page.click("#run-note-save")
    page.wait_for_selector("#run-note-message .ok")
    assert page.inner_text("#run-note-message") == "Saved the note on noted-in-view."
    assert page.inner_text("#run-note") == "diverged at 4k; rerun with warmup"
    page.wait_for_selector("#run-note-editor[hidden]", state="attached")
    page.reload()
    page.wait_for_selector("#run-note p.run-note-text")
    assert page.inner_text("#run-note") == "diverged at 4k; rerun with warmup"
    problems.assert_none()

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    reader = context.new_page()
    reader.set_default_timeout(15_000)
    reader.goto(f"{pg_server.url}/login?token={tenant.read}")
    reader.wait_for_selector("main .card h1")
    reader.goto(f"{pg_server.url}/runs/{run_id}")
    reader.wait_for_selector("#run-note p.run-note-text")
    assert reader.inner_text("#run-note") == "diverged at 4k; rerun with warmup"
    assert reader.locator("#run-note-edit, #run-note-editor").count() == 0
    # Edited elsewhere (the API), the note changes on the open page without a reload.
    edited = httpx.patch(
        f"{pg_server.url}/api/v1/runs/{run_id}",
        json={"notes": "lr halved at 4k"},
        headers=tenant.headers("admin"),
        timeout=30,
    )
    assert edited.status_code == 200, edited.text
    reader.wait_for_function(
        "() => document.querySelector('#run-note').innerText === 'lr halved at 4k'",
        timeout=10_000,
    )
    context.close()
