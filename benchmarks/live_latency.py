"""Live: how long a step a trainer logs takes to show on the charts of open run pages.

What is measured: a real ``normwatch serve`` process (one worker) on a scratch Postgres
database that the script creates, migrates and drops; headless Chromium (the browser tests'
flags) with ``--tabs`` pages of one run open in one browser profile, as one user's tabs,
``--front`` of them in front and the others behind (their document says it is hidden, as a
background tab's does; the browser's own throttling of background tabs is not emulated, so
they cost at least what real ones would); and the real trainer client,
`normwatch.client.Run` with its default flush (0.5 s), logging two metrics at ``--rate``
steps a second for ``--seconds``. Every page polls its chart every 20 ms (the last step of
the first trace of ``#overlay``'s plotly graph) and notes the time (``Date.now()``) each new
last step first appears; a step's latency is that time minus the ``time.time()`` at which
``run.log`` was called for it (one machine, one clock), over the pages in front. Steps of
the first two seconds are warm-up, not counted. While it logs, the CPU of the server
process, of the browser's processes and of the whole machine is read from ``/proc``. With
``--no-channel`` every page's live channel fails to connect, as behind a proxy that does not
pass WebSocket upgrades, and the pages poll instead.

Then the run logs nothing more: after ``QUIET_S`` seconds the pages are left open for
``--idle`` seconds and the script counts their requests and the server process's CPU time;
the same once more after the run is marked finished.

Baselines, in the same run: for latency, the same trainer logging to a run that no page
shows, with this process polling ``GET /api/v1/runs/{id}/metrics`` every 20 ms: when each
step is first readable through the API, which is the client's flush plus ingest, the floor
of any page. For the idle cost, the server's CPU with no page open is read first (its own
clocks: the alert dispatcher, telemetry), and a quiet page's cost is what each page adds
to it, compared with the server CPU of that same API read once a second (what a script
watching the run would cost).

Run (from the repository root; Chromium from Debian's ``chromium`` package)::

    .venv/bin/python benchmarks/live_latency.py                # 1 tab, 8 tabs (1 in front), ~4 min
    .venv/bin/python benchmarks/live_latency.py --tabs 8 --front 8   # eight charts on screen
    .venv/bin/python benchmarks/live_latency.py --no-channel   # pages that poll instead
    .venv/bin/python benchmarks/live_latency.py --quick        # 1 and 4 tabs, 15 s, ~1.5 min
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _harness import (
    make_tokens,
    percentile,
    process_cpu_seconds,
    process_tree,
    say,
    scratch_postgres,
    table,
)
from ingest_http import machine_busy
from playwright.sync_api import Browser, Page, sync_playwright

from normwatch.client import Run
from normwatch.testing import CHROMIUM_FLAGS, chromium_path, running_server

PROJECT = "live"
TOTAL = "grad/norm/total"
FINAL = "params/norm/final_norm.weight"
WARMUP_S = 2.0
"""Steps logged in the first seconds are not counted: the pages' first draws settle."""
QUIET_S = 6.0
"""After the last step, the pages are left this long before their idle cost is measured."""
POLL_S = 0.02
GRAPH = "#overlay .js-plotly-plot"

# In each page before any script of Dash's: notes when each new last step of the chart's
# first trace appears, and counts the page's requests to the server (Dash's callbacks and
# the WebSockets it opens) and the messages those bring.
RECORDER_JS = f"""
(() => {{
  const live = {{last: -1, seen: [], requests: 0, pushed: 0}};
  window.__live = live;
  const fetch0 = window.fetch;
  window.fetch = function () {{ live.requests += 1; return fetch0.apply(this, arguments); }};
  const Socket = window.WebSocket;
  window.WebSocket = function (url, protocols) {{
    const socket = new Socket(url, protocols);
    live.requests += 1;
    socket.addEventListener('message', () => {{ live.pushed += 1; }});
    return socket;
  }};
  window.WebSocket.prototype = Socket.prototype;
  Object.assign(window.WebSocket, {{CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3}});
  setInterval(() => {{
    const gd = document.querySelector('{GRAPH}');
    const xs = gd && gd.data && gd.data[0] && gd.data[0].x;
    if (!xs || !xs.length) return;
    const last = Number(xs[xs.length - 1]);
    if (last > live.last) {{ live.last = last; live.seen.push([last, Date.now()]); }}
  }}, {POLL_S * 1000:.0f});
}})();
"""
# As behind a proxy that does not pass WebSocket upgrades: the live channel never opens.
NO_CHANNEL_JS = """
(() => {
  const Socket = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    return new Socket(String(url).endsWith('/live') ? 'ws://127.0.0.1:9/' : url, protocols);
  };
  window.WebSocket.prototype = Socket.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
"""
# A page behind others: its document says so, as a background tab's does.
BEHIND_JS = """
Object.defineProperty(Document.prototype, 'hidden', {get: () => true, configurable: true});
Object.defineProperty(Document.prototype, 'visibilityState',
                      {get: () => 'hidden', configurable: true});
"""


