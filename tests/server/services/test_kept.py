"""Answers kept per run version: asked again, the layer grid, the depth profile, the
attribution and the transitions are the kept ones; a batch, a compaction or an event makes
them be read anew, and what is read then is what a fresh read gives."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.db import session_scope
from normwatch.server.schemas import EventCreate
from normwatch.server.services import ingest, kept
from normwatch.server.services.attribution import attribution
from normwatch.server.services.layers import layer_grid, layer_profile
from normwatch.server.services.transitions import run_transitions
from tests.helpers.committed import Sessions, compact, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions

PARTS = ["embed", "layers.0", "layers.1", "lm_head"]


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "kept", tmp_path_factory) as made:
        yield made


def log(sessions: Sessions, run_id: str, lo: int, hi: int, slope: float) -> None:
    steps = np.arange(lo, hi)
    parts = {f"grad/norm/{p}": 0.1 + 0.01 * i + slope * steps for i, p in enumerate(PARTS)}
    total = np.sqrt(sum(np.square(v) for v in parts.values()))
    post(sessions, run_id, steps, **parts, **{"grad/norm/total": total})


def answers(sessions: Sessions, run_id: str) -> dict[str, object]:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        return {
            "grid": layer_grid(session, run, "grad/norm", points=50),
            "profile": layer_profile(session, run, "grad/norm", at=10_000, radius=10),
            "shares": attribution(session, run, "grad/norm", points=50),
            "transitions": run_transitions(session, run, ["grad/norm/total"]),
        }


def test_answers_are_kept_until_the_run_changes(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    log(sessions, run_id, 0, 2000, 1e-5)
    first = answers(sessions, run_id)
    again = answers(sessions, run_id)
    assert all(again[k] is first[k] for k in first)  # the very same objects: kept

    def fresh() -> dict[str, object]:
        kept.forget()
        return answers(sessions, run_id)

    # A batch: the grid reaches its steps, the profile finds step 10,000.
    log(sessions, run_id, 2000, 10_001, 4e-5)
    after = answers(sessions, run_id)
    assert after == fresh()
    assert after["grid"].steps[-1] > first["grid"].steps[-1]  # type: ignore[attr-defined]
    assert after["profile"].profile.steps == [10_000] * 4  # type: ignore[attr-defined]
    assert first["profile"].profile.steps == [None] * 4  # type: ignore[attr-defined]
    # A compaction and an event: each read anew.
    compact(sessions, run_id)
    compacted = answers(sessions, run_id)
    assert compacted == fresh()
    with session_scope(sessions) as session:
        ingest.add_event(session, the_run(session, run_id), EventCreate(step=5000, text="lr"))
    found = answers(sessions, run_id)["transitions"]
    assert [t.step for t in found.transitions if t.source == "event"] == [5000]  # type: ignore[attr-defined]
    assert found == fresh()["transitions"]
