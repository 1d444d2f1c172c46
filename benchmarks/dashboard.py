"""The dashboard as a user times it: headless Chromium against a real server on Postgres.

Two runs are loaded into a scratch Postgres database: the demo's simulated run (48 layers,
steps 0-94,999, the config change at 81k, its alert rules and events, as ``normwatch demo``
streams it) and a large one, ``--steps`` steps (1,000,000; 100,000 with ``--quick``) of the
same simulation at 80 layers, every one of its 251 metrics logged at every step, posted over
HTTP and then compacted. A server (one worker, as ``normwatch serve`` starts) serves them, and
Chromium (the flags the browser tests use) drives the dashboard as a user does:

* **first visit**: a new, empty browser profile (no cookies, no cache) opens the login link
  of the demo run's page (``/login?token=..&next=/runs/..``), timed from the moment the
  browser is told to go there until the chart is drawn; **run page load** of each run with
  the cache a returning user has;
* **zoom by drag** over the middle tenth of the large run's chart, timed until the chart is
  drawn anew and until every section has settled;
* **transition click** and **spike click**: a row of each table, which zooms and focuses;
* **layer family**: the per-layer section switched to another family of norms;
* **compare** the two runs: ticked on the runs page, then its "compare 2 runs" link;
* **alerts** and **rules** pages, reached through the top bar;
* **rule preview** of a rule of every kind (the demo's threshold, forecast, spike and
  non-finite rules, and a slope rule added here) on the demo run.

All the while a trainer (`_live_trainer.LiveTrainer`, in a process of its own) streams the
simulation's metrics through the real client into a run of its own on the same server.

A load ends once every callback the page set off has answered and been drawn (its response
received, then two animation frames) **and** plotly.js has drawn the chart's lines (a trace's
SVG path with points), whichever is later; an interaction once its callbacks have, and the
chart where it has one. Each wait gives up after ``--step-timeout`` seconds (30): the try is
a failure, reported with what it waited for, and the run goes on. The page's 1 s refresh
tick is left running, as a user has it; callbacks the tick alone set off are not counted.
``--repeat`` times each (7), after one warm-up; the report gives p50 and p95 against each
target (1.5 s a load, 500 ms an interaction, 1 s a preview), and the warm-up's time apart
("1st try"): the server keeps what it answered for a run whose data has not changed since
(`normwatch.server.services.kept`), so the tries after the first are a returning user's, the
first one a new question's.

Then one run page is left open on the large run for 10 s: the requests its refresh tick
sends each second and the server CPU they cost, what every open tab adds.

Baseline, in the same run: the API requests that fetch the same data (the series at the
chart's resolution, the transitions, the spikes, the layer grid, the comparison, the alerts,
the preview), sent from this process with a keep-alive connection. Ratio: browser time /
API time.

Run (from the repository root; Chromium from Debian's ``chromium`` package)::

    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/dashboard.py            # 1M steps
    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/dashboard.py --quick    # 100k steps
    .venv/bin/python benchmarks/dashboard.py --quick --only "run page" --profile /tmp/p.svg

``--profile PATH`` samples the server process with ``py-spy`` (``pip install py-spy``) while
the interactions run and writes a flame graph there (``.svg``), or the collapsed stacks
(``.txt``).

Loading the runs takes most of a quick run's minutes. ``--keep`` leaves the scratch database
in place and prints its URL; ``--database URL`` then measures on it again without loading
(the runs are found by name), so that a change can be measured before and after on the same
data within minutes::

    .venv/bin/python benchmarks/dashboard.py --quick --only zoom --keep
    .venv/bin/python benchmarks/dashboard.py --quick --only zoom --database postgresql+psycopg://…
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import sqlalchemy
from _harness import (
    base_pg_url,
    make_tokens,
    percentile,
    process_cpu_seconds,
    say,
    scratch_postgres,
    table,
)
from _live_trainer import LiveTrainer
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from normwatch.demo import DEMO_RULES, HISTORY_END, LIVE_END, PROJECT, RUN_NAME
from normwatch.scratch import create_database
from normwatch.server.db import build_engine, session_factory
from normwatch.server.storage import schedule
from normwatch.server.storage.policy import Policy
from normwatch.simulate import SimulatedRun
from normwatch.testing import CHROMIUM_FLAGS, chromium_path, running_server

TOTAL = "grad/norm/total"
FINAL = "params/norm/final_norm.weight"
BIG_LAYERS = 80
"""Layers of the large run: 3 families × 83 parts + 9 core metrics - 1 = 257 metrics."""
BATCH_STEPS = 4_000
"""Steps a batch of the large run: about a million points, 20 MB of JSON (the bound is 32 MiB)."""
QUIET_MS = 300
"""A page is settled once no counted callback has been in flight for this long."""

# In the page before any script of Dash's: wraps fetch to count the callbacks in flight,
# leaving out those only the refresh tick set off. A callback counts until its answer has
# arrived and two animation frames have passed (Dash renders the answer in between).
TRACKER_JS = """
(() => {
  const st = {inflight: 0, last: 0, requests: 0, bytes: 0, log: [], ticks: 0, drawnAt: 0};
  window.__nw = st;
  const fetch0 = window.fetch;
  window.fetch = function (input, init) {
    const url = typeof input === 'string' ? input : input.url;
    if (!url.includes('_dash-update-component')) return fetch0.apply(this, arguments);
    let changed = [], output = '';
    try {
      const body = JSON.parse((init && init.body) || '{}');
      changed = body.changedPropIds || []; output = body.output || '';
    } catch (e) {}
    // The refresh tick, what it sets off through the page's tick stores (draw-tick...), and
    // the live channel's pokes of the tick.
    const refresh = p => p.endsWith('.n_intervals') || /tick\.data$|^live-poke\.data$/.test(p);
    if (changed.length && changed.every(refresh)) {
      st.ticks += 1;
      return fetch0.apply(this, arguments);
    }
    const entry = {output: output.slice(0, 60), start: performance.now()};
    st.log.push(entry);
    st.inflight += 1; st.requests += 1; st.last = entry.start;
    const done = () => requestAnimationFrame(() => requestAnimationFrame(() => {
      st.inflight -= 1; st.last = entry.drawn = performance.now();
    }));
    return fetch0.apply(this, arguments).then(r => {
      entry.answered = performance.now();
      r.clone().arrayBuffer().then(b => {
        entry.kib = b.byteLength / 1024; st.bytes += b.byteLength; done();
      }, done);
      return r;
    }, e => { done(); throw e; });
  };
})();
"""
SETTLED_JS = f"""() => window.__nw && window.__nw.inflight === 0 && window.__nw.requests > 0
  && performance.now() - Math.max(window.__nw.last, window.__nw.drawnAt) > {QUIET_MS}"""
# Quiet since the chart was drawn too: the run page's sections read once it is.
# A chart is drawn once plotly.js has put its lines in the SVG: a trace's path with points.
# The first time it is, the page's clock is noted (polled every animation frame).
DRAWN_JS = """sel => {
  const gd = document.querySelector(sel);
  const lines = gd ? [...gd.querySelectorAll('.main-svg .scatterlayer .trace path.js-line')] : [];
  const drawn = !!(gd && gd._fullLayout && lines.some(p => (p.getAttribute('d') || '').length > 9));
  if (drawn && window.__nw && !window.__nw.drawnAt) window.__nw.drawnAt = performance.now();
  return drawn;
}"""
STEP_TIMEOUT_MS = 30_000
"""How long one step of a measure (a page settling, a chart drawing) may take; past it the
try is a failure, reported with what it waited for, and the run goes on (``--step-timeout``)."""
OVERLAY = "#overlay .js-plotly-plot"
COMPARE_CHART = "#compare-chart .js-plotly-plot"


@dataclass
class Measure:
    """Times of one interaction, in the browser and through the API."""

    name: str
    browser_ms: list[float] = field(default_factory=list)
    api_ms: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    kib: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Tries that did not finish: which, and what they waited for."""
    first_ms: float = float("nan")
    """The warm-up: the first try since the server started, so the one whose answers the
    server has not kept yet (`normwatch.server.services.kept`)."""


