"""Exact, always: any float64 a trainer logs comes back bit for bit after compaction at the
default precision, from every reader, on both backends.

The readers: every stored point (`pyramid.read_all`), a series read at full resolution and
one downsampled (whose points are stored points: the summaries' first, last, minimum and
maximum), the export's pages (what `history` and the export formats print), the analyses'
full-resolution reads, and the outlines' points (the layer grid, attribution). Values are
compared as bits, so ``-0.0`` is not ``0.0``; NaN arrives as the API's ``"NaN"`` and is
compared as NaN. The opt-in float32 setting is the one lossy exception, checked to round
as documented.
"""

from __future__ import annotations

from collections.abc import Iterator

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis.extra.numpy import arrays
from pydantic import ValidationError

from normwatch.server.aliases import EMPTY
from normwatch.server.config import Settings
from normwatch.server.db import session_scope
from normwatch.server.services import export, query
from normwatch.server.services.full_resolution import Reader
from normwatch.server.storage import across, chunks, pyramid
from normwatch.server.storage.metric_ids import metric_ids_by_name
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of
from normwatch.server.workers.compactor import Compactor
from tests.helpers.committed import Sessions, compact, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions

METRIC = "train/loss"
NAMED = np.array(
    [
        16.017241,
        1 / 3,
        float(2**53 + 1),  # 2**53 as a float64 (2**53 + 1 has no float64 of its own)
        float(2**53 + 2),
        1e-50,
        5e-324,  # the smallest subnormal
        2.2250738585072014e-308 / 3,  # another subnormal
        -0.0,
        0.0,
        2.99993896484375,  # exact in float32
        0.1,
        np.nan,
        np.inf,
        -np.inf,
    ]
)
"""The values that drifted under float32 storage, and their neighbours in trouble:
subnormals, signed zeros, integers past 2**53, non-finite values. All within float32's
range: a finite value past it keeps even a float32 chunk in float64."""
EXTREMES = np.array([1.7976931348623157e308, -1.7976931348623157e308, 3.5e38])
"""Finite values past float32's range."""

SMALL = Policy(chunk_points=64)
"""The default precision, in chunks of one bucket each: several chunks and rollups."""


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "exact", tmp_path_factory) as made:
        yield made


def bits(values: np.ndarray) -> list[int]:
    """Each value's bits, every NaN as the one NaN the API can carry."""
    out = np.asarray(values, dtype=np.float64).copy()
    out[np.isnan(out)] = np.nan
    return out.view(np.uint64).tolist()


def stored_at(steps: np.ndarray, values: np.ndarray) -> dict[int, int]:
    return dict(zip(steps.tolist(), bits(values), strict=True))


def every_reader(sessions: Sessions, run_id: str, steps: np.ndarray, values: np.ndarray) -> None:
    """Each reader gives the logged points bit for bit (or, where it shows a few points for
    many, only logged points, bit for bit)."""
    want = stored_at(steps, values)
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        lineage = lineage_of(segments_of(session, run.key))
        mid = metric_ids_by_name(session, run.key, [METRIC])[METRIC]

        every = pyramid.read_all(session, run.key, mid, lineage, None, None)
        assert stored_at(every.steps, every.values) == want, "every stored point"

        [full] = query.read_series(session, run, [METRIC], points=max(len(steps), 1))
        assert not full.downsampled
        assert stored_at(full.steps, full.values) == want, "series at full resolution"

        [chart] = query.read_series(session, run, [METRIC], points=1)
        shown = stored_at(chart.steps, chart.values)
        assert {s: want.get(s) for s in shown} == shown, "a downsampled series' points"

        cols = export.columns(session, run, [METRIC], EMPTY)
        exported: dict[int, int] = {}
        for page in export.pages(session, run, cols, EMPTY, None, None, None):
            [present], [page_values] = page.present, page.values
            exported |= stored_at(page.steps[present], page_values[present])
        assert exported == want, "export and history"

        analysed = Reader(session, run, None, None).series([METRIC])[METRIC]
        assert stored_at(*analysed) == want, "the analyses' full-resolution read"

        for pick in ("first", "max"):
            got = across.read(session, run.key, [mid], lineage, None, None, 1e18, pick)
            [points], [narrow] = got.series, got.narrow
            assert narrow is None or not narrow.any(), "a float64 chunk's outline"
            outlined = stored_at(points.steps, points.values)
            assert {s: want.get(s) for s in outlined} == outlined, f"outline's {pick} points"


