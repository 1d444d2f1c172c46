"""Segment lineage over generated restart histories, against a reference, on both backends.

A restart whose ``start_step`` is at or below the run's last step (or, before any step
of the current segment, below its start) opens a new segment; reads show, for each step,
the point of the newest segment whose start is at or below it, or nothing where that
segment did not log the step. `lineage_of` is checked on its own over any
``(segment, start)`` list; then histories are played through the real services
(`runs.create_or_resume`, `ingest.ingest_batch`) into committed rows, and read back hot,
after compaction into chunks and the summary pyramid, and after re-sending.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import session_factory, session_scope
from normwatch.server.errors import UnknownMetrics
from normwatch.server.models import Run
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, query, runs
from normwatch.server.storage import compaction, pyramid
from normwatch.server.storage.points import series_keys
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import Lineage, lineage_of
from tests.helpers.m4_reference import Series, reference

I64_MAX = 2**63 - 1
METRIC = "grad/norm/total"
SPIKE = 1e30
"""Like every value here (integers below 2**24), read back unchanged from chunks of either
precision (float32 ones give their values' shortest decimal form)."""


def owner(segments: list[tuple[int, int | None]], step: int) -> int | None:
    """The newest segment starting at or below ``step`` (no start: below every step)."""
    found = [seg for seg, start in segments if start is None or start <= step]
    return max(found) if found else None


def owner_by_lineage(lineage: Lineage, step: int) -> int | None:
    hits = [
        seg
        for seg, lo, hi in lineage.ranges
        if (lo is None or lo <= step) and (hi is None or step < hi)
    ]
    assert len(hits) <= 1, f"step {step} is in {hits}"
    return hits[0] if hits else None


segment_lists = st.lists(st.none() | st.integers(0, 60), min_size=1, max_size=8).map(
    lambda starts: [(i + 1, start) for i, start in enumerate(starts)]
)


@settings(max_examples=400, deadline=None)
@given(segment_lists, st.permutations(range(8)))
@example([(1, None)], list(range(8)))
@example([(1, 0), (2, 500), (3, 300)], list(range(8)))
@example([(1, 10), (2, 10), (3, 10)], list(range(8)))
@example([(1, 5), (2, None), (3, 7)], list(range(8)))
def test_lineage_of_gives_each_step_its_newest_segment(
    segments: list[tuple[int, int | None]], order: list[int]
) -> None:
    shuffled = [segments[i] for i in order if i < len(segments)]
    lineage = lineage_of(shuffled)
    seen = [seg for seg, _, _ in lineage.ranges]
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == len(seen)
    for _, lo, hi in lineage.ranges:
        assert lo is None or hi is None or lo < hi, "no empty range"
    starts = {start for _, start in segments if start is not None}
    # Ownership changes only at a start; steps below 0 are never logged, but the lineage
    # is defined there too.
    probes = {-(2**63), -1, 0, I64_MAX} | {s + d for s in starts for d in (-1, 0, 1)}
    for step in sorted(probes):
        assert owner_by_lineage(lineage, step) == owner(segments, step), step
    owners = {owner(segments, step) for step in probes} - {None}
    assert set(seen) == owners, "a range for every segment that owns a step, and only those"


# --- histories played through the services ----------------------------------------------


@dataclass(frozen=True)
class Phase:
    start_step: int | None
    """What the trainer passes on (re)start; the first phase creates the run."""
    batches: list[list[int]]
    spike: int | None
    """A step of this phase logged as `SPIKE` instead of its usual value."""

    def __repr__(self) -> str:
        spans = [f"{b[0]}..{b[-1]}({len(b)})" for b in self.batches]
        return (
            f"Phase(start_step={self.start_step}, batches=[{', '.join(spans)}], spike={self.spike})"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # hypothesis would print every step of every batch


@dataclass
class Model:
    """What the server must make of a history, played step by step."""

    segments: list[tuple[int, int | None]] = field(default_factory=list)
    last_step: int | None = None
    points: dict[tuple[int, int], float] = field(default_factory=dict)

    @property
    def current(self) -> int:
        return self.segments[-1][0]

    def start(self, start_step: int | None) -> None:
        if not self.segments:
            self.segments.append((1, start_step))
            return
        reference = self.last_step if self.last_step is not None else self.segments[-1][1]
        if start_step is not None and reference is not None and start_step <= reference:
            self.segments.append((self.current + 1, start_step))
            self.last_step = None

    def log(self, steps: list[int], values: list[float]) -> int:
        """Play a batch; returns how many of its points are new (the rest are ignored)."""
        before = len(self.points)
        for step, value in zip(steps, values, strict=True):
            self.points.setdefault((self.current, step), value)  # a re-send stores nothing
        if steps:
            self.last_step = max(steps + ([] if self.last_step is None else [self.last_step]))
        return len(self.points) - before

    def visible(self) -> dict[int, float]:
        return {
            step: value
            for (seg, step), value in sorted(self.points.items(), key=lambda kv: kv[0][1])
            if owner(self.segments, step) == seg
        }


def value(segment: int, step: int, spike: int | None) -> float:
    return SPIKE if step == spike else float(segment * 1_000_000 + step)


@st.composite
def histories(draw: st.DrawFn) -> list[Phase]:
    phases = []
    for i in range(draw(st.integers(1, 5))):
        start = draw(st.none() | st.integers(0, 40)) if i == 0 else draw(st.integers(0, 400))
        base = start or 0
        steps = sorted(draw(st.sets(st.integers(max(0, base - 20), base + 300), max_size=150)))
        cuts = sorted(draw(st.sets(st.integers(0, len(steps)), max_size=4)))
        edges = [0, *cuts, len(steps)]
        batches = [steps[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]
        resend: bool = draw(st.booleans())
        if batches and resend:  # a batch sent again, as after a lost answer
            batches.append(draw(st.sampled_from(batches)))
        with_spike: bool = draw(st.booleans())
        spike = draw(st.sampled_from(steps)) if steps and with_spike else None
        phases.append(Phase(start, batches, spike))
    return phases


@pytest.fixture(scope="module")
def sessions(db_engine: Engine) -> Iterator[sessionmaker[Session]]:
    yield session_factory(db_engine)


def send(
    sessions: sessionmaker[Session], run_id: str, steps: list[int], values: list[float]
) -> tuple[int, int]:
    """Store a batch; returns the points it stored and those it ignored."""
    doc = {"steps": steps, "metrics": {METRIC: values}}
    with session_scope(sessions) as session:
        got = ingest.ingest_batch(session, run_id, parse_batch(doc, max_points=10_000))
    return got.points, sum(got.ignored.values())


def play(sessions: sessionmaker[Session], phases: list[Phase], model: Model) -> str:
    """Play the history through the services and the model alike; returns the run id."""
    with session_scope(sessions) as session:
        secret, _ = create_token(session, f"lineage-{uuid.uuid4().hex[:10]}", "admin")
    run_id = ""
    for phase in phases:
        with session_scope(sessions) as session:
            who = authenticate(session, secret)
            assert who is not None
            out = runs.create_or_resume(
                session, who, RunCreate(name="r", start_step=phase.start_step)
            )
        run_id = out.id
        model.start(phase.start_step)
        assert out.segment == model.current, "a new segment exactly when the model opens one"
        for steps in phase.batches:
            values = [value(model.current, s, phase.spike) for s in steps]
            answer = send(sessions, run_id, steps, values)
            new = model.log(steps, values)
            assert answer == (new, len(steps) - new), "stored and ignored, as the model says"
    return run_id


def the_run(session: Session, run_id: str) -> Run:
    found = runs.get_run(session, run_id)
    assert found is not None
    return found[0]


def read_all(
    sessions: sessionmaker[Session], run_id: str, start: int | None, end: int | None
) -> dict[int, float]:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        lineage, ids = series_keys(session, run.key, [METRIC])
        if METRIC not in ids:
            return {}
        got = pyramid.read_all(session, run.key, ids[METRIC], lineage, start, end)
    steps = got.steps.tolist()
    assert steps == sorted(set(steps)), "ascending, one point a step"
    return dict(zip(steps, got.values.tolist(), strict=True))


def read_chart(
    sessions: sessionmaker[Session], run_id: str, points: int, start: int | None, end: int | None
) -> query.Series:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        try:
            [got] = query.read_series(session, run, [METRIC], start=start, end=end, points=points)
        except UnknownMetrics:
            # Refused only while nothing of the metric was ever stored: an empty chart.
            assert METRIC not in series_keys(session, run.key, [METRIC])[1]
            empty = np.empty(0, dtype=np.int64)
            return query.Series(METRIC, empty, np.empty(0, dtype=np.float64), False, 0)
    return got


def check_reads(
    sessions: sessionmaker[Session],
    run_id: str,
    model: Model,
    window: tuple[int | None, int | None],
    points: int,
    *,
    exact_m4: bool,
) -> None:
    visible = model.visible()
    assert read_all(sessions, run_id, None, None) == visible
    start, end = window
    inside = {
        s: v
        for s, v in visible.items()
        if (start is None or s >= start) and (end is None or s <= end)
    }
    assert read_all(sessions, run_id, start, end) == inside

    chart = read_chart(sessions, run_id, points, start, end)
    got = dict(zip(chart.steps.tolist(), chart.values.tolist(), strict=True))
    assert len(got) == len(chart.steps), "one point a step"
    wrong = {s: (v, inside.get(s)) for s, v in got.items() if inside.get(s) != v}
    assert not wrong, f"not points of the lineage, (shown, stored) by step: {wrong}"
    assert chart.total_points == len(inside)
    assert len(got) <= 4 * points
    if len(inside) <= 4 * points:
        assert got == inside
        return
    assert chart.downsampled
    assert max(inside.values()) in got.values() and min(inside.values()) in got.values()
    if exact_m4:
        steps = np.array(sorted(inside), dtype=np.int64)
        lo = start if start is not None else int(steps[0])
        hi = end if end is not None else int(steps[-1])
        series = Series(steps, np.array([inside[s] for s in steps.tolist()]), lo, hi, points)
        need = {int(steps[i]) for kept in reference(series).values() for i in kept}
        assert need <= set(got), f"M4 lost steps {sorted(need - set(got))}"


DB_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
windows = st.tuples(st.none() | st.integers(0, 300), st.none() | st.integers(300, 800))
pixels = st.sampled_from([1, 3, 10, 50, 1000])
RESTARTS = [
    Phase(0, [list(range(0, 300))], 150),
    Phase(100, [list(range(100, 250))], None),
    Phase(400, [list(range(400, 450))], None),  # past the last step: the same segment
    Phase(50, [list(range(50, 120))], 60),
]


def compact(sessions: sessionmaker[Session], run_id: str, model: Model) -> None:
    with session_scope(sessions) as session:
        key = the_run(session, run_id).key
    for segment, _ in model.segments:  # small chunks: several chunks and pyramid levels
        compaction.compact_run(sessions, Policy(chunk_points=64), key, segment, 2**62)


@DB_SETTINGS
@given(histories(), windows, pixels)
@example(RESTARTS, (None, None), 10)
# Three compacted points, one pixel: a summary stood for them, and the middle one was missing.
@example([Phase(0, [[0, 1, 2]], None)], (None, None), 1)
def test_reads_show_the_newest_segment_at_every_step(
    sessions: sessionmaker[Session],
    phases: list[Phase],
    window: tuple[int | None, int | None],
    points: int,
) -> None:
    model = Model()
    run_id = play(sessions, phases, model)
    check_reads(sessions, run_id, model, window, points, exact_m4=True)
    compact(sessions, run_id, model)
    check_reads(sessions, run_id, model, window, points, exact_m4=False)


@DB_SETTINGS
@given(histories(), windows, pixels)
@example(RESTARTS, (None, None), 10)
@example([Phase(0, [list(range(64))], None)], (None, None), 1)
def test_resending_compacted_points_changes_no_read(
    sessions: sessionmaker[Session],
    phases: list[Phase],
    window: tuple[int | None, int | None],
    points: int,
) -> None:
    """Points re-sent after their steps were compacted, even with other values, change
    nothing a read shows: the stored value wins, and no point counts twice."""
    model = Model()
    run_id = play(sessions, phases, model)
    compact(sessions, run_id, model)
    last = phases[-1]
    for steps in last.batches:
        resent = [-value(model.current, s, last.spike) for s in steps]
        answer = send(sessions, run_id, steps, resent)
        assert answer == (0, len(steps)), "compacted points are counted as ignored at once"
        model.log(steps, resent)
    check_reads(sessions, run_id, model, window, points, exact_m4=False)