# --- loading --------------------------------------------------------------------------------


def post_run(api: httpx.Client, headers: dict[str, str], name: str, tags: list[str]) -> str:
    made = api.post(
        "/api/v1/runs",
        json={"project": PROJECT, "name": name, "tags": tags, "start_step": 0},
        headers=headers,
    )
    made.raise_for_status()
    return str(made.json()["id"])


def post_block(
    api: httpx.Client,
    headers: dict[str, str],
    run_id: str,
    steps: np.ndarray,
    metrics: dict[str, np.ndarray],
) -> int:
    """One columnar batch; NaN (a metric not logged at a step) goes as null."""
    body = {
        "steps": steps,
        "metrics": {
            name: [None if v != v else v for v in values.tolist()]
            if np.isnan(values).any()
            else values
            for name, values in metrics.items()
        },
    }
    answer = api.post(
        f"/api/v1/runs/{run_id}/metrics",
        content=orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
        headers={**headers, "Content-Type": "application/json"},
    )
    answer.raise_for_status()
    return int(answer.json()["accepted"])


def load_demo(api: httpx.Client, ingest: dict[str, str], admin: dict[str, str]) -> str:
    """The demo's run as ``normwatch demo`` leaves it once the live part has played."""
    sim = SimulatedRun(seed=0)
    run_id = post_run(api, ingest, RUN_NAME, ["simulated", "moe"])
    for rule in DEMO_RULES:
        api.post(
            "/api/v1/alert-rules", json={"runs": {"name": RUN_NAME}, **rule}, headers=admin
        ).raise_for_status()
    points = 0
    for start in range(0, LIVE_END, 5_000):
        stop = min(start + 5_000, LIVE_END)
        steps, metrics = sim.block(start, stop, layer_every=100 if stop <= HISTORY_END else 10)
        points += post_block(api, ingest, run_id, steps, metrics)
    for step, kind, text in sim.events():
        event = {"step": step, "kind": kind, "text": text}
        api.post(f"/api/v1/runs/{run_id}/events", json=event, headers=ingest).raise_for_status()
    say(f"  demo run {run_id}: {LIVE_END:,} steps, {points:,} points")
    return run_id