@dataclass
class Latencies:
    """Seconds from ``run.log`` to the step's first appearance, one sample a step and page."""

    seconds: list[float] = field(default_factory=list)
    missed: int = 0

    def add(self, logged: dict[int, float], seen: list[tuple[float, float]]) -> None:
        """``seen``: (last step, epoch seconds) as a page noted them, in order."""
        for step, at in logged.items():
            first = next((when for last, when in seen if last >= step), None)
            if first is None:
                self.missed += 1
            else:
                self.seconds.append(first - at)

    def summary(self) -> tuple[float, float, float]:
        ordered = sorted(self.seconds)
        return percentile(ordered, 50), percentile(ordered, 95), ordered[-1]


@dataclass
class Cost:
    """Requests a second a page, and CPU ms a second of the server and of the browser."""

    requests_s: float
    server_ms_s: float
    browser_ms_s: float
    busy_cores: float
    """Cores the whole machine kept busy (everything on it, not only this benchmark)."""


@dataclass
class TabResult:
    tabs: int
    front: int
    latency: Latencies
    logging: Cost
    quiet: Cost
    finished: Cost

    @property
    def name(self) -> str:
        if self.tabs == 1:
            return "1 tab"
        return f"{self.tabs} tabs, {self.front} in front"


def log_steps(run: Run, seconds: float, rate: float, first_step: int) -> dict[int, float]:
    """Log one step every 1/``rate`` s for ``seconds``; the wall time of each call."""
    logged: dict[int, float] = {}
    start = time.monotonic()
    for i in range(round(seconds * rate)):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        step = first_step + i
        logged[step] = time.time()
        run.log({TOTAL: 0.5 + 0.001 * (step % 100), FINAL: 80.0 + 0.01 * step}, step=step)
    return logged


def counted(logged: dict[int, float], since: float) -> dict[int, float]:
    return {step: at for step, at in logged.items() if at >= since}


def started_run(url: str, token: str, name: str, spool: Path) -> Run:
    """A client run with one step logged, once the server has created it."""
    run = Run(url, token=token, name=name, start_step=0, spool_dir=spool)
    run.log({TOTAL: 0.5, FINAL: 80.0}, step=0)
    deadline = time.monotonic() + 30
    while run.run_id is None or run.pending_points:
        if time.monotonic() > deadline:
            raise RuntimeError("the client did not create the run within 30 s")
        time.sleep(0.05)
    return run


def api_floor(url: str, ingest: str, read: str, seconds: float, rate: float) -> Latencies:
    """When each step is first readable through the API, polled every `POLL_S`."""
    with tempfile.TemporaryDirectory() as spool:
        run = started_run(url, ingest, "api floor", Path(spool))
        seen: list[tuple[float, float]] = []
        done = threading.Event()

        def poll() -> None:
            headers = {"Authorization": f"Bearer {read}"}
            with httpx.Client(base_url=url, headers=headers, timeout=10) as api:
                last = -1
                while not done.is_set():
                    metrics = api.get(f"/api/v1/runs/{run.run_id}/metrics").json()
                    now = time.time()
                    step = max((m["last_step"] or -1 for m in metrics), default=-1)
                    if step > last:
                        last = step
                        seen.append((step, now))
                    time.sleep(POLL_S)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        started = time.time()
        logged = log_steps(run, seconds, rate, first_step=1)
        time.sleep(2.0)
        done.set()
        poller.join()
        run.finish()
    latency = Latencies()
    latency.add(counted(logged, started + WARMUP_S), seen)
    return latency


