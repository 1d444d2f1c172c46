"""Analytics on a large run, each against a plain series read of the same range, in the same run.

Setup, in a scratch Postgres database that the script creates, migrates and drops: one run of
``--steps`` steps (1,000,000) logging ``--metrics`` metrics (200: ``grad/norm/total``,
``params/norm/final_norm.weight``, ``train/loss``, ``updates/norm/total`` and filler parameter
norms named like ``params/norm/layers.3.attn.wq``) plus 50 per-layer grad norms
(``grad/norm/embed``, ``grad/norm/layers.0`` .. ``grad/norm/layers.47``, ``grad/norm/lm_head``),
every metric at every step. The layers have a U-shaped depth profile, a decaying trend, 3 %
noise and grad-norm spikes (one to three steps, 4-12x, in the head's, the embedding's or every
layer) at random steps; ``grad/norm/total`` is the root of their summed squares, so the
attribution's shares add up to one; the final norm's slope goes from 2 to 5 per 1,000 steps at
81 % of the run, where an event ("near-dropless EP routing") is posted. All but the last 1,000
steps go into the hot ``blocks`` table as binary ``COPY`` streams (a metric at a time, one block
per 100k steps: ``blocks.encode`` + ``pgcopy.encode_blocks``, what the ingest service sends);
the last 1,000 steps of every metric go through ``parse_batch`` + ``ingest_batch`` (which moves
the run's last step, as a live run's batches do). ``schedule.compact_everything`` with the
default policy then moves every point into float32 chunks and the summary pyramid.

Measured, each call in-process on a snapshot session (REPEATABLE READ, as the API's chart and
analytics reads), ending its read transaction, with the run already loaded; median and range of
``--repeat`` (5) after a warm-up, each found afresh (the answers the server keeps per run
version forgotten first), the time including the JSON-ready body the router returns
(``to_json()``), over the full run and over a 100k-step zoom centred on the event:

* **baseline**: ``query.read_series(session, run, ["params/norm/final_norm.weight"],
  points=1000)``, a plain chart read of the same range;
* ``transitions.run_transitions`` on the final norm, and on it with ``grad/norm/total``;
* ``analytics.spike_report`` on ``grad/norm/total`` (spikes are found over the whole run
  whatever the range, which only chooses which are listed);
* the derived series ``share(grad/norm/lm_head, grad/norm/total)`` by ``query.read_series``;
* ``layers.layer_grid(session, run, "grad/norm", points=1000)``, and with ``at=`` a spike;
* ``attribution.attribution(session, run, "grad/norm", points=1000)``.

Each is printed in milliseconds and as its ratio to the series read of the same range. Targets:
every analytic at most 10x that read; the 50-row heatmap over the full run under 300 ms. The
layer grid's full-range call is also split into its parts (metric names, series keys, the
extents, the pyramid gathers, the grid in NumPy and its JSON cells); ``--profile`` adds a
cProfile of each analytic's call over each range. A call the service refuses (a 413 past the
20M points an analysis may read, say) is reported as refused, with its message.

``--browser`` then starts the real server (``normwatch.testing.running_server``) on the same
database, logs a read token in through ``/login?token=`` in headless system Chromium (Playwright,
``--headless --no-sandbox --disable-gpu``) and measures the run page: from navigation start to
the first animation frame in which the overlay chart has both traces drawn (and the layer
heatmap its cells), over fresh navigations; and from a ``Plotly.relayout`` zoom to a 100k-step
window to the frame in which the overlay holds that window's re-read series (target: 500 ms),
and the heatmap its re-read grid. Where the time goes: each chart's Dash callback request (when
it was sent, how long until its answer, from Playwright's request timing) and the time the page's
main thread spent in long tasks (``PerformanceObserver``, tasks of 50 ms or more).

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``)::

    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/analytics.py --quick --browser
    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/analytics.py --browser    # 1M x 250
    .venv/bin/python benchmarks/analytics.py --steps 300000 --metrics 50 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from _harness import Timing, make_tokens, say, scratch_postgres, table, timed
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from normwatch.scratch import admin_dsn
from normwatch.server.analytics.layers import bucket_edges, bucket_max, depth_order, u_index
from normwatch.server.auth import authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope, snapshot_factory
from normwatch.server.errors import ServiceError
from normwatch.server.models import Run
from normwatch.server.schemas import EventCreate, RunCreate
from normwatch.server.services import analytics, attribution, ingest, kept, layers, query, runs
from normwatch.server.services import transitions as transition_service
from normwatch.server.storage import across, blocks, pgcopy, pyramid, schedule
from normwatch.server.storage.metric_ids import metric_names, resolve_metric_ids
from normwatch.server.storage.points import point_count, series_keys
from normwatch.server.storage.policy import Policy
from normwatch.testing import CHROMIUM_FLAGS, chromium_path

PREFIX = "grad/norm"
LAYERS = ["embed", *(f"layers.{i}" for i in range(48)), "lm_head"]
TOTAL = f"{PREFIX}/total"
FINAL = "params/norm/final_norm.weight"
NAMED = [TOTAL, FINAL, "train/loss", "updates/norm/total"]
FILLER_KINDS = ["attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w1", "mlp.w2", "mlp.w3", "norm"]
SHARE = f"share({PREFIX}/lm_head, {TOTAL})"
EVENT_TEXT = "near-dropless EP routing"
PIECE = 100_000
TAIL = 1_000
POINTS = 1000
ZOOM = 100_000
ANALYTIC_RATIO_TARGET = 10.0
HEATMAP_TARGET_MS = 300.0
ZOOM_TARGET_MS = 500.0

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Shape:
    """The run's size and where its features are."""

    steps: int
    metrics: int
    """Metrics besides the per-layer grad norms (the four named ones and fillers)."""
    seed: int

    @property
    def event(self) -> int:
        return self.steps * 81 // 100

    @property
    def zoom(self) -> tuple[int, int]:
        width = min(ZOOM, self.steps // 10)
        lo = max(0, min(self.event - width // 2, self.steps - width))
        return lo, lo + width - 1

    @property
    def pinned(self) -> int:
        """A spike inside the zoom, for the heatmap's ``at=``."""
        lo, hi = self.zoom
        return lo + (hi - lo) * 3 // 4

    @property
    def points(self) -> int:
        return self.steps * (self.metrics + len(LAYERS))

    def names(self) -> list[str]:
        fillers = [
            f"params/norm/layers.{i // len(FILLER_KINDS)}.{FILLER_KINDS[i % len(FILLER_KINDS)]}"
            for i in range(self.metrics - len(NAMED))
        ]
        return [*(f"{PREFIX}/{p}" for p in LAYERS), *NAMED, *fillers]


def spike_plan(shape: Shape, rng: np.random.Generator) -> list[tuple[int, int, float, str]]:
    """Grad-norm spikes: (first step, steps, factor, which layers), one a 25k steps or so."""
    count = max(4, shape.steps // 25_000)
    starts = sorted({*rng.choice(shape.steps - 10, count, replace=False).tolist(), shape.pinned})
    kinds = ["head", "embed", "all"]
    return [
        (int(s), int(rng.integers(1, 4)), float(rng.uniform(4, 12)), kinds[i % 3])
        for i, s in enumerate(starts)
    ]


def series(shape: Shape) -> Iterator[tuple[str, FloatArray]]:
    """Every metric's values at steps 0..steps-1, a metric at a time, in `Shape.names` order."""
    rng = np.random.default_rng(shape.seed)
    x = np.arange(shape.steps, dtype=np.float64)
    trend = 0.3 + 2.0 * np.exp(-x / max(1, shape.steps // 8))
    plan = spike_plan(shape, rng)
    depth = np.linspace(-1.0, 1.0, len(LAYERS))
    scale = 0.05 + 0.4 * depth**4  # a U: the embedding and the head carry the most
    squares = np.zeros(shape.steps)
    for j, part in enumerate(LAYERS):
        values = scale[j] * trend * (1.0 + 0.03 * rng.standard_normal(shape.steps))
        for start, width, factor, kind in plan:
            hit = (
                kind == "all"
                or (kind == "head" and j >= len(LAYERS) - 5)
                or (kind == "embed" and j < 5)
            )
            if hit:
                values[start : start + width] *= factor
        squares += np.square(values)
        yield f"{PREFIX}/{part}", values
    total = np.sqrt(squares)
    del squares
    yield TOTAL, total
    ev = shape.event
    final = 78.4 + 0.002 * np.minimum(x, ev) + 0.005 * np.maximum(x - ev, 0.0)
    yield FINAL, final + 0.05 * rng.standard_normal(shape.steps)
    loss = 2.0 + 8.0 / np.sqrt(1.0 + x / 1000.0) + 0.02 * rng.standard_normal(shape.steps)
    updates = 1e-3 * (1.0 + 0.05 * rng.standard_normal(shape.steps))
    for start, width, factor, _ in plan:
        loss[start + 3 : start + 8] += 0.5
        updates[start : start + width] *= factor / 2
    yield "train/loss", loss
    yield "updates/norm/total", updates
    for name in shape.names()[len(LAYERS) + len(NAMED) :]:
        level = 10.0 + 40.0 * rng.random()
        yield name, level + 0.01 * np.cumsum(rng.standard_normal(shape.steps))


def create_run(factory: sessionmaker[Session]) -> tuple[str, int]:
    with session_scope(factory) as session:
        secret, _ = create_token(session, "bench", "ingest")
        who = authenticate(session, secret)
        assert who is not None
        run_id = runs.create_or_resume(session, who, RunCreate(name="analytics")).id
        key = session.query(Run).filter(Run.id == run_id).one().key
    return run_id, int(key)


def load(
    engine: Engine, factory: sessionmaker[Session], run_id: str, run_key: int, shape: Shape
) -> float:
    """Seconds to store the run: binary ``COPY`` of the bulk, the service for the tail."""
    names = shape.names()
    with session_scope(factory) as session:
        ids = resolve_metric_ids(session, run_key, names)
    bulk = shape.steps - TAIL
    steps = np.arange(shape.steps, dtype=np.int64)
    tail: dict[str, list[float]] = {}
    raw = engine.raw_connection()
    started = time.perf_counter()
    try:
        cur = raw.cursor()
        for i, (name, values) in enumerate(series(shape)):
            pieces = [
                blocks.encode(
                    steps[lo : min(lo + PIECE, bulk)], values[lo : min(lo + PIECE, bulk)], ids[name]
                )
                for lo in range(0, bulk, PIECE)
            ]
            with cur.copy(pgcopy.COPY_BLOCKS) as copy:
                copy.write(pgcopy.encode_blocks(run_key, 1, pieces))
            raw.commit()
            tail[name] = values[bulk:].tolist()
            done = (i + 1) * bulk
            if (i + 1) % 25 == 0 or i + 1 == len(names):
                seconds = time.perf_counter() - started
                say(
                    f"  load (COPY): {i + 1:>4} / {len(names)} metrics, {done:>13,} points, "
                    f"{done / seconds:>12,.0f} points/s (generating the values included)"
                )
        cur.close()
    finally:
        raw.close()
    doc = {"steps": steps[bulk:].tolist(), "metrics": tail}
    batch = parse_batch(doc, max_points=TAIL * len(names))
    with session_scope(factory) as session:
        ingest.ingest_batch(session, run_id, batch)
    seconds = time.perf_counter() - started
    say(f"  load (service): the last {TAIL:,} steps of every metric; {seconds:.1f} s in all")
    return seconds


def add_event(factory: sessionmaker[Session], run_id: str, step: int) -> None:
    with session_scope(factory) as session:
        found = runs.get_run(session, run_id)
        assert found is not None
        ingest.add_event(session, found[0], EventCreate(step=step, kind="config", text=EVENT_TEXT))


def compact(engine: Engine, factory: sessionmaker[Session], points: int) -> float:
    """Seconds to compact everything (default policy), with progress from another connection."""
    say("  compacting (default policy: 4096-point float32 chunks)")
    stop = threading.Event()
    started = time.perf_counter()

    def watch() -> None:
        with psycopg.connect(admin_dsn(engine.url.render_as_string(hide_password=False))) as conn:
            while not stop.wait(20):
                hot = conn.execute("SELECT coalesce(sum(count), 0) FROM blocks").fetchone()
                conn.rollback()
                left = int(hot[0]) if hot else 0
                elapsed = time.perf_counter() - started
                say(f"  compacting: {points - left:>13,} of {points:,} points, {elapsed:,.0f} s")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        report = schedule.compact_everything(factory, Policy())
    finally:
        stop.set()
        watcher.join()
    seconds = time.perf_counter() - started
    if report.points != points:
        raise RuntimeError(f"compacted {report.points} points, expected {points}")
    say(f"  compacted {report.points:,} points in {seconds:.1f} s ({points / seconds:,.0f}/s)")
    return seconds


@dataclass
class Measured:
    name: str
    span: str
    timing: Timing | None
    detail: str
    baseline: bool = False


@dataclass
class Results:
    shape: Shape
    load_s: float = 0.0
    compact_s: float = 0.0
    database_bytes: int = 0
    rows: list[Measured] = field(default_factory=list)
    grid_parts: dict[str, Timing] = field(default_factory=dict)
    grid_candidates: int = 0
    series_candidates: int = 0
    profiles: dict[str, str] = field(default_factory=dict)
    browser: dict[str, Timing] = field(default_factory=dict)
    browser_note: str = ""
    load_average: tuple[float, float] = (0.0, 0.0)
    browser_load: tuple[float, float] = (0.0, 0.0)


Operation = Callable[[Session, Run, int | None, int | None], tuple[Any, str]]


def operations(shape: Shape) -> list[tuple[str, Operation]]:
    """(name, call) for each measured read; a call returns the JSON-ready body and a summary."""

    def read(metric: str) -> Operation:
        def call(s: Session, run: Run, lo: int | None, hi: int | None) -> tuple[Any, str]:
            [got] = query.read_series(s, run, [metric], start=lo, end=hi, points=POINTS)
            return got.to_json(), f"{len(got.steps):,} of {got.total_points:,} points"

        return call

    def trans(metrics: list[str]) -> Operation:
        def call(s: Session, run: Run, lo: int | None, hi: int | None) -> tuple[Any, str]:
            found = transition_service.run_transitions(s, run, metrics, start=lo, end=hi)
            body = found.to_json()
            steps = [t["step"] for t in body["transitions"]][:3]
            return body, f"{len(body['transitions'])} transitions, first at {steps}"

        return call

    def spikes(s: Session, run: Run, lo: int | None, hi: int | None) -> tuple[Any, str]:
        report = analytics.spike_report(s, run, [TOTAL], start=lo, end=hi)
        return report.to_json(), f"{len(report.spikes)} spikes listed"

    def grid(at: int | None) -> Operation:
        def call(s: Session, run: Run, lo: int | None, hi: int | None) -> tuple[Any, str]:
            got = layers.layer_grid(s, run, PREFIX, start=lo, end=hi, points=POINTS, at=at)
            pinned = "" if got.profile is None else f", profile at {got.profile.step:,}"
            return got.to_json(), f"{len(got.layers)} x {len(got.steps)} cells{pinned}"

        return call

    def shares(s: Session, run: Run, lo: int | None, hi: int | None) -> tuple[Any, str]:
        got = attribution.attribution(s, run, PREFIX, start=lo, end=hi, points=POINTS)
        return (
            got.to_json(),
            f"{len(got.groups)} groups x {len(got.steps)} steps, {len(got.mismatched)} mismatched",
        )

    return [
        ("series read (baseline)", read(FINAL)),
        ("transitions, 1 metric", trans([FINAL])),
        ("transitions, 2 metrics", trans([FINAL, TOTAL])),
        ("spikes", spikes),
        (f"derived `{SHARE}`", read(SHARE)),
        ("layer grid", grid(None)),
        (f"layer grid, at={shape.pinned:,}", grid(shape.pinned)),
        ("attribution", shares),
    ]


def measure(
    engine: Engine, run_id: str, shape: Shape, repeat: int, results: Results, profile: bool
) -> None:
    """Every operation over the full run and the zoom, on one snapshot session."""
    snapshots = snapshot_factory(engine)
    with snapshots() as session:
        found = runs.get_run(session, run_id)
        assert found is not None
        run = found[0]
        session.expunge(run)  # ending each read transaction must not expire it
        session.rollback()
        for span, (lo, hi) in (("full", (None, None)), ("zoom", shape.zoom)):
            label = "full run" if lo is None else f"{lo:,}-{hi:,}"
            for name, op in operations(shape):

                def call(
                    op: Operation = op, lo: int | None = lo, hi: int | None = hi
                ) -> tuple[Any, str]:
                    # Each call finds its answer afresh: the server keeps answers per run
                    # version (`services.kept`), and a kept one would time a lookup.
                    kept.forget()
                    try:
                        return op(session, run, lo, hi)
                    finally:
                        session.rollback()

                say(f"  timing {name}, {label} ({repeat} runs + warm-up)")
                try:
                    timing, (_, detail) = timed(call, repeat=repeat)
                except ServiceError as e:
                    results.rows.append(Measured(name, span, None, f"{e.status_code}: {e}"))
                    say(f"    refused: {e.status_code} {e}")
                    continue
                say(f"    {timing.median_ms:,.1f} ms ({detail})")
                results.rows.append(Measured(name, span, timing, detail, name.startswith("series")))
                if profile and not name.startswith("series"):
                    results.profiles[f"{name}, {label}"] = profiled(call)
        results.grid_parts, results.grid_candidates = grid_parts(session, run, repeat)
        lineage, ids = series_keys(session, run.key, [FINAL])
        one = pyramid.gather(
            session, run.key, ids[FINAL], lineage, None, None, shape.steps / POINTS
        )
        results.series_candidates = len(one.points)
        session.rollback()


def profiled(call: Callable[[], object]) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(call)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(14)
    return out.getvalue()


def grid_parts(session: Session, run: Run, repeat: int) -> tuple[dict[str, Timing], int]:
    """The full-range layer grid's steps as `layers.layer_grid` takes them, each timed."""
    samples: dict[str, list[float]] = {}
    candidates = 0
    for i in range(repeat + 1):
        marks = [time.perf_counter()]
        stem = PREFIX + "/"
        parts = depth_order(
            n[len(stem) :]
            for n in metric_names(session, run.key)
            if n.startswith(stem) and n != TOTAL
        )
        marks.append(time.perf_counter())
        lineage, ids = series_keys(session, run.key, [stem + p for p in parts])
        keys = [ids[stem + p] for p in parts]
        marks.append(time.perf_counter())
        span = across.extent(session, run.key, keys, lineage)
        marks.append(time.perf_counter())
        if span is None:
            raise RuntimeError("the layers have no points")
        lo, hi = span
        pixel = (hi - lo + 1) / POINTS
        got = across.read(session, run.key, keys, lineage, lo, hi, pixel, "max")
        marks.append(time.perf_counter())
        if got.exact:
            raise RuntimeError("the grid read every point: a run this size should use outlines")
        edges = bucket_edges(lo, hi, POINTS)
        grid = np.vstack([bucket_max(r.steps, r.values, edges) for r in got.series])
        index = u_index(grid)
        marks.append(time.perf_counter())
        cells = [[v if math.isfinite(v) else None for v in row.tolist()] for row in (*grid, index)]
        marks.append(time.perf_counter())
        session.rollback()
        candidates = sum(len(r.steps) for r in got.series)
        del cells
        if i == 0:
            continue  # warm-up
        names = [
            "metric names",
            "series keys",
            f"across.extent of {len(keys)} layers",
            f"across.read of {len(keys)} layers (outline maxima)",
            "bucket_max + u_index",
            "cells for JSON",
        ]
        for name, a, b in zip(names, marks[:-1], marks[1:], strict=True):
            samples.setdefault(name, []).append((b - a) * 1000)
    return {
        name: Timing(statistics.median(v), min(v), max(v)) for name, v in samples.items()
    }, candidates


# --- the browser -----------------------------------------------------------------------------

OVERLAY = "#overlay .js-plotly-plot"
HEATMAP = "#layer-heatmap .js-plotly-plot"
# Installed in every document before the page's scripts: each animation frame, note the first
# time (ms from navigation start) the overlay has both traces drawn and the heatmap its cells,
# and, once a zoom is armed, when the overlay holds the zoomed window's series.
MARKS_JS = f"""
(() => {{
  const marks = {{}};
  window.__nwMarks = marks;
  window.__nwLong = [];
  try {{
    new PerformanceObserver((list) => {{
      for (const e of list.getEntries()) window.__nwLong.push([e.startTime, e.duration]);
    }}).observe({{type: 'longtask', buffered: true}});
  }} catch (e) {{}}
  const drawn = (gd) => gd && gd.data && gd.data.length >= 2
      && gd.data.every(t => t.x && t.x.length > 0)
      && gd.querySelectorAll('.scatterlayer .trace').length >= 2;
  const frame = () => {{
    const o = document.querySelector('{OVERLAY}');
    if (!marks.overlay && drawn(o)) marks.overlay = performance.now();
    const h = document.querySelector('{HEATMAP}');
    if (!marks.heatmap && h && h.data && h.data.length && h.data[0].z && h.data[0].z.length)
      marks.heatmap = performance.now();
    const z = window.__nwZoom;
    if (z && z.done === undefined && drawn(o) && o.data[0] !== z.before) {{
      const x = o.data[0].x;
      if (x[0] >= z.lo && x[x.length - 1] <= z.hi) z.done = performance.now() - z.t0;
    }}
    if (z && z.heat === undefined && h && h.data && h.data.length && h.data[0] !== z.hbefore) {{
      const x = h.data[0].x;
      const inside = x && x.length && x[0] >= z.lo && x[x.length - 1] <= z.hi;
      if (inside) z.heat = performance.now() - z.t0;
    }}
    requestAnimationFrame(frame);
  }};
  requestAnimationFrame(frame);
}})();
"""
STATE_JS = f"""() => {{
  const ends = (sel) => {{
    const g = document.querySelector(sel);
    const x = g && g.data && g.data.length ? g.data[0].x : null;
    return x && x.length ? [x[0], x[x.length - 1]] : null;
  }};
  return JSON.stringify({{url: location.search, overlay: ends('{OVERLAY}'),
                         heatmap: ends('{HEATMAP}'), zoom: window.__nwZoom}});
}}"""
ZOOM_JS = f"""([lo, hi]) => {{
  const gd = document.querySelector('{OVERLAY}');
  const h = document.querySelector('{HEATMAP}');
  window.__nwZoom = {{lo, hi, before: gd.data[0], hbefore: h && h.data && h.data[0],
                      t0: performance.now()}};
  Plotly.relayout(gd, {{'xaxis.range[0]': lo, 'xaxis.range[1]': hi}});
}}"""


def browser_timings(url: str, run_id: str, shape: Shape, repeat: int, results: Results) -> None:
    """First paint of the run page and zoom redraws, in headless Chromium on the real server."""
    from playwright.sync_api import sync_playwright

    from normwatch.testing import running_server

    [token] = make_tokens(url, "bench", "read")
    width = min(ZOOM, shape.steps // 10)
    zoom_k = f"{width // 1000}k steps"
    samples: dict[str, list[float]] = {
        "run page: navigation → overlay traces drawn": [],
        "run page: navigation → layer heatmap drawn": [],
        f"zoom ({zoom_k}): relayout → overlay redrawn": [],
        f"zoom ({zoom_k}): relayout → heatmap redrawn": [],
    }
    with (
        tempfile.TemporaryDirectory(prefix="normwatch-bench-") as logs,
        running_server(url, Path(logs)) as server,
        sync_playwright() as pw,
    ):
        chromium = chromium_path() or "/usr/bin/chromium"
        say(f"  server at {server.url}; Chromium {chromium}")
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.add_init_script(MARKS_JS)
            page = context.new_page()
            page.set_default_timeout(120_000)
            page.goto(f"{server.url}/login?token={token}")
            page.wait_for_selector("table.runs")
            calls: list[tuple[float, str, str, float]] = []
            page.on("requestfinished", lambda request: calls.append(dash_call(request)))
            for i in range(repeat + 1):
                calls.clear()
                page.goto(f"{server.url}/runs/{run_id}")
                page.wait_for_function("() => window.__nwMarks.overlay && window.__nwMarks.heatmap")
                page.wait_for_timeout(300)  # let the last requestfinished events arrive
                marks = page.evaluate(
                    "() => [window.__nwMarks, performance.timeOrigin, window.__nwLong]"
                )
                first = slowest_calls(calls, marks[1])
                busy = sum(d for t, d in marks[2] if t < marks[0]["overlay"])
                triggers = sorted({c[:40] for _, name, c, _ in calls if name == "view"})
                say(
                    f"  page {i}: overlay {marks[0]['overlay']:,.0f} ms, heatmap "
                    f"{marks[0]['heatmap']:,.0f} ms from navigation; main thread in long tasks "
                    f"before the overlay {busy:,.0f} ms; slowest "
                    + said(first)
                    + f"; view set off by {triggers}"
                )
                if i:
                    samples.setdefault(
                        "  page: main thread in long tasks before the overlay", []
                    ).append(busy)
                    samples["run page: navigation → overlay traces drawn"].append(
                        marks[0]["overlay"]
                    )
                    samples["run page: navigation → layer heatmap drawn"].append(
                        marks[0]["heatmap"]
                    )
                    add_calls(samples, "page", first)
            for i in range(repeat + 1):
                lo = (i + 1) * (shape.steps - width) // (repeat + 2)
                calls.clear()
                sent = time.time() * 1000
                page.evaluate(ZOOM_JS, [lo, lo + width - 1])
                try:
                    page.wait_for_function("() => window.__nwZoom.done !== undefined")
                    page.wait_for_function("() => window.__nwZoom.heat !== undefined")
                except Exception:
                    state = page.evaluate(STATE_JS)
                    say(f"  zoom {i} to {lo:,}: not redrawn; the page shows {state}")
                    raise
                page.wait_for_timeout(300)
                took = page.evaluate(
                    "() => [window.__nwZoom.done, window.__nwZoom.heat, window.__nwZoom.t0,"
                    " window.__nwLong]"
                )
                busy = sum(
                    max(0.0, min(t + d, took[2] + took[0]) - max(t, took[2])) for t, d in took[3]
                )
                first = first_calls(
                    calls, sent, lambda c: "view.data" in c or "overlay.relayoutData" in c
                )
                say(
                    f"  zoom {i} to {lo:,}-{lo + width - 1:,}: overlay {took[0]:,.0f} ms, "
                    f"heatmap {took[1]:,.0f} ms; main thread in long tasks until the overlay "
                    f"{busy:,.0f} ms; " + said(first)
                )
                if i:
                    samples[f"zoom ({zoom_k}): relayout → overlay redrawn"].append(took[0])
                    samples[f"zoom ({zoom_k}): relayout → heatmap redrawn"].append(took[1])
                    samples.setdefault(
                        "  zoom: main thread in long tasks until the overlay", []
                    ).append(busy)
                    add_calls(samples, "zoom", first)
        finally:
            browser.close()
    order = sorted(samples, key=lambda k: ("zoom" in k, k.startswith(" ")))
    results.browser = {k: _timing(samples[k]) for k in order if samples[k]}


def first_calls(
    calls: list[tuple[float, str, str, float]], since: float, wanted: Callable[[str], bool]
) -> dict[str, tuple[float, float]]:
    """Per chart, the first callback request from ``since`` (epoch ms) that ``wanted`` its
    trigger: (when it was sent, ms after ``since``; how long until its answer, ms)."""
    out: dict[str, tuple[float, float]] = {}
    for start, name, changed, ms in sorted(calls):
        if name and name not in out and start >= since - 5 and wanted(changed):
            out[name] = (start - since, ms)
    return out


def slowest_calls(
    calls: list[tuple[float, str, str, float]], since: float
) -> dict[str, tuple[float, float]]:
    """Per chart, its slowest callback request from ``since`` (epoch ms): (when it was sent,
    ms after ``since``; how long until its answer, ms)."""
    out: dict[str, tuple[float, float]] = {}
    for start, name, _, ms in calls:
        if name and start >= since and ms > out.get(name, (0.0, -1.0))[1]:
            out[name] = (start - since, ms)
    return out


def said(first: dict[str, tuple[float, float]]) -> str:
    return "callbacks (sent + answered in, ms): " + ", ".join(
        f"{name} {sent:,.0f}+{ms:,.0f}" for name, (sent, ms) in sorted(first.items())
    )


def add_calls(
    samples: dict[str, list[float]], when: str, first: dict[str, tuple[float, float]]
) -> None:
    for name, (sent, ms) in first.items():
        start = "navigation" if when == "page" else "relayout"
        samples.setdefault(f"  {when}: {name} callback answered, after {start}", []).append(
            sent + ms
        )
        samples.setdefault(f"  {when}: {name} callback request", []).append(ms)


def dash_call(request: Any) -> tuple[float, str, str, float]:
    """(start, epoch ms; the chart it draws; what set it off; ms to the response's end) of a
    Dash callback request ("" for the chart of any other request)."""
    if "_dash-update-component" not in request.url:
        return 0.0, "", "", 0.0
    try:
        body = request.post_data_json or {}
    except ValueError:
        return 0.0, "", "", 0.0
    output = str(body.get("output", ""))
    charts = (
        ("overlay.figure", "overlay"),
        ("layer-heatmap.figure", "heatmap"),
        ("spike-table", "spikes"),
        ("view.data", "view"),
    )
    name = next((label for key, label in charts if key in output), "")
    timing = request.timing
    changed = " ".join(body.get("changedPropIds") or [])
    return float(timing["startTime"]), name, changed, float(timing["responseEnd"])


def _timing(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), min(samples), max(samples))


# --- report ----------------------------------------------------------------------------------


def _ms(t: Timing) -> tuple[str, str]:
    return f"{t.median_ms:,.1f}", f"{t.min_ms:,.1f}–{t.max_ms:,.1f}"


def report(r: Results) -> None:
    shape = r.shape
    say(
        f"\n## {shape.steps:,} steps x {shape.metrics + len(LAYERS)} metrics "
        f"({shape.metrics} + {len(LAYERS)} layer grad norms) = {shape.points:,} points\n"
    )
    say(
        f"load {r.load_s:.0f} s ({shape.points / r.load_s:,.0f} points/s), compaction "
        f"{r.compact_s:.0f} s ({shape.points / r.compact_s:,.0f} points/s), database "
        f"{r.database_bytes / 2**30:.2f} GiB ({r.database_bytes / shape.points:.2f} B/point)\n"
    )
    rows = []
    for span in ("full", "zoom"):
        base = next(m for m in r.rows if m.span == span and m.baseline)
        assert base.timing is not None
        lo, hi = shape.zoom
        label = "full run" if span == "full" else f"{lo:,}–{hi:,}"
        for m in (m for m in r.rows if m.span == span):
            if m.timing is None:
                rows.append([m.name, label, "refused", "", "", "", m.detail])
                continue
            ratio = m.timing.median_ms / base.timing.median_ms
            if m.baseline:
                target, verdict = "", ""
            elif m.name == "layer grid" and span == "full":
                target = f"≤ {ANALYTIC_RATIO_TARGET:.0f}x; < {HEATMAP_TARGET_MS:.0f} ms"
                met = ratio <= ANALYTIC_RATIO_TARGET and m.timing.median_ms < HEATMAP_TARGET_MS
                verdict = "met" if met else "MISSED"
            else:
                target = f"≤ {ANALYTIC_RATIO_TARGET:.0f}x"
                verdict = "met" if ratio <= ANALYTIC_RATIO_TARGET else "MISSED"
            rows.append(
                [
                    m.name,
                    label,
                    *_ms(m.timing),
                    f"{ratio:.1f}",
                    f"{target} {verdict}".strip(),
                    m.detail,
                ]
            )
    say(
        table(
            [
                "operation",
                "range",
                "ms median",
                "range ms",
                "ratio to series read",
                "target",
                "result",
            ],
            rows,
        )
    )
    say(
        f"\nlayer grid, full run, by part (points read: {r.grid_candidates:,}; "
        f"one series read's: {r.series_candidates:,})\n"
    )
    say(table(["part", "ms median", "range ms"], [[k, *_ms(t)] for k, t in r.grid_parts.items()]))
    if r.browser:
        say("\nbrowser (headless Chromium, the real server)\n")
        rows = []
        for k, t in r.browser.items():
            target = ""
            if k.startswith("zoom") and "overlay redrawn" in k:
                verdict = "met" if t.median_ms < ZOOM_TARGET_MS else "MISSED"
                target = f"< {ZOOM_TARGET_MS:.0f} ms {verdict}"
            rows.append([k, *_ms(t), target])
        say(table(["measure", "ms median", "range ms", "target"], rows))
        say(
            f"1-minute load average before / after the browser: {r.browser_load[0]:.1f} / "
            f"{r.browser_load[1]:.1f}"
        )
    for name, text in r.profiles.items():
        say(f"\ncProfile of {name}:\n{text}")
    say(
        f"1-minute load average before / after the timed reads: {r.load_average[0]:.1f} / "
        f"{r.load_average[1]:.1f} ({os.cpu_count()} CPUs)"
    )


def run(args: argparse.Namespace, shape: Shape) -> Results:
    results = Results(shape)
    with scratch_postgres("normwatch_bench_analytics") as url:
        engine = build_engine(url, pool_size=2)
        factory = session_factory(engine)
        try:
            run_id, run_key = create_run(factory)
            say(
                f"run {run_id}: {shape.steps:,} steps x {len(shape.names())} metrics = "
                f"{shape.points:,} points; event at {shape.event:,}; "
                f"zoom {shape.zoom[0]:,}-{shape.zoom[1]:,}"
            )
            results.load_s = load(engine, factory, run_id, run_key, shape)
            with factory() as session:
                stored = point_count(session, run_key)
            if stored != shape.points:
                raise RuntimeError(f"stored {stored:,} points, expected {shape.points:,}")
            results.compact_s = compact(engine, factory, shape.points)
            add_event(factory, run_id, shape.event)
            with engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.exec_driver_sql("VACUUM ANALYZE")
                results.database_bytes = int(
                    conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar_one()
                )
            before = os.getloadavg()[0]
            measure(engine, run_id, shape, args.repeat, results, args.profile)
            results.load_average = (before, os.getloadavg()[0])
        finally:
            engine.dispose()
        if args.browser:
            say("browser: the run page in headless Chromium")
            try:
                before = os.getloadavg()[0]
                browser_timings(url, run_id, shape, args.repeat, results)
                results.browser_load = (before, os.getloadavg()[0])
            except Exception as e:  # the server-side numbers above stand on their own
                results.browser_note = f"{type(e).__name__}: {e}"
                say(f"  browser measurement failed: {results.browser_note}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="100k steps, 20 metrics, 3 repeats")
    parser.add_argument("--steps", type=int, default=None, help="default 1,000,000")
    parser.add_argument(
        "--metrics",
        type=int,
        default=None,
        help=f"metrics besides the {len(LAYERS)} layer grad norms (200; at least {len(NAMED)})",
    )
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per call (5)")
    parser.add_argument("--browser", action="store_true", help="also time the run page in Chromium")
    parser.add_argument("--profile", action="store_true", help="cProfile each analytic once")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    shape = Shape(
        args.steps or (100_000 if args.quick else 1_000_000),
        args.metrics or (20 if args.quick else 200),
        args.seed,
    )
    args.repeat = args.repeat or (3 if args.quick else 5)
    if shape.metrics < len(NAMED):
        parser.error(f"--metrics must be at least {len(NAMED)}")
    if shape.steps < 10 * TAIL:
        parser.error(f"--steps must be at least {10 * TAIL}")
    started = time.perf_counter()
    results = run(args, shape)
    report(results)
    if results.browser_note:
        say(f"browser: {results.browser_note}")
    say(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