def load_big(api: httpx.Client, ingest: dict[str, str], steps_total: int) -> str:
    sim = SimulatedRun(seed=1, n_layers=BIG_LAYERS)
    run_id = post_run(api, ingest, f"{BIG_LAYERS}L-{steps_total // 1000}k", ["large"])
    started = time.perf_counter()
    points = 0
    for start in range(0, steps_total, BATCH_STEPS):
        steps, metrics = sim.block(start, min(start + BATCH_STEPS, steps_total))
        points += post_block(api, ingest, run_id, steps, metrics)
        if (start // BATCH_STEPS) % 20 == 0:
            rate = points / (time.perf_counter() - started)
            say(
                f"  large run: {start + len(steps):>9,} steps, {points:>12,} points ({rate:,.0f}/s)"
            )
    say(f"  large run {run_id}: {steps_total:,} steps × {len(metrics)} metrics, {points:,} points")
    return run_id


def loaded_runs(api: httpx.Client, read: dict[str, str], steps_total: int) -> tuple[str, str]:
    """The demo run and the large one of a database loaded before (``--keep``)."""
    answer = api.get("/api/v1/runs", headers=read)
    answer.raise_for_status()
    by_name = {run["name"]: str(run["id"]) for run in answer.json()}
    big = f"{BIG_LAYERS}L-{steps_total // 1000}k"
    if RUN_NAME not in by_name or big not in by_name:
        raise SystemExit(f"--database holds no runs {RUN_NAME!r} and {big!r}: load it with --keep")
    return by_name[RUN_NAME], by_name[big]


@contextmanager
def kept_postgres(prefix: str) -> Iterator[str]:
    """A freshly created and migrated database, left in place for ``--database``."""
    url = create_database(base_pg_url(), prefix)
    yield url
    say(f"kept {url}: measure on it again with --database {url}")


def compact(database_url: str) -> None:
    engine = build_engine(database_url, pool_size=2)
    try:
        started = time.perf_counter()
        report = schedule.compact_everything(session_factory(engine), Policy())
        say(f"  compacted {report.points:,} points in {time.perf_counter() - started:.1f} s")
    finally:
        engine.dispose()


def analyze(database_url: str) -> None:
    """Table statistics, as autovacuum keeps them on a served database: the scratch cluster
    runs without it, and without statistics Postgres read every chunk of a run to find a
    zoom's (the planner guessed a few dozen rows where there were 100,000)."""
    engine = build_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sqlalchemy.text("ANALYZE"))
                conn.commit()
    finally:
        engine.dispose()