def api_read_cpu_ms(url: str, read: str, run_id: str, pid: int, reads: int = 200) -> float:
    """Server CPU ms of one ``GET /api/v1/runs/{id}/metrics``."""
    headers = {"Authorization": f"Bearer {read}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as api:
        api.get(f"/api/v1/runs/{run_id}/metrics").raise_for_status()
        cpu = process_cpu_seconds(pid)
        for _ in range(reads):
            api.get(f"/api/v1/runs/{run_id}/metrics").raise_for_status()
        return (process_cpu_seconds(pid) - cpu) * 1000 / reads


@contextmanager
def open_pages(
    browser: Browser, url: str, read: str, run_id: str, tabs: int, front: int, channel: bool
) -> Iterator[list[Page]]:
    """``tabs`` pages of the run in one browser profile, the first ``front`` in front, each
    with its chart drawn; without their live ``channel`` unless told."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        context.add_init_script(RECORDER_JS)
        if not channel:
            context.add_init_script(NO_CHANNEL_JS)
        login = context.new_page()
        login.goto(f"{url}/login?token={read}")
        login.wait_for_selector("main .card")
        login.close()
        pages = []
        for index in range(tabs):
            page = context.new_page()
            page.set_default_timeout(60_000)
            if index >= front:
                page.add_init_script(BEHIND_JS)
            page.goto(f"{url}/runs/{run_id}")
            pages.append(page)
        for page in pages:
            page.wait_for_function("() => window.__live && window.__live.last >= 0")
        yield pages
    finally:
        context.close()


def browser_cpu_seconds() -> float:
    """CPU seconds of the Chromium processes this script started (and still runs)."""
    total = 0.0
    for pid in process_tree(os.getpid())[1:]:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if "chrom" in name:
            total += process_cpu_seconds(pid)
    return total


@contextmanager
def costs(pages: list[Page], pid: int) -> Iterator[list[Cost]]:
    """What the pages cost while the block runs; the one `Cost` is in the list after it."""
    requests = sum(int(page.evaluate("window.__live.requests")) for page in pages)
    server, browser, busy = process_cpu_seconds(pid), browser_cpu_seconds(), machine_busy()[0]
    started = time.monotonic()
    found: list[Cost] = []
    yield found
    elapsed = time.monotonic() - started
    requests = sum(int(page.evaluate("window.__live.requests")) for page in pages) - requests
    found.append(
        Cost(
            requests / elapsed / len(pages),
            (process_cpu_seconds(pid) - server) * 1000 / elapsed,
            (browser_cpu_seconds() - browser) * 1000 / elapsed,
            (machine_busy()[0] - busy) / elapsed,
        )
    )


def with_tabs(
    browser: Browser,
    url: str,
    tokens: tuple[str, str],
    pid: int,
    tabs: int,
    args: argparse.Namespace,
) -> TabResult:
    ingest, read = tokens
    front = min(tabs, args.front)
    with tempfile.TemporaryDirectory() as spool:
        run = started_run(url, ingest, f"live {tabs} tabs", Path(spool))
        assert run.run_id is not None
        with open_pages(browser, url, read, run.run_id, tabs, front, args.channel) as pages:
            started = time.time()
            with costs(pages, pid) as logging:
                logged = log_steps(run, args.seconds, args.rate, first_step=1)
            time.sleep(QUIET_S)
            latency = Latencies()
            for page in pages[:front]:
                seen = [(step, ms / 1000) for step, ms in page.evaluate("window.__live.seen")]
                latency.add(counted(logged, started + WARMUP_S), seen)
            with costs(pages, pid) as quiet:
                time.sleep(args.idle)
            run.finish()
            time.sleep(QUIET_S)
            with costs(pages, pid) as finished:
                time.sleep(args.idle)
    return TabResult(tabs, front, latency, logging[0], quiet[0], finished[0])


def report(
    floor: Latencies,
    read_cpu_ms: float,
    alone_ms_s: float,
    results: list[TabResult],
    channel: bool,
) -> None:
    f50, f95, fmax = floor.summary()
    rows = [["API floor (no page)", *(f"{v * 1000:,.0f}" for v in (f50, f95, fmax))]]
    rows[0] += [str(len(floor.seconds)), "", ""]
    for r in results:
        p50, p95, most = r.latency.summary()
        missed = f" ({r.latency.missed} missed)" if r.latency.missed else ""
        rows.append(
            [
                r.name,
                *(f"{v * 1000:,.0f}" for v in (p50, p95, most)),
                f"{len(r.latency.seconds)}{missed}",
                f"{p50 / f50:.1f}x / {p95 / f95:.1f}x",
                "yes" if p95 < 1.0 and not r.latency.missed else "NO",
            ]
        )
    print()
    how = "" if channel else " (no live channel: the pages poll)"
    print(f"## Step logged to step on the charts in front (ms){how}")
    print()
    print(table(["pages", "p50", "p95", "max", "samples", "p50 / p95 vs API", "p95 < 1 s"], rows))
    print()
    print("## What the pages cost: requests/s a page, server CPU ms/s (all pages)")
    print()
    cost = [
        [
            r.name,
            f"{r.logging.requests_s:.1f} / {r.logging.server_ms_s:.0f}",
            f"{r.quiet.requests_s:.1f} / {r.quiet.server_ms_s:.0f}",
            f"{r.finished.requests_s:.1f} / {r.finished.server_ms_s:.0f}",
            f"{(r.quiet.server_ms_s - alone_ms_s) / r.tabs:.1f}",
            f"{(r.quiet.server_ms_s - alone_ms_s) / r.tabs / read_cpu_ms:.1f}x",
        ]
        for r in results
    ]
    headers = [
        "pages",
        "while logging",
        "run quiet",
        "run finished",
        "a quiet page, ms/s",
        "a quiet page / API",
    ]
    print(table(headers, cost))
    print()
    print(
        f"The server alone (no page open) used {alone_ms_s:.1f} ms/s of CPU; a quiet page is "
        "what each page adds to it. API: one GET /api/v1/runs/{id}/metrics costs the server "
        f"{read_cpu_ms:.2f} ms of CPU; a quiet page / API is a quiet page over that read once "
        "a second."
    )
    for r in results:
        print(
            f"while logging, {r.name}: browser CPU {r.logging.browser_ms_s:,.0f} ms/s, the "
            f"machine {r.logging.busy_cores:.2f} of {os.cpu_count()} cores busy (all of it)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--tabs", type=int, nargs="+", default=None, help="pages open (1 8)")
    parser.add_argument("--seconds", type=float, default=None, help="logging time (40)")
    parser.add_argument("--rate", type=float, default=4.0, help="steps a second")
    parser.add_argument("--idle", type=float, default=10.0, help="idle measurement (s)")
    parser.add_argument("--front", type=int, default=1, help="pages in front (1)")
    parser.add_argument(
        "--no-channel",
        dest="channel",
        action="store_false",
        help="pages without their live channel (as behind a proxy that drops WebSockets)",
    )
    parser.add_argument("--quick", action="store_true", help="1 and 4 tabs, 15 s")
    args = parser.parse_args(argv)
    args.tabs = args.tabs or ([1, 4] if args.quick else [1, 8])
    args.seconds = args.seconds or (15.0 if args.quick else 40.0)
    if args.quick:
        args.idle = min(args.idle, 5.0)

    with scratch_postgres("live") as url, tempfile.TemporaryDirectory() as logs:
        ingest, read = make_tokens(url, PROJECT, "ingest", "read")
        with running_server(url, Path(logs)) as server:
            pid = server.process.pid
            say(f"API floor: logging {args.seconds:.0f} s at {args.rate:g} steps/s, no page")
            floor = api_floor(server.url, ingest, read, args.seconds, args.rate)
            time.sleep(QUIET_S)
            alone = process_cpu_seconds(pid)
            time.sleep(args.idle)
            alone_ms_s = (process_cpu_seconds(pid) - alone) * 1000 / args.idle
            results = []
            with sync_playwright() as pw:
                chromium = chromium_path() or "/usr/bin/chromium"
                browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
                for tabs in args.tabs:
                    say(
                        f"{tabs} tab(s), {min(tabs, args.front)} in front: logging "
                        f"{args.seconds:.0f} s at {args.rate:g} steps/s"
                    )
                    results.append(with_tabs(browser, server.url, (ingest, read), pid, tabs, args))
                    p50, p95, most = results[-1].latency.summary()
                    say(
                        f"  p50 {p50 * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms, max {most * 1e3:.0f} ms"
                    )
                browser.close()
            with httpx.Client(base_url=server.url, timeout=10) as api:
                runs = api.get("/api/v1/runs", headers={"Authorization": f"Bearer {read}"}).json()
            read_cpu = api_read_cpu_ms(server.url, read, runs[0]["id"], pid)
    report(floor, read_cpu, alone_ms_s, results, args.channel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
