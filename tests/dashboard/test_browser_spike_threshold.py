"""The run page's spike threshold in real headless Chromium against a real server: it opens
at the default, says how many spikes a lower threshold would add, writes the chosen
threshold into the URL, and a page opened from that URL is at that threshold."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import numpy as np
from playwright.sync_api import Page

from normwatch.server.analytics.spikes import THRESHOLD, find_spikes
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .browser_page import login
from .seed import create_run, post_points

STEPS = 3000
BUMPS = (1000, 1700, 2600)
"""Single steps 4.7 noise SDs (14 %) above a flat loss: spikes at 4 SDs, not at 5.25."""


def loss() -> list[float]:
    rng = np.random.default_rng(11)
    values = 1.0 + 0.03 * rng.standard_normal(STEPS)
    values[list(BUMPS)] = 1.0 + 4.7 * 0.03
    return values.tolist()


def spike_rows(page: Page) -> list[list[str]]:
    found: list[list[str]] = page.evaluate(
        "Array.from(document.querySelectorAll('#spike-table tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    return found


def test_the_threshold_round_trips_through_the_url(page: Page, pg_server: ServerProcess) -> None:
    steps = np.arange(STEPS)
    # What the page should show, from the finder itself on the same points.
    assert find_spikes(steps, loss()) == []
    assert [s.start for s in find_spikes(steps, loss(), threshold=4)] == list(BUMPS)

    tenant = make_tenant(pg_server.database_url)
    run_id = create_run(pg_server, tenant, "threshold-run")
    post_points(pg_server, tenant, run_id, range(STEPS), {"train/loss": loss()})
    login(page, pg_server, tenant.read)
    page.goto(f"{pg_server.url}/runs/{run_id}")
    page.wait_for_selector("#spike-table p, #spike-table table")

    # At the default: no spike, and a hint that 4 SDs would list three.
    page.wait_for_selector("#spike-table .spike-more")
    assert page.inner_text("#spike-table .spike-more").startswith("3 more at 4 SD")
    assert page.is_checked(f"#spike-threshold input[value='{THRESHOLD}']")
    assert "threshold" not in parse_qs(urlsplit(page.url).query)

    # Choosing 4: the three spikes, and the URL says so.
    page.check("#spike-threshold input[value='4']")
    page.wait_for_function("() => new URLSearchParams(location.search).get('threshold') === '4'")
    page.wait_for_function("() => document.querySelectorAll('#spike-table tbody tr').length === 3")
    assert [row[1] for row in spike_rows(page)] == [f"{at:,}" for at in BUMPS]
    link = page.url

    # The link opens the page at 4 SDs, listing the same spikes.
    page.goto("about:blank")
    page.goto(link)
    page.wait_for_selector("#spike-table p, #spike-table table")
    page.wait_for_function("() => document.querySelectorAll('#spike-table tbody tr').length === 3")
    assert page.is_checked("#spike-threshold input[value='4']")

    # Back to the default: the parameter leaves the URL.
    page.check(f"#spike-threshold input[value='{THRESHOLD}']")
    page.wait_for_function("() => !new URLSearchParams(location.search).has('threshold')")
    page.wait_for_selector("#spike-table .spike-more")