# --- timing in the browser ------------------------------------------------------------------


TIMELINE: list[str] = []
"""With ``--timeline``: each measured interaction's callbacks, when each was sent, answered
and drawn (ms from the start), and the KiB of its answer."""


class StepTimeout(Exception):
    """A step of a measure that did not finish in `STEP_TIMEOUT_MS`: what it waited for."""


def wait_for(page: Page, what: str, script: str, arg: Any = None, polling: Any = 50) -> None:
    """``page.wait_for_function`` bounded by `STEP_TIMEOUT_MS`, failing with ``what``."""
    try:
        page.wait_for_function(script, arg=arg, timeout=STEP_TIMEOUT_MS, polling=polling)
    except PlaywrightTimeout as timeout:
        raise StepTimeout(f"{what} (waited {STEP_TIMEOUT_MS / 1000:.0f} s)") from timeout


def settle(page: Page, since: float, graph: str | None = None) -> tuple[float, int, float]:
    """Milliseconds from ``since`` (the page's clock) until settled, and with ``graph`` its
    chart drawn too (the later of the two); requests; KiB."""
    if graph is not None:
        wait_for(page, f"the chart {graph} drawn", DRAWN_JS, graph, polling="raf")
    wait_for(page, "every callback answered and drawn", SETTLED_JS)
    st = page.evaluate("window.__nw")
    TIMELINE[:] = [
        f"    {e['start'] - since:7.0f} {e.get('answered', 0) - since:7.0f} "
        f"{e.get('drawn', 0) - since:7.0f} {e.get('kib', 0):8.1f}  {e['output']}"
        for e in st["log"]
    ]
    if graph is not None:
        TIMELINE.append(f"    chart {graph} drawn at {float(st['drawnAt']) - since:.0f}")
    done = max(float(st["last"]), float(st["drawnAt"]) if graph else 0.0)
    return done - since, int(st["requests"]), float(st["bytes"]) / 1024


def mark(page: Page) -> float:
    """Reset the counters; the page's clock now."""
    return float(
        page.evaluate(
            "(() => { const s = window.__nw; s.requests = 0; s.bytes = 0; s.log = [];"
            " s.drawnAt = 0; return performance.now(); })()"
        )
    )


def timed_action(
    page: Page, action: Callable[[], None], graph: str | None = None
) -> tuple[float, int, float]:
    since = mark(page)
    action()
    return settle(page, since, graph)


def timed_load(page: Page, url: str, graph: str | None = OVERLAY) -> tuple[float, int, float]:
    """From the moment the browser is told to go to ``url`` (this process's clock, so a
    redirect on the way counts) until the page has settled and its chart is drawn."""
    asked = time.time() * 1000
    page.goto(url, wait_until="commit", timeout=STEP_TIMEOUT_MS)
    ms, requests, kib = settle(page, 0.0, graph)  # the page's clock starts at navigation
    origin = float(page.evaluate("performance.timeOrigin"))
    return origin + ms - asked, requests, kib


def chart_drawn_ms(since: float) -> float:
    """From the last `settle`'s timeline: when the overlay's figure was answered and drawn."""
    drawn = [float(line.split()[2]) for line in TIMELINE if "overlay.figure" in line]
    return max(drawn) if drawn else float("nan")


def choose(page: Page, dropdown: str, option: str) -> None:
    page.locator(dropdown).click(timeout=STEP_TIMEOUT_MS)
    page.get_by_role("option", name=option, exact=True).click(timeout=STEP_TIMEOUT_MS)


# --- the interactions -----------------------------------------------------------------------


@dataclass
class Scene:
    base: str
    read: dict[str, str]
    demo: str
    big: str
    demo_last: int
    big_last: int
    rules: dict[str, int]
    """The demo run's rules by kind: ``{"forecast": id, ...}``."""
    token: str
    """A read token: a first visit logs in with it through the link the product gives."""


Interaction = tuple[str, Callable[[Page, Scene], tuple[float, int, float]], Callable[..., Any]]


def run_page(which: str) -> Callable[[Page, Scene], tuple[float, int, float]]:
    def go(page: Page, s: Scene) -> tuple[float, int, float]:
        run = s.demo if which == "demo" else s.big
        return timed_load(page, f"{s.base}/runs/{run}")

    return go


