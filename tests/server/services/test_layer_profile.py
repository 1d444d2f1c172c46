"""The depth profile alone (`layer_profile`) is the profile the layer grid gives with ``at``:
the same logged steps and values, hot and compacted, on both backends, without the grid."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.db import session_scope
from normwatch.server.errors import Invalid, UnknownMetrics
from normwatch.server.services.layers import layer_grid, layer_profile
from tests.helpers.committed import Sessions, compact, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions

LAYERS = ["embed", "layers.0", "layers.1", "layers.1.mlp", "layers.2", "lm_head"]


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "profile", tmp_path_factory) as made:
        yield made


def logged_run(sessions: Sessions) -> str:
    """Grad norms of six parts every 2 steps to 5,000; ``layers.1`` every 10th step only."""
    run = new_run(sessions)
    steps = np.arange(0, 5000, 2)
    rng = np.random.default_rng(5)
    metrics = {f"grad/norm/{n}": 0.1 + rng.random(len(steps)) for n in LAYERS if n != "layers.1"}
    post(sessions, run, steps, **metrics)
    tenth = steps[steps % 10 == 0]
    post(sessions, run, tenth, **{"grad/norm/layers.1": 0.1 + rng.random(len(tenth))})
    return run


@pytest.mark.parametrize("compacted", [False, True], ids=["hot", "compacted"])
def test_the_profile_alone_is_the_grids_profile(sessions: Sessions, compacted: bool) -> None:
    run_id = logged_run(sessions)
    if compacted:
        compact(sessions, run_id)
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        for at, radius in [(0, 1), (1001, 1), (1001, 3), (2500, 0), (4998, 10), (7000, 5)]:
            # The grid's profile looks as far as a column is wide: 2r + 1 steps for one column.
            r = (radius - 1) // 2
            wide = radius % 2 == 1
            alone = layer_profile(session, run, "grad/norm", at=at, radius=radius)
            if wide:
                grid = layer_grid(
                    session, run, "grad/norm", start=at - r, end=at + r, points=1, at=at
                )
                assert alone.profile == grid.profile
                assert alone.layers == grid.layers
            assert alone.layers == ["embed", "layers.0", "layers.1", "layers.2", "lm_head"]
            assert alone.steps == [] and alone.values == [[]] * 5
            assert alone.profile is not None and alone.profile.step == at
        # The earlier of two steps as near; layers.1 has no step within 1 of 1,005.
        near = layer_profile(session, run, "grad/norm", at=1005, radius=1).profile
        assert near is not None and near.steps == [1004, 1004, None, 1004, 1004]
        assert near.values[2] is None
        # A family the run never logged is refused, with the closest one it has.
        with pytest.raises(UnknownMetrics) as refused:
            layer_profile(session, run, "params/norm", at=10, radius=5)
        assert refused.value.suggestions == {"params/norm": ["grad/norm"]}


def test_a_negative_radius_is_refused(sessions: Sessions) -> None:
    run_id = logged_run(sessions)
    with session_scope(sessions) as session:
        with pytest.raises(Invalid, match="radius must not be negative"):
            layer_profile(session, the_run(session, run_id), "grad/norm", at=10, radius=-1)


def test_the_profile_over_each_layers_baseline(sessions: Sessions) -> None:
    """``relative_to="baseline"``: each layer's value at the step over the median of its
    values before ``baseline_end``, as the grid gives it, and as NumPy finds it."""
    run_id = logged_run(sessions)
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        alone = layer_profile(
            session, run, "grad/norm", at=3001, radius=1, relative_to="baseline", baseline_end=2990
        )
        grid = layer_grid(
            session,
            run,
            "grad/norm",
            start=3001,
            end=3001,
            points=1,
            at=3001,
            relative_to="baseline",
            baseline_end=2990,
        )
        assert alone.profile == grid.profile
        absolute = layer_profile(session, run, "grad/norm", at=3001, radius=1).profile
    assert alone.profile is not None and absolute is not None
    assert alone.profile.relative_to == "baseline" and alone.profile.baselines is not None
    for value, base, raw in zip(
        alone.profile.values, alone.profile.baselines, absolute.values, strict=True
    ):
        if raw is None:
            assert value is None
        else:
            assert base is not None and value == pytest.approx(raw / base, rel=1e-6)


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ({"relative_to": "start"}, "relative_to must be 'baseline'"),
        ({"relative_to": "baseline", "baseline_end": 20}, "must not be after at"),
    ],
)
def test_a_relative_profile_is_asked_properly(
    sessions: Sessions, asked: dict[str, object], message: str
) -> None:
    run_id = logged_run(sessions)
    with session_scope(sessions) as session:
        with pytest.raises(Invalid, match=message):
            layer_profile(session, the_run(session, run_id), "grad/norm", at=10, radius=1, **asked)  # type: ignore[arg-type]