def steps_of(n: int, even: bool, seed: int) -> np.ndarray:
    if even:
        return np.arange(n, dtype=np.int64) * 3
    gaps = np.random.default_rng(seed).integers(1, 50, size=n)
    return np.cumsum(gaps).astype(np.int64)


any_float64 = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True, width=64)
logged_values = arrays(
    np.float64,
    st.integers(1, 300),
    elements=any_float64 | st.sampled_from([*NAMED.tolist(), *EXTREMES.tolist()]),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(logged_values, st.booleans(), st.integers(0, 2**16))
@example(NAMED, True, 0)
@example(np.tile(np.concatenate([NAMED, EXTREMES]), 20), False, 1)
# Float32 values as a JAX trainer logs them: outlines of the exact float32 kinds.
@example(np.linspace(0.5, 3.0, 300).astype(np.float32).astype(np.float64), True, 2)
@example(np.linspace(0.5, 3.0, 300).astype(np.float32).astype(np.float64), False, 3)
def test_any_float64_round_trips_through_compaction_and_every_reader(
    sessions: Sessions, values: np.ndarray, even: bool, seed: int
) -> None:
    steps = steps_of(len(values), even, seed)
    run_id = new_run(sessions)
    post(sessions, run_id, steps, **{METRIC: values})
    every_reader(sessions, run_id, steps, values)  # hot
    compact(sessions, run_id, SMALL)
    every_reader(sessions, run_id, steps, values)  # compacted


def test_the_issues_values_read_back_as_logged_after_compaction(sessions: Sessions) -> None:
    """16.017241 read 16.01724, 1/3 read 0.33333334, 2**53 read 9007199000000000.0, 1e-50
    and 5e-324 read 0.0 once compacted as float32: each now reads as it was logged."""
    run_id = new_run(sessions)
    steps = np.arange(len(NAMED), dtype=np.int64)
    post(sessions, run_id, steps, **{METRIC: NAMED})
    compact(sessions, run_id)  # the default policy, one chunk
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        [full] = query.read_series(session, run, [METRIC])
    assert bits(full.values) == bits(NAMED)
    got = full.values.tolist()
    assert got[:6] == [16.017241, 1 / 3, 9007199254740992.0, 9007199254740994.0, 1e-50, 5e-324]
    assert str(got[7]) == "-0.0" and str(got[8]) == "0.0"


def test_float32_is_opt_in_and_rounds_as_documented(sessions: Sessions) -> None:
    """The lossy setting: values as the shortest decimal of their float32, what no longer
    fits a float32 as 0.0 (subnormals) or kept in float64 (finite values past its range)."""
    assert Policy().precision == "float64"
    run_id = new_run(sessions)
    steps = np.arange(len(NAMED), dtype=np.int64)
    post(sessions, run_id, steps, **{METRIC: NAMED})
    compact(sessions, run_id, Policy(precision="float32"))
    with session_scope(sessions) as session:
        [full] = query.read_series(session, the_run(session, run_id), [METRIC])
    assert bits(full.values) == bits(chunks.stored_values(NAMED, "float32"))
    rounded = [16.01724, 0.33333334, 9007199000000000.0, 9007199000000000.0, 0.0, 0.0]
    assert full.values.tolist()[:6] == rounded
    # A chunk holding a finite value past float32's range is kept in float64, whole.
    run_id = new_run(sessions, name="beyond")
    beyond = np.concatenate([NAMED, EXTREMES])
    post(sessions, run_id, np.arange(len(beyond), dtype=np.int64), **{METRIC: beyond})
    compact(sessions, run_id, Policy(precision="float32"))
    with session_scope(sessions) as session:
        [full] = query.read_series(session, the_run(session, run_id), [METRIC])
    assert bits(full.values) == bits(beyond)


def test_the_setting_defaults_to_float64_and_says_float32_is_lossy(
    sessions: Sessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NORMWATCH_COMPACTION_PRECISION", raising=False)
    default = Compactor.from_settings(sessions, Settings(_env_file=None))
    assert default.policy.precision == "float64"
    monkeypatch.setenv("NORMWATCH_COMPACTION_PRECISION", "float32")
    lossy = Compactor.from_settings(sessions, Settings(_env_file=None))
    assert lossy.policy.precision == "float32"
    described = Settings.model_fields["compaction_precision"].description or ""
    assert "lossless" in described and "LOSSY" in described
    monkeypatch.setenv("NORMWATCH_COMPACTION_PRECISION", "float16")
    with pytest.raises(ValidationError, match="compaction_precision"):
        Settings(_env_file=None)