def first_visit(page: Page, s: Scene) -> tuple[float, int, float]:
    """An empty browser profile opens the login link of the demo run's page (``/login?token=
    ..&next=/runs/..``, as the product hands it out): login, redirect, page, chart drawn."""
    return timed_load(page, f"{s.base}/login?token={s.token}&next=/runs/{s.demo}")


def open_run(page: Page, s: Scene, run: str) -> None:
    page.goto(f"{s.base}/runs/{run}", wait_until="commit", timeout=STEP_TIMEOUT_MS)
    settle(page, 0.0, OVERLAY)


def zoom(until: str) -> Callable[[Page, Scene], tuple[float, int, float]]:
    """A drag over the middle tenth of the large run's chart, as a user zooms: timed until
    the chart is drawn anew (``until="chart"``), or until every section has settled too."""

    def go(page: Page, s: Scene) -> tuple[float, int, float]:
        open_run(page, s, s.big)
        box = page.locator(f"{OVERLAY} .nsewdrag").first.bounding_box(timeout=STEP_TIMEOUT_MS)
        assert box is not None
        y = box["y"] + box["height"] / 2

        def drag() -> None:
            page.mouse.move(box["x"] + box["width"] * 0.45, y)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] * 0.55, y, steps=4)
            page.mouse.up()

        since = mark(page)
        drag()
        ms, requests, kib = settle(page, since, OVERLAY)
        return (chart_drawn_ms(since) if until == "chart" else ms), requests, kib

    return go


def row_click(table_id: str) -> Callable[[Page, Scene], tuple[float, int, float]]:
    def go(page: Page, s: Scene) -> tuple[float, int, float]:
        open_run(page, s, s.demo)
        row = page.locator(f"#{table_id} tbody tr").nth(1)
        row.wait_for(timeout=STEP_TIMEOUT_MS)
        return timed_action(page, row.click, OVERLAY)

    return go


def layer_family(page: Page, s: Scene) -> tuple[float, int, float]:
    open_run(page, s, s.demo)
    return timed_action(page, lambda: choose(page, "#depth-family", "params/norm"))


def compare(page: Page, s: Scene) -> tuple[float, int, float]:
    """The two measured runs ticked on the runs page, then its "compare 2 runs" link."""
    page.goto(f"{s.base}/", wait_until="commit", timeout=STEP_TIMEOUT_MS)
    settle(page, 0.0)
    for run in (s.demo, s.big):
        page.locator(f"tr.run-row:has(a[href$='{run}']) input[type=checkbox]").check()
    page.wait_for_selector("#compare-link", timeout=STEP_TIMEOUT_MS)
    settle(page, 0.0)
    return timed_action(page, lambda: page.click("#compare-link"), COMPARE_CHART)


def nav(link: str) -> Callable[[Page, Scene], tuple[float, int, float]]:
    def go(page: Page, s: Scene) -> tuple[float, int, float]:
        open_run(page, s, s.demo)
        return timed_action(page, lambda: page.click(link))

    return go


def preview(kind: str) -> Callable[[Page, Scene], tuple[float, int, float]]:
    """The rules page's preview of the demo's rule of this kind on the demo run."""

    def go(page: Page, s: Scene) -> tuple[float, int, float]:
        page.goto(f"{s.base}/rules", wait_until="commit", timeout=STEP_TIMEOUT_MS)
        settle(page, 0.0)
        choose(page, "#preview-rule", RULE_NAMES[kind])
        choose(page, "#preview-run", RUN_NAME)
        return timed_action(page, lambda: page.click("#preview-go"))

    return go


def api_preview(kind: str) -> Callable[[httpx.Client, Scene], None]:
    def go(api: httpx.Client, s: Scene) -> None:
        get(api, f"/api/v1/alert-rules/{s.rules[kind]}/preview", s, run=s.demo)

    return go


