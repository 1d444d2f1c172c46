"""The export's pages against what was logged, point for point: float64 and float32 values,
NaN and infinities, metrics logged at different steps, hot and compacted points, a restart's
lineage, globs and expressions, and pages that split the run anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.aliases import EMPTY
from normwatch.server.db import session_scope
from normwatch.server.errors import Invalid, UnknownMetrics
from normwatch.server.services import export
from normwatch.server.storage.policy import Policy
from tests.helpers.committed import Sessions, compact, new_run, post, resume, the_run
from tests.helpers.databases import BACKENDS, own_sessions

GRAD, LOSS = "grad/norm/total", "train/loss"
LOSSLESS = Policy(precision="float64")
"""Compaction keeping float64 values as they were logged (the default, named)."""


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "export", tmp_path_factory) as made:
        yield made


Table = dict[int, dict[str, float]]


def exported(
    sessions: Sessions,
    run_id: str,
    metrics: list[str],
    start: int | None = None,
    end: int | None = None,
    segment: int | None = None,
) -> tuple[list[str], Table, list[int]]:
    """Headers, ``{step: {header: value}}`` of every page, and each page's length."""
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        cols = export.columns(session, run, metrics, EMPTY)
        table: Table = {}
        sizes = []
        for page in export.pages(session, run, cols, EMPTY, start, end, segment):
            assert np.all(np.diff(page.steps) > 0)
            assert not set(page.steps.tolist()) & set(table), "a step on two pages"
            sizes.append(len(page))
            for i, step in enumerate(page.steps.tolist()):
                table[step] = {
                    c.header: float(v[i])
                    for c, v, p in zip(cols, page.values, page.present, strict=True)
                    if p[i]
                }
        return [c.header for c in cols], table, sizes


def same(got: Table, want: Table) -> None:
    assert sorted(got) == sorted(want)
    for step, row in want.items():
        assert set(got[step]) == set(row), step
        for name, value in row.items():
            found = got[step][name]
            assert found == value or (np.isnan(found) and np.isnan(value)), (step, name)


