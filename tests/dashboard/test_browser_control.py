"""The run page's "Ask the trainer" section in real headless Chromium: an admin asks a live
trainer (the real client, streaming to the real server) to stop; the trainer hears it and
the page follows the request to "read by the trainer"; a reader cannot ask."""

from __future__ import annotations

import time
from pathlib import Path

from playwright.sync_api import Page, expect

from normwatch.client import Run
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant


def test_an_admin_stops_a_live_trainer_from_the_run_page(
    page: Page, pg_server: ServerProcess, tmp_path: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run = Run(
        pg_server.url,
        token=tenant.ingest,
        project=tenant.project,
        name="live-trainer",
        flush_interval=0.1,
        spool_dir=tmp_path,
    )
    step = 0

    def train(seconds: float) -> None:
        nonlocal step
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not run.should_stop():
            run.log({"grad/norm/total": 0.3 + step * 1e-3, "train/loss": 2.0}, step=step)
            step += 1
            time.sleep(0.01)

    train(1.0)
    assert run.run_id is not None and run.sent_points > 0

    page.goto(f"{pg_server.url}/login?token={tenant.admin}&next=/runs/{run.run_id}")
    page.wait_for_selector("#control-stop")
    page.click("#control-stop")
    expect(page.locator("#control-message .error")).to_contain_text("say why the run should stop")
    page.fill("#control-reason", "loss diverging after the LR change")
    page.click("#control-stop")
    expect(page.locator("#control-message")).to_contain_text("Asked the trainer to stop")
    expect(page.locator("#control-list")).to_contain_text("loss diverging after the LR change")

    train(10.0)  # until the answer to a batch carries the stop
    assert run.should_stop()
    [request] = run.control_requests
    assert (request.action, request.reason) == ("stop", "loss diverging after the LR change")
    run.finish(timeout=30)  # its last batch tells the server the request was read
    expect(page.locator("#control-list .control-seen")).to_have_text(
        "read by the trainer", timeout=15_000
    )
    expect(page.locator("#event-list")).to_contain_text("stop requested by")

    reader = page.context.browser
    assert reader is not None
    context = reader.new_context()
    try:
        other = context.new_page()
        other.goto(f"{pg_server.url}/login?token={tenant.read}&next=/runs/{run.run_id}")
        other.wait_for_selector("#control-stop")
        assert other.is_disabled("#control-stop") and other.is_disabled("#control-checkpoint")
        expect(other.locator("#control-list")).to_contain_text("read by the trainer")
    finally:
        context.close()