def demo_rules(api: httpx.Client, admin: dict[str, str]) -> dict[str, int]:
    """The demo's rules by kind, the slope rule added if the database has none."""
    listed = api.get("/api/v1/alert-rules", headers=admin)
    listed.raise_for_status()
    by_name = {str(rule["name"]): int(rule["id"]) for rule in listed.json()}
    if SLOPE_RULE["name"] not in by_name:
        made = api.post(
            "/api/v1/alert-rules", json={"runs": {"name": RUN_NAME}, **SLOPE_RULE}, headers=admin
        )
        made.raise_for_status()
        by_name[SLOPE_RULE["name"]] = int(made.json()["id"])
    return {kind: by_name[name] for kind, name in RULE_NAMES.items()}


def api_run_page(api: httpx.Client, s: Scene, run: str, last: int) -> None:
    get(api, f"/api/v1/runs/{run}", s)
    get(api, f"/api/v1/runs/{run}/series", s, metric=[TOTAL, FINAL], points=2000)


def get(api: httpx.Client, path: str, s: Scene, **params: Any) -> None:
    answer = api.get(path, params=params, headers=s.read)
    answer.raise_for_status()


SLOPE_RULE: dict[str, Any] = {
    "name": "grad norm rising",
    "metric": "grad/norm/total",
    "condition": {"kind": "slope", "op": ">", "per_1k_steps": 0.5, "window": 200},
}
"""The demo has a rule of every kind a preview replays but slope; the benchmark adds one."""
RULE_NAMES = {
    str(rule["condition"]["kind"]): str(rule["name"]) for rule in (*DEMO_RULES, SLOPE_RULE)
}
LOAD_MS, ACTION_MS, PREVIEW_MS = 1500, 500, 1000
"""Targets: a page load (the first visit too), an interaction, a rule's preview."""

INTERACTIONS: list[Interaction] = [
    (
        "first visit, empty profile, login link to the demo run",
        first_visit,
        lambda api, s: api_run_page(api, s, s.demo, s.demo_last),
    ),
    (
        "run page load (demo)",
        run_page("demo"),
        lambda api, s: api_run_page(api, s, s.demo, s.demo_last),
    ),
    (
        "run page load (large)",
        run_page("big"),
        lambda api, s: api_run_page(api, s, s.big, s.big_last),
    ),
    *(
        (
            f"zoom by drag, large run ({what})",
            zoom(until),
            lambda api, s: get(
                api,
                f"/api/v1/runs/{s.big}/series",
                s,
                metric=[TOTAL, FINAL],
                points=2000,
                start=int(s.big_last * 0.45),
                end=int(s.big_last * 0.55),
            ),
        )
        for until, what in (("chart", "chart drawn"), ("all", "every section settled"))
    ),
    (
        "transition click",
        row_click("transition-table"),
        lambda api, s: get(api, f"/api/v1/runs/{s.demo}/transitions", s, metric=[TOTAL, FINAL]),
    ),
    (
        "spike click",
        row_click("spike-table"),
        lambda api, s: get(api, f"/api/v1/runs/{s.demo}/spikes", s, metric=[TOTAL, FINAL]),
    ),
    (
        "layer family",
        layer_family,
        lambda api, s: get(
            api, f"/api/v1/runs/{s.demo}/layers", s, prefix="params/norm", points=1000
        ),
    ),
    (
        "compare 2 runs",
        compare,
        lambda api, s: get(api, "/api/v1/compare", s, run=[s.demo, s.big], metric=TOTAL),
    ),
    (
        "alerts page",
        nav("a#nav-alerts"),
        lambda api, s: get(api, "/api/v1/alerts", s, limit=100),
    ),
    ("rules page", nav("a#nav-rules"), lambda api, s: get(api, "/api/v1/alert-rules", s)),
    *((f"rule preview: {kind}", preview(kind), api_preview(kind)) for kind in RULE_NAMES),
]


def target_ms(name: str) -> int:
    if "load" in name or "visit" in name:
        return LOAD_MS
    return PREVIEW_MS if "preview" in name else ACTION_MS


