"""Attribution on committed runs, hot and compacted: shares at sampled steps equal the shares
of the values posted there, stack to one, and steps whose parts do not add up are flagged."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.errors import Invalid, UnknownMetrics
from normwatch.server.services.attribution import attribution
from tests.helpers.committed import Sessions, compact, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_database

LAYERS = 48


@pytest.fixture(scope="module", params=BACKENDS)
def own_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database of this module's own on each backend: the session's servers compact the
    runs of theirs in the background, and the hot cases must read points exactly as they
    were posted."""
    with own_database(request.param, "attribution", tmp_path_factory) as url:
        yield url


@pytest.fixture
def sessions(own_db_url: str) -> Iterator[Sessions]:
    engine = build_engine(own_db_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def parts_at(steps: np.ndarray) -> dict[str, np.ndarray]:
    """Per-layer grad norms whose lm_head grows from a quarter to most of the total."""
    t = steps / 20_000
    parts = {"grad/norm/embed": 0.07 + 0 * t, "grad/norm/lm_head": 0.1 + 0.4 * t}
    for i in range(LAYERS):
        parts[f"grad/norm/layers.{i}"] = 0.02 + 0.0005 * i + 0 * t
    return parts


def logged_run(sessions: Sessions, wrong_from: int | None = None) -> str:
    """20,000 steps: the total every step, the parts every 10th; from ``wrong_from`` on the
    total is 1.2 times the root-sum-square of the parts."""
    run_id = new_run(sessions)
    for lo in range(0, 20_000, 5000):
        steps = np.arange(lo, lo + 5000)
        every = steps[steps % 10 == 0]
        parts = parts_at(every)
        total = np.sqrt(sum(np.square(v) for v in parts.values()))
        total_all = np.interp(steps, every, total)
        if wrong_from is not None:
            total_all = np.where(steps >= wrong_from, 1.2 * total_all, total_all)
        post(sessions, run_id, steps, **{"grad/norm/total": total_all})
        post(sessions, run_id, every, **parts)
    return run_id


def shares_of(sessions: Sessions, run_id: str, **kw: object):  # type: ignore[no-untyped-def]
    with session_scope(sessions) as session:
        return attribution(session, the_run(session, run_id), "grad/norm", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("compacted", [False, True], ids=["hot", "compacted"])
def test_group_shares_stack_to_one_at_sampled_steps(sessions: Sessions, compacted: bool) -> None:
    run_id = logged_run(sessions)
    if compacted:
        compact(sessions, run_id)
    got = shares_of(sessions, run_id, points=100)
    assert got.groups == ["embedding", "blocks", "head"]
    assert len(got.steps) == 100 and all(step % 10 == 0 for step in got.steps)
    assert got.steps[0] == 0 and got.steps == sorted(got.steps)
    assert got.mismatched == []
    steps = np.array(got.steps)
    parts = parts_at(steps)
    total2 = sum(np.square(v) for v in parts.values())
    head = np.square(parts["grad/norm/lm_head"]) / total2
    # Compaction is lossless: the shares are those of the logged values, compacted or not.
    np.testing.assert_allclose(got.shares[2], head, rtol=1e-12)
    np.testing.assert_allclose(got.sum, 1.0, rtol=1e-12)
    assert got.shares[2][0] < 0.2 and got.shares[2][-1] > 0.8


def test_steps_whose_parts_do_not_make_the_total_are_flagged(sessions: Sessions) -> None:
    run_id = logged_run(sessions, wrong_from=15_000)
    got = shares_of(sessions, run_id, points=2000)
    assert len(got.steps) == 2000  # every shared step: fewer than the columns asked for
    assert got.mismatched == [s for s in got.steps if s >= 15_000]
    assert got.sum[-1] == pytest.approx(1 / 1.44, rel=1e-12)


def test_by_part_and_bad_arguments(sessions: Sessions) -> None:
    run_id = logged_run(sessions)
    got = shares_of(sessions, run_id, points=10, by="part", start=1000, end=1999)
    assert got.groups[0] == "embed" and got.groups[-1] == "lm_head" and len(got.groups) == 50
    assert got.steps == list(range(1000, 2000, 100))
    with pytest.raises(Invalid, match="by must be"):
        shares_of(sessions, run_id, by="layer")
    # A family the run never logged is refused with the closest one it has.
    with pytest.raises(UnknownMetrics) as refused:
        shares_of(sessions, new_run(sessions, name="empty"))
    assert refused.value.unknown == ["grad/norm"] and refused.value.what == "prefix"


def test_a_total_whose_buckets_miss_the_parts_is_read_whole(sessions: Sessions) -> None:
    """Parts from step 0, the total from step 3, all compacted: no bucket of the total
    starts where a part's does, so its points are read one by one and every column still
    gets a step."""
    run_id = new_run(sessions)
    steps = np.arange(0, 20_000)
    parts = parts_at(steps)
    total = np.sqrt(sum(np.square(v) for v in parts.values()))
    post(sessions, run_id, steps, **parts)
    post(sessions, run_id, steps[3:], **{"grad/norm/total": total[3:]})
    compact(sessions, run_id)
    got = shares_of(sessions, run_id, points=50)
    assert len(got.steps) == 50 and got.mismatched == []
    np.testing.assert_allclose(got.sum, 1.0, rtol=1e-6)
