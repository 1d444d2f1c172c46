"""A run page opened before the run logs anything: it draws the first points when they land
and the pickers gain metrics logged later, with no reload, in real Chromium against a real
server, fed by the real trainer client; later steps keep arriving, each told by the server
on the page's live channel; a hidden tab rests until it shows; and the page reconnects when
the server restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import ConsoleMessage, Page

from normwatch.client import Run
from normwatch.testing import ServerProcess, free_port, start_server
from tests.helpers.tenants import make_tenant

GRAPH = "#overlay .js-plotly-plot"
STEPS_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data) return [];
  return gd.data.map(t => [t.name, Array.from(t.x || []).length]);
}}"""
CHANNEL_OPEN_JS = """() => window.normwatchLive && window.normwatchLive.socket
  && window.normwatchLive.socket.readyState === WebSocket.OPEN"""
# The tab goes behind another, or comes back: what the browser says then.
HIDE_JS = """() => {
  Object.defineProperty(document, 'hidden', {get: () => HIDDEN, configurable: true});
  document.dispatchEvent(new Event('visibilitychange'));
}"""


def shows_step(step: int) -> str:
    return f"""() => {{
      const gd = document.querySelector('{GRAPH}');
      const x = gd && gd.data && gd.data.length && gd.data[0].x;
      return !!x && x.length > 0 && x[x.length - 1] >= {step};
    }}"""


def started(run: Run) -> str:
    deadline = time.monotonic() + 10
    while run.run_id is None:  # the client creates the run in the background
        assert time.monotonic() < deadline, "the client did not create the run"
        time.sleep(0.05)
    return run.run_id


@pytest.mark.slow
def test_a_page_opened_before_the_first_metric_draws_it_live(
    page: Page, pg_server: ServerProcess
) -> None:
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    tenant = make_tenant(pg_server.database_url)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("main .card h1")
    with Run(pg_server.url, token=tenant.ingest, name="just launched", start_step=0) as run:
        page.goto(f"{pg_server.url}/runs/{started(run)}")
        page.wait_for_selector(f"{GRAPH} :text('This run has no metrics yet')")
        page.wait_for_function(CHANNEL_OPEN_JS)
        page.wait_for_timeout(1500)  # a few ticks with nothing to draw

        logged = time.monotonic()
        for step in range(20):
            run.log(
                {"grad/norm/total": 0.5 + 0.01 * step, "params/norm/final_norm.weight": 80.0},
                step=step,
            )
        page.wait_for_function(
            f"() => {{ const t = ({STEPS_JS})(); return t.length === 2 && t[0][1] >= 20; }}",
            timeout=10_000,
        )
        seen_after = time.monotonic() - logged
        traces = dict(page.evaluate(f"({STEPS_JS})()"))
        assert traces == {"grad/norm/total": 20, "params/norm/final_norm.weight": 20}
        assert "grad/norm/total" in page.inner_text("#left-metric")
        assert "final_norm.weight" in page.inner_text("#right-metric")
        # The client flushes every 0.5 s and the server tells the page: well within 5 s.
        assert seen_after < 5, seen_after

        # A metric logged later joins the pickers, and the chart keeps drawing.
        for step in range(20, 30):
            run.log({"grad/norm/total": 0.6, "train/loss": 3.0 - 0.01 * step}, step=step)
        page.locator("#left-metric").click()
        page.get_by_role("option", name="train/loss", exact=True).wait_for(timeout=10_000)
        page.keyboard.press("Escape")
        page.wait_for_function(
            f"() => {{ const t = ({STEPS_JS})(); return t.length && t[0][1] >= 30; }}",
            timeout=10_000,
        )

        # Later steps keep arriving one by one, each told by the server (a poke of the
        # channel), not found by the page's own interval, which is 5 s with the channel open.
        pokes = page.evaluate("window.normwatchLive.pokes")
        lags = []
        for step in range(30, 42):
            run.log({"grad/norm/total": 0.7, "params/norm/final_norm.weight": 81.0}, step=step)
            logged = time.monotonic()
            page.wait_for_function(shows_step(step), timeout=10_000)
            lags.append(time.monotonic() - logged)
        assert page.evaluate("window.normwatchLive.pokes") - pokes >= 6
        assert sorted(lags)[len(lags) // 2] < 2.5, lags

        # Hidden, the tab rests: what the run logs meanwhile is drawn once it shows again.
        page.evaluate(HIDE_JS.replace("HIDDEN", "true"))
        run.log({"grad/norm/total": 0.8, "params/norm/final_norm.weight": 82.0}, step=42)
        page.wait_for_timeout(2500)
        assert not page.evaluate(f"({shows_step(42)})()")
        page.evaluate(HIDE_JS.replace("HIDDEN", "false"))
        page.wait_for_function(shows_step(42), timeout=5_000)
    assert errors == []


def test_the_page_reconnects_when_the_server_restarts(
    page: Page, pg_server: ServerProcess, tmp_path: Path
) -> None:
    """The server goes away and comes back on the same port: the page's channel closes,
    opens again by itself, and the steps the trainer logged meanwhile and after are drawn,
    with no reload."""
    port = free_port()
    server = start_server(pg_server.database_url, tmp_path, port=port)
    try:
        tenant = make_tenant(server.database_url)
        page.goto(f"{server.url}/login?token={tenant.read}")
        page.wait_for_selector("main .card h1")
        with Run(server.url, token=tenant.ingest, name="restarted", start_step=0) as run:
            run.log({"grad/norm/total": 0.5, "params/norm/final_norm.weight": 80.0}, step=0)
            page.goto(f"{server.url}/runs/{started(run)}")
            page.wait_for_function(shows_step(0), timeout=10_000)
            page.wait_for_function(CHANNEL_OPEN_JS)

            server.stop()
            page.wait_for_function("() => !window.normwatchLive.socket")
            run.log({"grad/norm/total": 0.6, "params/norm/final_norm.weight": 80.0}, step=1)
            server = start_server(server.database_url, tmp_path, port=port)
            page.wait_for_function(CHANNEL_OPEN_JS, timeout=20_000)
            page.wait_for_function(shows_step(1), timeout=15_000)  # spooled while it was down
            run.log({"grad/norm/total": 0.7, "params/norm/final_norm.weight": 80.0}, step=2)
            page.wait_for_function(shows_step(2), timeout=10_000)
    finally:
        server.stop()
