"""Spikes kept per run version: a kept answer is the answer found afresh from every stored
point, and a batch or a compaction makes the run's spikes be found anew."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.analytics.spikes import find_spikes, fraction_in_spikes
from normwatch.server.analytics.summary import summarize
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.errors import Invalid
from normwatch.server.services import analytics, kept, kept_spikes
from normwatch.server.services.analytics import spike_report
from normwatch.server.services.full_resolution import Budget, Reader
from normwatch.server.storage.versions import data_version
from tests.helpers.committed import Sessions, compact, new_run, post, stored, the_run
from tests.helpers.databases import BACKENDS, own_database

GRAD = "grad/norm/total"
LOSS = "train/loss"


@pytest.fixture(scope="module", params=BACKENDS)
def own_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database of this module's own: the session's servers compact their runs in the
    background, which would move a run's version between a report and its reference."""
    with own_database(request.param, "kept", tmp_path_factory) as url:
        yield url


@pytest.fixture
def sessions(own_db_url: str) -> Iterator[Sessions]:
    engine = build_engine(own_db_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def noisy(steps: np.ndarray, spikes_at: tuple[int, ...] = ()) -> np.ndarray:
    values = 1.0 + 0.01 * np.sin(steps * 1.7) + 0.005 * (steps % 7)
    for at in spikes_at:
        values = np.where((steps >= at) & (steps < at + 3), 5.0, values)
    return values


def report(sessions: Sessions, run_id: str, metrics: list[str], **kw: int | None):  # type: ignore[no-untyped-def]
    with session_scope(sessions) as session:
        return spike_report(session, the_run(session, run_id), metrics, **kw)  # type: ignore[arg-type]


def reference(
    sessions: Sessions, run_id: str, metric: str, start: int | None, end: int | None
) -> tuple[list[tuple[int, int]], float, float]:
    """Spikes found afresh from every stored point: (start, end) each, the whole run's share
    of steps in them and the range's."""
    steps, values = stored(sessions, run_id, metric)
    found = find_spikes(steps, values)
    return (
        [(s.start, s.end) for s in found],
        fraction_in_spikes(steps, found),
        fraction_in_spikes(steps, found, start, end),
    )


@pytest.mark.parametrize("compacted", [False, True], ids=["hot", "compacted"])
def test_kept_answers_are_the_answers_found_afresh(sessions: Sessions, compacted: bool) -> None:
    run_id = new_run(sessions)
    regular = np.arange(0, 6000)
    post(sessions, run_id, regular, **{GRAD: noisy(regular, (1500, 4200))})
    # The loss at irregular steps: every third, with a gap.
    irregular = np.concatenate([np.arange(0, 3000, 3), np.arange(3500, 6000, 2)])
    post(sessions, run_id, irregular, **{LOSS: noisy(irregular, (4201,))})
    if compacted:
        compact(sessions, run_id)
    ranges = [(None, None), (1400, 1600), (None, 2000), (4000, None), (3001, 3499), (7000, 8000)]
    kept.forget()
    for start, end in ranges:
        got = report(sessions, run_id, [GRAD, LOSS], start=start, end=end)
        for metric in (GRAD, LOSS):
            spikes, whole, window = reference(sessions, run_id, metric, start, end)
            listed = [(s["start"], s["end"]) for s in got.spikes if s["metric"] == metric]
            assert listed == [
                (a, b)
                for a, b in spikes
                if (start is None or b >= start) and (end is None or a <= end)
            ]
            assert got.fraction_in_spikes[metric] == whole
            if start is None and end is None:
                assert got.fraction_in_window is None
            else:
                assert got.fraction_in_window is not None
                assert got.fraction_in_window[metric] == window
    assert len(reference(sessions, run_id, GRAD, None, None)[0]) == 2


def test_each_threshold_is_kept_apart_and_compare_shares_the_default(
    sessions: Sessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spike of 7 noise SDs is one at threshold 4 and none at 10, asked in either order;
    compare reads the spikes the run page kept at the default threshold (where the contract
    says a 7-SD, 7 % spike is one), no second search."""
    run_id = new_run(sessions)
    steps = np.arange(0, 3000)
    rng = np.random.default_rng(2)
    values = 1.0 + 0.01 * rng.standard_normal(len(steps))
    values[2000:2004] += 0.07  # 7 % and 7 noise SDs
    post(sessions, run_id, steps, **{GRAD: values})
    kept.forget()
    for threshold, count in [(4, 1), (10, 0), (4, 1), (10, 0), (5.25, 1)]:
        got = report(sessions, run_id, [GRAD], threshold=threshold)  # type: ignore[arg-type]
        assert len(got.spikes) == count, threshold
    searched: list[int] = []
    find = analytics.spike_finder.find_spikes
    monkeypatch.setattr(
        analytics.spike_finder,
        "find_spikes",
        lambda *a, **kw: searched.append(1) or find(*a, **kw),
    )
    with session_scope(sessions) as session:
        answer = analytics.compare_runs(session, [the_run(session, run_id)], GRAD)
    assert answer.runs[0].summary.spike_count == 1 and searched == []


def test_a_batch_or_a_compaction_makes_a_new_version(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    steps = np.arange(0, 3000)
    post(sessions, run_id, steps, **{GRAD: noisy(steps)})
    assert report(sessions, run_id, [GRAD]).spikes == []
    later = np.arange(3000, 4000)
    post(sessions, run_id, later, **{GRAD: noisy(later, (3500,))})
    assert [s["start"] for s in report(sessions, run_id, [GRAD]).spikes] == [3500]

    def version():  # type: ignore[no-untyped-def]
        with session_scope(sessions) as session:
            return data_version(session, the_run(session, run_id).key)

    before = version()
    assert version() == before
    compact(sessions, run_id)
    assert version() != before
    assert [s["start"] for s in report(sessions, run_id, [GRAD]).spikes] == [3500]


def test_a_kept_answer_counts_against_the_budget(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    steps = np.arange(0, 2000)
    post(sessions, run_id, steps, **{GRAD: noisy(steps, (900,))})
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        version = data_version(session, run.key)
        assert version is not None
        found = kept_spikes.found_spikes(Reader(session, run, None, None), GRAD, version)
        assert [s.start for s in found.spikes] == [900]
        small = Reader(session, run, None, None, Budget(points=1999))
        with pytest.raises(Invalid, match="more than 1,999 stored points"):
            kept_spikes.found_spikes(small, GRAD, version)


@pytest.mark.parametrize(
    "steps",
    [
        np.arange(10, 1000, 7),
        np.array([5]),
        np.array([], dtype=np.int64),
        np.array([0, 1, 2, 10, 11, 50, 51, 52, 400]),
    ],
    ids=["stride", "one", "none", "irregular"],
)
def test_the_steps_between_two_steps_are_the_logged_ones(steps: np.ndarray) -> None:
    found = kept_spikes.FoundSpikes.of(steps.astype(np.int64), [])
    bounds = [None, -5, 0, 9, 10, 11, 16, 17, 51, 400, 993, 994, 2000]
    for start in bounds:
        for end in bounds:
            if start is not None and end is not None and end < start:
                continue
            inside = (start is None or steps >= start) if len(steps) else steps > 0
            inside = inside & ((end is None) | (steps <= (end if end is not None else 0)))
            assert found.steps_between(start, end).tolist() == steps[inside].tolist()


def test_compare_keeps_its_summary_and_spikes_per_version(
    sessions: Sessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compare's summary over a range and its spikes over the whole run, kept: the same
    answer as found afresh from every stored point, a new one once the run logs more, and a
    kept answer counts against the budget as the read did."""
    run_id = new_run(sessions)
    steps = np.arange(0, 3000)
    post(sessions, run_id, steps, **{GRAD: noisy(steps, (1200,))})

    def compared(start: int | None, end: int | None) -> dict[str, object]:
        with session_scope(sessions) as session:
            run = the_run(session, run_id)
            answer = analytics.compare_runs(session, [run], GRAD, start=start, end=end)
            return answer.runs[0].summary.model_dump()

    def expected(start: int | None, end: int | None) -> dict[str, object]:
        all_steps, values = stored(sessions, run_id, GRAD)
        inside = (all_steps >= (start or 0)) & (all_steps <= (end if end is not None else 10**9))
        summary = summarize(all_steps[inside], values[inside])
        found = find_spikes(all_steps, values)
        return {
            "max": summary.max,
            "final_step": summary.final_step,
            "slope_per_1k": summary.slope_per_1k,
            "spike_count": len(found),
            "fraction_in_spikes": fraction_in_spikes(all_steps, found),
        }

    kept.forget()
    for start, end in [(None, None), (1000, 2000), (None, None)]:  # the last one kept
        got = compared(start, end)
        assert {k: got[k] for k in expected(start, end)} == expected(start, end)
    later = np.arange(3000, 4000)
    post(sessions, run_id, later, **{GRAD: noisy(later, (3500,))})
    got = compared(None, None)
    assert got["spike_count"] == 2 and got["final_step"] == 3999
    assert {k: got[k] for k in expected(None, None)} == expected(None, None)
    monkeypatch.setattr(analytics, "Budget", lambda: Budget(points=3999))
    with pytest.raises(Invalid, match="more than 3,999 stored points"):
        compared(None, None)  # kept, and still refused
