"""The run page's metric panels with many metrics: what a page load reads and how long it takes.

A run of ``--metrics`` metrics (300: grad and parameter norms of many layers, the loss, the
optimizer's) of ``--steps`` steps (2,000) is posted over HTTP to a real server (one worker)
on a scratch Postgres database. Headless Chromium (the browser tests' flags) opens its run
page ``--repeat`` times (5, after one warm-up, the browser cache warm) and times each load
from navigation until the overlay and every panel within 200 px of the window are drawn.
Counted 2 s after each load: the panels drawn (each one series read through the chart
reads), of all the panels on the page. Then the page is scrolled past its last panel, a
screen at a time (each timed until the panels then in view are drawn), and the panels
drawn are counted again: they are drawn as they come into view.

Baseline: the same page for a run of only the two metrics the overlay draws (two panels),
timed the same way in the same session; and the API read of every metric at a panel's
resolution (requests of 64 metrics: what a page that drew every panel at once would read),
beside that of only those drawn at load.

Run (from the repository root)::

    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/run_panels.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _harness import make_tokens, percentile, say, scratch_postgres, table
from playwright.sync_api import Page, sync_playwright

from normwatch.dashboard.panel_figure import PANEL_POINTS
from normwatch.testing import CHROMIUM_FLAGS, chromium_path, running_server

PROJECT = "panels-bench"
API_METRICS = 64
"""The most metrics one series request names."""
DRAWN = "#panel-groups .panel-body .js-plotly-plot"
IN_VIEW_DRAWN = """(MINIMUM) => {
    if (document.querySelector('#overlay .js-plotly-plot') === null) { return false; }
    const near = Array.from(document.querySelectorAll('#panel-groups .panel[data-key]'))
        .filter(p => { const r = p.getBoundingClientRect();
                       return r.height > 0 && r.bottom >= -200 && r.top <= innerHeight + 200; });
    return near.length >= MINIMUM && near.every(p => p.querySelector('.js-plotly-plot') !== null);
}"""
PANELS_END = """() => { const all = document.querySelectorAll('#panel-groups .panel');
    return all[all.length - 1].getBoundingClientRect().bottom <= innerHeight; }"""


def metric_names(count: int) -> list[str]:
    """``count`` names as a transformer logs them: the loss, optimizer, totals, then layers."""
    names = ["train/loss", "optim/lr", "grad/norm/total", "params/norm/total"]
    layer = 0
    while len(names) < count:
        for part in ("attn.q", "attn.k", "attn.v", "mlp.up", "mlp.down"):
            names += [f"grad/norm/layers.{layer}.{part}", f"params/norm/layers.{layer}.{part}"]
        layer += 1
    return names[:count]


def load(server_url: str, token: str, names: list[str], steps: int, name: str) -> str:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server_url, headers=headers, timeout=300) as api:
        run = api.post("/api/v1/runs", json={"name": name, "start_step": 0}).json()
        for first in range(0, steps, 500):
            xs = list(range(first, min(steps, first + 500)))
            metrics = {
                n: [1.0 + (i % 7) * 0.01 + s * 1e-4 for s in xs] for i, n in enumerate(names)
            }
            r = api.post(
                f"/api/v1/runs/{run['id']}/metrics", json={"steps": xs, "metrics": metrics}
            )
            assert r.status_code == 202, r.text
    return str(run["id"])


def page_load(page: Page, url: str) -> tuple[float, int]:
    """Milliseconds until the overlay and every panel within 200 px of the window are
    drawn, and the panels drawn 2 s later (each one series read)."""
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_function(IN_VIEW_DRAWN, arg=1, polling=20)
    elapsed = (time.perf_counter() - start) * 1000
    page.wait_for_timeout(2000)
    return elapsed, page.locator(DRAWN).count()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--metrics", type=int, default=300)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    names = metric_names(args.metrics)
    with scratch_postgres("panels") as url, tempfile.TemporaryDirectory() as logs:
        ingest, read = make_tokens(url, PROJECT, "ingest", "read")
        with running_server(url, Path(logs)) as server:
            say(f"loading {len(names)} metrics x {args.steps} steps")
            run = load(server.url, ingest, names, args.steps, "many-metrics")
            # Baseline: the same page for a run of the two metrics the overlay draws.
            small = load(server.url, ingest, names[2:4], args.steps, "two-metrics")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=chromium_path() or "/usr/bin/chromium", args=CHROMIUM_FLAGS
                )
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.set_default_timeout(60_000)
                page.goto(f"{server.url}/login?token={read}")
                page.wait_for_selector("table.runs")
                baseline_url = f"{server.url}/runs/{small}"
                page_load(page, baseline_url)  # warm-up
                baseline = sorted(page_load(page, baseline_url)[0] for _ in range(args.repeat))
                say("two metrics measured")
                page_url = f"{server.url}/runs/{run}"
                page_load(page, page_url)  # warm-up
                loads = [page_load(page, page_url) for _ in range(args.repeat)]
                say(f"{len(names)} metrics measured")
                panels = page.locator("#panel-groups .panel").count()
                scroll_ms = []
                for _ in range(200):
                    start = time.perf_counter()
                    page.mouse.wheel(0, 900)
                    page.wait_for_function(IN_VIEW_DRAWN, arg=0, polling=20)
                    scroll_ms.append((time.perf_counter() - start) * 1000)
                    if page.evaluate(PANELS_END):
                        break
                scrolled = page.locator(DRAWN).count()
                say(f"loads (ms, panels drawn): {loads}; baseline {baseline}")
                say(f"panels {panels}, drawn after scrolling {scrolled}, screens {scroll_ms}")
                browser.close()
            headers = {"Authorization": f"Bearer {read}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=120) as api:
                drawn = loads[-1][1]
                api_ms = []
                for metrics in (names, names[:drawn]):
                    start = time.perf_counter()
                    for first in range(0, len(metrics), API_METRICS):
                        r = api.get(
                            f"/api/v1/runs/{run}/series",
                            params={
                                "metric": metrics[first : first + API_METRICS],
                                "points": PANEL_POINTS,
                            },
                        )
                        assert r.status_code == 200, r.text
                    api_ms.append((time.perf_counter() - start) * 1000)
    times = sorted(ms for ms, _ in loads)
    print(
        table(
            ["measure", "value"],
            [
                ["panels on the page", f"{panels}"],
                ["panels drawn at load (series read)", ", ".join(str(n) for _, n in loads)],
                [
                    "page load p50 / p95 ms",
                    f"{percentile(times, 50):,.0f} / {percentile(times, 95):,.0f}",
                ],
                [
                    "baseline: page load of a run of 2 metrics, p50 / p95 ms",
                    f"{percentile(baseline, 50):,.0f} / {percentile(baseline, 95):,.0f}",
                ],
                ["ratio (p50)", f"{percentile(times, 50) / percentile(baseline, 50):.2f}x"],
                ["panels drawn after scrolling past the last", f"{scrolled}"],
                [
                    "a screen scrolled until its panels are drawn, p50 / p95 ms",
                    f"{percentile(sorted(scroll_ms), 50):,.0f} / "
                    f"{percentile(sorted(scroll_ms), 95):,.0f} ({len(scroll_ms)} screens)",
                ],
                ["API: every metric at panel resolution, ms", f"{api_ms[0]:,.0f}"],
                ["API: the metrics drawn at load, ms", f"{api_ms[1]:,.0f}"],
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
