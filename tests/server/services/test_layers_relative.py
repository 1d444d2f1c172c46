"""The depth profile relative to each layer's baseline: at an update-norm spike that is
larger on the lower layers, ``relative_to=baseline`` reads each layer's factor over its own
level before the spike (the median of its last 32 logged values), hot and compacted, on
both backends; bad parameters are refused with the reason."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.db import session_scope
from normwatch.server.errors import Invalid
from normwatch.server.services.layers import layer_grid
from tests.helpers.committed import Sessions, compact, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions

LAYERS = ["embed", "layers.0", "layers.1", "layers.2", "lm_head"]
FACTORS = [3.0, 2.5, 2.0, 1.6, 1.2]
LEVELS = [0.5, 0.2, 0.21, 0.22, 0.8]
SPIKE = 1000


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "relative", tmp_path_factory) as made:
        yield made


def logged_run(sessions: Sessions) -> str:
    """Per-layer update norms every 2 steps at their level with 1 % noise; from step 1000
    to 1010 each layer is its factor times its level."""
    run = new_run(sessions)
    steps = np.arange(0, 2000, 2)
    rng = np.random.default_rng(3)
    metrics = {}
    for name, level, factor in zip(LAYERS, LEVELS, FACTORS, strict=True):
        values = level * (1 + 0.01 * rng.normal(size=len(steps)))
        inside = (steps >= SPIKE) & (steps <= SPIKE + 10)
        values[inside] = factor * level
        metrics[f"updates/norm/{name}"] = values
    post(sessions, run, steps, **metrics)
    return run


@pytest.mark.parametrize("compacted", [False, True])
def test_the_profile_over_each_layers_baseline(sessions: Sessions, compacted: bool) -> None:
    run_id = logged_run(sessions)
    if compacted:
        compact(sessions, run_id)
    with session_scope(sessions) as session:
        grid = layer_grid(
            session,
            the_run(session, run_id),
            "updates/norm",
            at=SPIKE + 4,
            relative_to="baseline",
            baseline_end=SPIKE,
        )
    profile = grid.profile
    assert profile is not None and profile.relative_to == "baseline"
    assert grid.layers == LAYERS
    np.testing.assert_allclose(profile.values, FACTORS, rtol=0.02)
    np.testing.assert_allclose(profile.baselines, LEVELS, rtol=0.01)
    # Without it, the absolute values: the head (0.96) looks no different from the rest.
    with session_scope(sessions) as session:
        plain = layer_grid(session, the_run(session, run_id), "updates/norm", at=SPIKE + 4)
    assert plain.profile is not None and plain.profile.relative_to is None
    np.testing.assert_allclose(plain.profile.values, np.multiply(FACTORS, LEVELS), rtol=1e-6)


def test_bad_relative_parameters_are_refused(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        with pytest.raises(Invalid, match="relative_to must be 'baseline'"):
            layer_grid(session, run, "updates/norm", at=5, relative_to="peak")
        with pytest.raises(Invalid, match="relative_to needs at"):
            layer_grid(session, run, "updates/norm", relative_to="baseline")
        with pytest.raises(Invalid, match="baseline_end"):
            layer_grid(session, run, "updates/norm", at=5, relative_to="baseline", baseline_end=9)
