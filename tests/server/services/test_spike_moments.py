"""Adam's moments at each spike: the first moment's peak over its level before the spike, and
the second's, against NumPy on the stored points, on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.db import session_scope
from normwatch.server.services import kept
from normwatch.server.services.analytics import spike_report
from tests.helpers.committed import Sessions, new_run, post, stored, the_run
from tests.helpers.databases import BACKENDS, own_sessions

UPDATES, MU, NU = "updates/norm/total", "optim/mu/norm/total", "optim/nu/norm/total"
SPIKES = (1500, 3200)


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "moments", tmp_path_factory) as made:
        yield made


def momentum_run(sessions: Sessions, *, moments: bool = True) -> str:
    """Update-norm spikes where the first moment doubles and the second stays flat."""
    run = new_run(sessions)
    steps = np.arange(0, 4000)
    rng = np.random.default_rng(11)
    updates = 1.0 + 0.01 * rng.standard_normal(len(steps))
    mu = 0.5 + 0.005 * rng.standard_normal(len(steps))
    nu = 0.02 * (1 + 0.01 * rng.standard_normal(len(steps)))
    for at in SPIKES:
        updates[at : at + 6] *= 2.0
        mu[at : at + 6] *= np.array([1.4, 1.8, 2.0, 1.9, 1.5, 1.2])
    metrics = {UPDATES: updates}
    if moments:
        metrics |= {MU: mu, NU: nu}
    post(sessions, run, steps, **metrics)
    return run


def reference(sessions: Sessions, run_id: str, name: str, start: int, end: int) -> float:
    steps, values = stored(sessions, run_id, name)
    before = values[(steps < start) & (steps >= start - 4096)][-32:]
    during = values[(steps >= start) & (steps <= end)]
    return float(during.max() / np.median(before))


def test_each_spike_says_how_far_each_moment_rose(sessions: Sessions) -> None:
    run_id = momentum_run(sessions)
    kept.forget()
    for _ in range(2):  # found, then kept
        with session_scope(sessions) as session:
            report = spike_report(session, the_run(session, run_id), [UPDATES])
        assert [s["start"] for s in report.spikes] == list(SPIKES)
        for spike in report.spikes:
            start, end = int(spike["start"]), int(spike["end"])  # type: ignore[call-overload]
            moments = spike["moments"]
            assert isinstance(moments, dict)
            assert moments[MU] == pytest.approx(reference(sessions, run_id, MU, start, end))
            assert moments[MU] == pytest.approx(2.0, rel=0.03)  # momentum: the first doubled
            assert moments[NU] == pytest.approx(reference(sessions, run_id, NU, start, end))
            assert moments[NU] == pytest.approx(1.0, abs=0.05)  # the second stayed flat


def test_a_run_without_moments_lists_none(sessions: Sessions) -> None:
    run_id = momentum_run(sessions, moments=False)
    with session_scope(sessions) as session:
        report = spike_report(session, the_run(session, run_id), [UPDATES], start=1400, end=1600)
    assert [s["moments"] for s in report.spikes] == [{}]