def new_profile(browser: Browser) -> tuple[BrowserContext, Page]:
    """An empty browser profile (no cookies, an empty cache) with the tracker."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.add_init_script(TRACKER_JS)
    page = context.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    return context, page


def logged_in(browser: Browser, scene: Scene, token: str) -> tuple[BrowserContext, Page]:
    """A new browser profile with the tracker, logged in (the runs page loaded once)."""
    context, page = new_profile(browser)
    page.goto(f"{scene.base}/login?token={token}")
    page.wait_for_selector("table.runs")
    return context, page


def measure(
    browser: Browser,
    api: httpx.Client,
    scene: Scene,
    token: str,
    repeat: int,
    only: str | None,
    timeline: bool = False,
) -> list[Measure]:
    results = []
    for name, action, baseline in INTERACTIONS:
        if only and only not in name:
            continue
        m = Measure(name)
        # One browser profile for all the tries of an interaction: its HTTP cache keeps
        # Dash's and Plotly's scripts from the warm-up on, as a user's browser does. A first
        # visit gets an empty profile each try, not logged in.
        fresh = name.startswith("first visit")
        context: BrowserContext | None = None
        page: Page | None = None
        for i in range(repeat + 1):
            try:
                if context is None or fresh:
                    context, page = (
                        new_profile(browser) if fresh else logged_in(browser, scene, token)
                    )
                assert page is not None
                ms, requests, kib = action(page, scene)
            except (StepTimeout, PlaywrightError) as failed:
                what = str(failed).splitlines()[0][:160]
                m.failures.append(f"try {i}: {what}")
                say(f"  {name}, try {i}: FAILED: {what}")
                if context is not None:
                    context.close()
                context = page = None
                continue
            finally:
                if fresh and context is not None:
                    context.close()
                    context = None
            started = time.perf_counter()
            baseline(api, scene)
            api_ms = (time.perf_counter() - started) * 1000
            if i == 0:
                m.first_ms = ms
                continue  # warm-up
            if timeline:
                say(f"  {name}, try {i}: sent / answered / drawn (ms), KiB, outputs")
                for line in TIMELINE:
                    say(line)
            m.browser_ms.append(ms)
            m.api_ms.append(api_ms)
            m.requests.append(requests)
            m.kib.append(kib)
        if context is not None:
            context.close()
        p = sorted(m.browser_ms)
        if p:
            say(
                f"  {name}: p50 {percentile(p, 50):,.0f} ms, p95 {percentile(p, 95):,.0f} ms "
                f"(target {target_ms(name):,}; {np.median(m.requests):.0f} callbacks, "
                f"{np.median(m.kib):,.0f} KiB); API {np.median(m.api_ms):,.1f} ms; "
                f"first try {m.first_ms:,.0f} ms"
            )
        results.append(m)
    return results


IDLE_S = 10.0
"""Seconds an open page is watched for its steady cost."""


def idle_cost(browser: Browser, scene: Scene, token: str, pid: int) -> tuple[float, float]:
    """What one page left open on the large (finished) run costs the server: CPU ms per
    second, and requests per second (its refresh ticks, and what they set off)."""
    context, page = logged_in(browser, scene, token)
    try:
        page.goto(f"{scene.base}/runs/{scene.big}", wait_until="commit")
        settle(page, 0.0)
        page.wait_for_timeout(2000)
        before = page.evaluate("window.__nw.ticks + window.__nw.requests")
        cpu = process_cpu_seconds(pid)
        page.wait_for_timeout(IDLE_S * 1000)
        cpu = process_cpu_seconds(pid) - cpu
        requests = page.evaluate("window.__nw.ticks + window.__nw.requests") - before
    finally:
        context.close()
    return cpu * 1000 / IDLE_S, requests / IDLE_S


def report(results: list[Measure]) -> None:
    rows = []
    for m in results:
        b, a = sorted(m.browser_ms), sorted(m.api_ms)
        target = target_ms(m.name)
        if not b:
            rows.append([m.name, "-", "-", f"{target:,}", "FAILED", "-", "-", "-", "-", "-"])
            continue
        p95 = percentile(b, 95)
        met = "yes" if p95 <= target and not m.failures else "NO"
        rows.append(
            [
                m.name,
                f"{percentile(b, 50):,.0f}",
                f"{p95:,.0f}",
                f"{target:,}",
                met + (f" ({len(m.failures)} failed)" if m.failures else ""),
                f"{np.median(m.requests):.0f}",
                f"{np.median(m.kib):,.0f}",
                f"{percentile(a, 50):,.1f}",
                f"{percentile(b, 50) / percentile(a, 50):,.0f}x",
                f"{m.first_ms:,.0f}",
            ]
        )
    headers = [
        "interaction",
        "browser p50 ms",
        "p95 ms",
        "target ms",
        "met",
        "callbacks",
        "KiB",
        "API p50 ms",
        "ratio",
        "1st try ms",
    ]
    print()
    print(table(headers, rows))
    for m in results:
        for failure in m.failures:
            print(f"FAILED {m.name}, {failure}")


@contextmanager
def profiled(pid: int, path: str | None) -> Iterator[None]:
    if path is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    sampler = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--output", path, "--rate", "200", "--subprocesses"]
        # A flame graph, or with a .txt path the collapsed stacks, one per line.
        + (["--format", "raw"] if path.endswith(".txt") else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        yield
    finally:
        sampler.send_signal(2)
        sampler.wait(60)
        say(f"  profile written to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="steps of the large run")
    parser.add_argument("--quick", action="store_true", help="a 100,000-step large run")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", help="only the interactions whose name contains this")
    parser.add_argument("--profile", help="write a py-spy flame graph of the server here")
    parser.add_argument(
        "--timeline", action="store_true", help="print each interaction's callbacks as timed"
    )
    parser.add_argument("--keep", action="store_true", help="leave the loaded database in place")
    parser.add_argument("--database", help="measure on a database --keep left, without loading")
    parser.add_argument(
        "--trainer-steps-per-s",
        type=float,
        default=5.0,
        help="steps a second the background trainer logs (every metric, 162 a step); 0: none",
    )
    parser.add_argument(
        "--step-timeout", type=float, default=30.0, help="seconds one step of a measure may take"
    )
    args = parser.parse_args(argv)
    steps = 100_000 if args.quick else args.steps
    global STEP_TIMEOUT_MS
    STEP_TIMEOUT_MS = int(args.step_timeout * 1000)

    database: AbstractContextManager[str]
    if args.database:
        database = nullcontext(args.database)
    else:
        database = kept_postgres("dash") if args.keep else scratch_postgres("dash")
    with database as url, tempfile.TemporaryDirectory() as logs:
        ingest_token, admin_token, read_token = make_tokens(url, PROJECT, "ingest", "admin", "read")
        with running_server(url, Path(logs)) as server:
            ingest = {"Authorization": f"Bearer {ingest_token}"}
            admin = {"Authorization": f"Bearer {admin_token}"}
            if args.database:
                with httpx.Client(base_url=server.url, timeout=60) as api:
                    demo, big = loaded_runs(api, admin, steps)
            else:
                say(f"loading into {url}")
                with httpx.Client(base_url=server.url, timeout=300) as api:
                    demo = load_demo(api, ingest, admin)
                    big = load_big(api, ingest, steps)
                compact(url)
            analyze(url)
            with httpx.Client(base_url=server.url, timeout=60) as api:
                rules = demo_rules(api, admin)
                scene = Scene(
                    server.url,
                    {"Authorization": f"Bearer {read_token}"},
                    demo,
                    big,
                    LIVE_END - 1,
                    steps - 1,
                    rules,
                    read_token,
                )
                trainer: AbstractContextManager[LiveTrainer | None] = nullcontext()
                if args.trainer_steps_per_s > 0:
                    trainer = LiveTrainer(
                        server.url, ingest_token, PROJECT, steps_per_s=args.trainer_steps_per_s
                    )
                with trainer as live, sync_playwright() as pw:
                    load_before = os.getloadavg()[0]
                    chromium = chromium_path() or "/usr/bin/chromium"
                    browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
                    if not args.only:
                        cpu_ms, per_s = idle_cost(browser, scene, read_token, server.process.pid)
                        say(
                            f"  an open run page, idle: {per_s:.1f} requests/s, server CPU "
                            f"{cpu_ms:.0f} ms/s"
                        )
                    with profiled(server.process.pid, args.profile):
                        results = measure(
                            browser, api, scene, read_token, args.repeat, args.only, args.timeline
                        )
                    browser.close()
                    load_after = os.getloadavg()[0]
    report(results)
    streamed = "no trainer streaming"
    if live is not None:
        streamed = (
            f"a trainer streaming {live.steps_per_s:g} steps/s through the client, "
            f"{live.points_per_s:,.0f} points/s into the same server"
        )
    print(
        f"\nmeasured with {streamed}; 1-minute load average {load_before:.1f} at the start, "
        f"{load_after:.1f} at the end ({os.cpu_count()} cores)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