def logged(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A grad norm every step and a loss every third, with NaN and infinities in both."""
    rng = np.random.default_rng(seed)
    grad_steps = np.arange(n)
    grad = rng.lognormal(size=n)
    grad[[5, 77]] = np.nan
    grad[[9]] = np.inf
    loss_steps = np.arange(0, n, 3)
    loss = 3.0 + rng.standard_normal(len(loss_steps))
    loss[[4]] = -np.inf
    return grad_steps, grad, loss_steps, loss


@pytest.mark.parametrize("compacted", ["hot", "half", "all"])
def test_every_logged_point_comes_back_once_exactly(
    sessions: Sessions, compacted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = new_run(sessions)
    grad_steps, grad, loss_steps, loss = logged(1, 3000)
    half = 1500
    post(sessions, run_id, grad_steps[:half], **{GRAD: grad[:half]})
    post(sessions, run_id, loss_steps[loss_steps < half], **{LOSS: loss[loss_steps < half]})
    if compacted != "hot":
        compact(sessions, run_id, LOSSLESS)
    post(sessions, run_id, grad_steps[half:], **{GRAD: grad[half:]})
    post(sessions, run_id, loss_steps[loss_steps >= half], **{LOSS: loss[loss_steps >= half]})
    if compacted == "all":
        compact(sessions, run_id, LOSSLESS)
    want: Table = {int(s): {GRAD: float(v)} for s, v in zip(grad_steps, grad, strict=True)}
    for s, v in zip(loss_steps, loss, strict=True):
        want[int(s)][LOSS] = float(v)

    headers, got, sizes = exported(sessions, run_id, [GRAD, LOSS])
    assert headers == [GRAD, LOSS] and len(sizes) == 1
    same(got, want)
    # Small pages: the same points, each page about its share.
    monkeypatch.setattr(export, "PAGE_POINTS", 400)
    _, paged, sizes = exported(sessions, run_id, [GRAD, LOSS])
    same(paged, want)
    assert len(sizes) >= 8 and max(sizes) <= 400 + 4096
    # A range: its steps only, at either edge exactly.
    _, ranged, _ = exported(sessions, run_id, [GRAD, LOSS], start=1234, end=2000)
    same(ranged, {s: row for s, row in want.items() if 1234 <= s <= 2000})


def test_float32_values_come_back_as_the_float32s_shortest_decimal(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    steps = np.arange(2000)
    narrow = np.random.default_rng(2).lognormal(size=2000).astype(np.float32)
    post(sessions, run_id, steps, **{GRAD: narrow.astype(np.float64)})
    compact(sessions, run_id, Policy(precision="float32"))  # the opt-in lossy setting
    _, got, _ = exported(sessions, run_id, [GRAD])
    values = np.array([got[s][GRAD] for s in range(2000)])
    assert np.array_equal(values.astype(np.float32), narrow)  # nothing lost
    assert [repr(v) for v in values.tolist()] == [str(v) for v in narrow]  # 0.1, not 0.10000000149


@pytest.mark.parametrize("compacted", [False, True], ids=["hot", "compacted"])
def test_the_latest_lineage_after_a_restart_or_an_earlier_ones(
    sessions: Sessions, compacted: bool
) -> None:
    run_id = new_run(sessions)
    post(sessions, run_id, np.arange(100), **{GRAD: np.full(100, 1.0)})
    resume(sessions, run_id, 60)  # back to the checkpoint at step 60
    post(sessions, run_id, np.arange(60, 120), **{GRAD: np.full(60, 2.0)})
    resume(sessions, run_id, 90)  # and from 90 again
    post(sessions, run_id, np.arange(90, 130), **{GRAD: np.full(40, 3.0)})
    if compacted:
        compact(sessions, run_id, LOSSLESS)
    first = {s: {GRAD: 1.0} for s in range(100)}
    second = {s: {GRAD: 1.0 if s < 60 else 2.0} for s in range(120)}
    latest = {s: {GRAD: 1.0 if s < 60 else 2.0 if s < 90 else 3.0} for s in range(130)}
    assert exported(sessions, run_id, [GRAD])[1] == latest
    for segment, want in [(1, first), (2, second), (3, latest)]:
        assert exported(sessions, run_id, [GRAD], segment=segment)[1] == want
    expression = f"ratio({GRAD}, {GRAD})"
    _, ones, _ = exported(sessions, run_id, [expression], segment=2)
    assert ones == {s: {expression: 1.0} for s in range(120)}
    with session_scope(sessions) as session, pytest.raises(Invalid, match="no segment 4"):
        export.lineage_upto(session, the_run(session, run_id), 4)


def test_globs_expand_and_expressions_are_computed_from_every_point(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    steps = np.arange(500)
    rng = np.random.default_rng(3)
    layers = {f"grad/norm/layers.{i}": rng.lognormal(size=500) for i in (0, 1, 10)}
    post(sessions, run_id, steps, **layers)
    compact(sessions, run_id, LOSSLESS)
    metrics = ["grad/norm/layers.*", "rss(grad/norm/layers.*)"]
    headers, got, _ = exported(sessions, run_id, metrics)
    assert headers == [*sorted(layers), "rss(grad/norm/layers.*)"]
    total = np.sqrt(sum(v**2 for v in layers.values()))
    for s in steps.tolist():
        assert got[s]["rss(grad/norm/layers.*)"] == pytest.approx(total[s], rel=1e-12)
        assert all(got[s][name] == layers[name][s] for name in layers)


def test_a_run_without_those_metrics_has_no_page_and_bad_names_are_refused(
    sessions: Sessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = new_run(sessions)
    with session_scope(sessions) as session, pytest.raises(UnknownMetrics, match=GRAD):
        export.columns(session, the_run(session, run_id), [GRAD], EMPTY)
    with session_scope(sessions) as session, pytest.raises(Invalid, match="ratio"):
        export.columns(session, the_run(session, run_id), ["ratio(a)"], EMPTY)
    post(sessions, run_id, np.arange(3), **{f"m{i}": np.ones(3) for i in range(5)})
    assert exported(sessions, run_id, ["m0"], start=10) == (["m0"], {}, [])
    monkeypatch.setattr(export, "MAX_COLUMNS", 4)
    with session_scope(sessions) as session, pytest.raises(Invalid, match="more than 4 columns"):
        export.columns(session, the_run(session, run_id), ["m*"], EMPTY)
