"""Numeric parameters of the analytics are bounded by the data: a transitions window past the
analysed range is clamped to it (and the answer says so), and step ranges out to int64's ends
allocate what the points read take, never what the span or the window asks for.

On a committed 2,000-step run in Postgres, through the services the API and the dashboard
share. Memory is measured with ``tracemalloc`` (NumPy reports its arrays to it).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest
from sqlalchemy.orm import Session

from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.errors import Invalid
from normwatch.server.schemas import EventCreate
from normwatch.server.services import analytics, attribution, ingest, layers, transitions
from tests.helpers.committed import Sessions, new_run, post, the_run

T = TypeVar("T")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STEPS = 2000
EVENT = 1200
NORM = "params/norm/final_norm.weight"
PARTS = {"grad/norm/embed": 0.3, "grad/norm/layers.0": 0.4, "grad/norm/lm_head": 1.2}
MiB = 2**20


@pytest.fixture
def sessions(pg_url: str) -> Iterator[Sessions]:
    engine = build_engine(pg_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def norm_values() -> np.ndarray:
    """2 per 1k steps, 2.5 times steeper from `EVENT` on, with a little noise."""
    t = np.arange(STEPS, dtype=np.float64)
    trend = 78.0 + 0.002 * t + 0.003 * np.maximum(t - EVENT, 0.0)
    return trend + 0.001 * np.random.default_rng(0).standard_normal(STEPS)


@pytest.fixture
def run_id(sessions: Sessions) -> str:
    """Steps 0..1,999 of a steepening norm, an event at its change, and three layers'
    constant grad norms with their total."""
    run_id = new_run(sessions)
    parts = {name: np.full(STEPS, value) for name, value in PARTS.items()}
    total = np.sqrt(sum(np.square(v) for v in parts.values()))
    post(sessions, run_id, np.arange(STEPS), **{NORM: norm_values(), "grad/norm/total": total})
    post(sessions, run_id, np.arange(STEPS), **parts)
    with session_scope(sessions) as session:
        body = EventCreate(step=EVENT, kind="config", text="lr bump")
        ingest.add_event(session, the_run(session, run_id), body)
    return run_id


def measured(sessions: Sessions, run_id: str, call: Callable[[Session], T]) -> tuple[T, int]:
    """What ``call`` answers on the run, and the peak bytes it allocated."""
    with session_scope(sessions) as session:
        the_run(session, run_id)  # loaded before measuring
        tracemalloc.start()
        try:
            answer = call(session)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return answer, peak


def test_a_transitions_window_past_the_range_is_clamped_and_allocates_no_more(
    sessions: Sessions, run_id: str
) -> None:
    def with_window(window: int | None) -> Callable[[Session], dict[str, Any]]:
        return lambda session: transitions.run_transitions(
            session, the_run(session, run_id), [NORM], window=window
        ).to_json()

    default, default_peak = measured(sessions, run_id, with_window(None))
    wide, wide_peak = measured(sessions, run_id, with_window(10**6))
    assert default["window"] == (STEPS - 1) // 20
    # Clamped to the range analysed, steps 0 to 1,999: the answer says which window it used.
    assert wide["window"] == STEPS - 1
    for window in (STEPS - 1, 2**40, INT64_MAX):
        assert measured(sessions, run_id, with_window(window))[0] == wide
    [row] = wide["transitions"]
    fit = row["metrics"][NORM]
    assert (row["step"], row["source"], row["label"]) == (EVENT, "event", "lr bump")
    assert (fit["n_before"], fit["n_after"]) == (EVENT, STEPS - EVENT)
    assert fit["before_segment"][0][0] == 0 and fit["after_segment"][1][0] == STEPS - 1
    assert fit["slope_before"] == pytest.approx(2.0, rel=1e-3)
    assert fit["slope_after"] == pytest.approx(5.0, rel=1e-3)
    # A window of 10**5 used to allocate 1.6 GB here and one of 2**40 failed allocating
    # 10.7 TiB; now the widest costs a few MiB more than the default's window of 99 steps.
    assert wide_peak < default_peak + 4 * MiB
    assert wide_peak < 8 * MiB


def test_an_extreme_step_range_analyses_the_points_not_the_span(
    sessions: Sessions, run_id: str
) -> None:
    whole = {"start": INT64_MIN, "end": INT64_MAX}

    def transitions_over(session: Session) -> dict[str, Any]:
        found = transitions.run_transitions(session, the_run(session, run_id), [NORM], **whole)
        return found.to_json()

    got, peak = measured(sessions, run_id, transitions_over)
    unranged, _ = measured(
        sessions,
        run_id,
        lambda session: transitions.run_transitions(
            session, the_run(session, run_id), [NORM]
        ).to_json(),
    )
    assert got == unranged and peak < 4 * MiB

    def spikes_over(session: Session) -> analytics.SpikeReport:
        return analytics.spike_report(session, the_run(session, run_id), [NORM], **whole)

    report, peak = measured(sessions, run_id, spikes_over)
    assert report.fraction_in_window == report.fraction_in_spikes and peak < 4 * MiB

    def compared(session: Session) -> dict[str, Any]:
        run = the_run(session, run_id)
        return analytics.compare_runs(session, [run], NORM, points=20_000, **whole).model_dump()

    body, peak = measured(sessions, run_id, compared)
    [one] = body["runs"]
    assert (one["summary"]["points"], one["summary"]["final_step"]) == (STEPS, STEPS - 1)
    assert one["series"]["total_points"] == STEPS and peak < 4 * MiB


def test_an_extreme_step_range_buckets_the_layer_grid_exactly(
    sessions: Sessions, run_id: str
) -> None:
    def grid(session: Session) -> layers.LayerGrid:
        run = the_run(session, run_id)
        return layers.layer_grid(
            session, run, "grad/norm", start=INT64_MIN, end=INT64_MAX, points=4, at=0
        )

    got, peak = measured(sessions, run_id, grid)
    # Four buckets of 2**62 steps; every point lies in the one from step 0.
    assert got.steps == [INT64_MIN, -(2**62), 0, 2**62] and got.bucketed
    assert got.layers == ["embed", "layers.0", "lm_head"]
    assert got.values == [[None, None, value, None] for value in PARTS.values()]
    assert got.profile is not None
    assert (got.profile.step, got.profile.steps) == (0, [0, 0, 0])
    assert got.profile.values == list(PARTS.values())
    assert peak < 4 * MiB

    def pinned_at_the_end(session: Session) -> layers.LayerGrid:
        run = the_run(session, run_id)
        return layers.layer_grid(
            session, run, "grad/norm", start=INT64_MAX - 5, end=INT64_MAX, points=1, at=INT64_MAX
        )

    empty, _ = measured(sessions, run_id, pinned_at_the_end)
    assert (empty.steps, empty.values) == ([], [[], [], []])
    assert empty.profile is not None and empty.profile.steps == [None, None, None]


def test_an_extreme_step_range_samples_attribution_exactly(sessions: Sessions, run_id: str) -> None:
    def shares(session: Session) -> attribution.Attribution:
        run = the_run(session, run_id)
        return attribution.attribution(
            session, run, "grad/norm", start=INT64_MIN, end=INT64_MAX, points=4
        )

    got, peak = measured(sessions, run_id, shares)
    total2 = sum(v * v for v in PARTS.values())
    # The one column holding points is represented by its first step that all logged.
    assert got.steps == [0] and got.mismatched == []
    assert got.shares == [[pytest.approx(v * v / total2, rel=1e-12)] for v in PARTS.values()]
    assert peak < 4 * MiB


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda s, r: layers.layer_grid(s, r, "grad/norm", points=layers.MAX_COLUMNS + 1),
            "points must be between 1 and 4000, got 4001",
        ),
        (
            lambda s, r: attribution.attribution(s, r, "grad/norm", points=0),
            "points must be between 1 and 4000, got 0",
        ),
        (
            lambda s, r: analytics.spike_report(s, r, [NORM], max_lag=analytics.MAX_LAG + 1),
            "max_lag must be between 1 and 1000, got 1001",
        ),
        (
            lambda s, r: transitions.run_transitions(s, r, [NORM], window=0),
            "window must be at least 1 step, got 0",
        ),
    ],
    ids=["layers-points", "attribution-points", "max-lag", "window"],
)
def test_parameters_past_their_fixed_limits_are_refused_naming_the_limit(
    sessions: Sessions, run_id: str, call: Callable[[Session, object], object], message: str
) -> None:
    with session_scope(sessions) as session:
        with pytest.raises(Invalid) as refused:
            call(session, the_run(session, run_id))
    assert str(refused.value) == message
