"""A run page opened before the run logs anything: it draws the first points when they land
and the pickers gain metrics logged later, with no reload, in real Chromium against a real
server, fed by the real trainer client."""

from __future__ import annotations

import time

from normwatch.client import Run
from playwright.sync_api import ConsoleMessage, Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

GRAPH = "#overlay .js-plotly-plot"
STEPS_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data) return [];
  return gd.data.map(t => [t.name, Array.from(t.x || []).length]);
}}"""


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
        deadline = time.monotonic() + 10
        while run.run_id is None:  # the client creates the run in the background
            assert time.monotonic() < deadline, "the client did not create the run"
            time.sleep(0.05)
        page.goto(f"{pg_server.url}/runs/{run.run_id}")
        page.wait_for_selector(f"{GRAPH} :text('This run has no metrics yet')")
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
        # The client flushes every 0.5 s and the page ticks every 1 s: well within 5 s.
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
    assert errors == []
