"""A million steps of twenty metrics exported through a real server on each backend: the
export streams (the server's resident memory grows by less than 100 MB while it sends the
20M points), and every row arrives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from normwatch.server.auth import create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.services import ingest, runs
from normwatch.server.storage import schedule
from normwatch.server.storage.policy import Policy
from normwatch.testing import ServerProcess, running_server
from tests.helpers.committed import new_run
from tests.helpers.databases import BACKENDS, own_database

STEPS, METRICS = 1_000_000, 20
BATCH_STEPS = 100_000
LIMIT = 100 * 2**20


def resident(pid: int) -> int:
    """Resident bytes of ``pid`` (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(params=BACKENDS)
def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, str, str]]:
    """A server of its own on a database holding one run of 1M steps x 20 metrics, most of
    it compacted (the last batch hot), and the run's id and a read token."""
    with own_database(request.param, "export-memory", tmp_path_factory) as url:
        engine = build_engine(url, pool_size=2)
        sessions = session_factory(engine)
        run_id = new_run(sessions, name="long")
        rng = np.random.default_rng(0)
        for lo in range(0, STEPS, BATCH_STEPS):
            steps = np.arange(lo, lo + BATCH_STEPS)
            doc = {
                "steps": steps.tolist(),
                "metrics": {
                    f"m{i}": (1.0 + rng.random(BATCH_STEPS)).tolist() for i in range(METRICS)
                },
            }
            with session_scope(sessions) as session:
                batch = parse_batch(doc, max_points=BATCH_STEPS * METRICS)
                ingest.ingest_batch(session, run_id, batch)
            if lo + BATCH_STEPS == STEPS - BATCH_STEPS:
                schedule.compact_everything(sessions, Policy())
        with session_scope(sessions) as session:
            found = runs.get_run(session, run_id)
            assert found is not None
            token, _ = create_token(session, found[1], "read")
        engine.dispose()
        # Its compactor off: what is measured is the export, not a compaction beside it.
        log_dir = tmp_path_factory.mktemp("export-memory")
        with running_server(url, log_dir, NORMWATCH_COMPACTION="false") as server:
            yield server, run_id, token


@pytest.mark.slow
def test_a_million_steps_of_twenty_metrics_stream_in_bounded_memory(
    loaded: tuple[ServerProcess, str, str],
) -> None:
    server, run_id, token = loaded
    pid = server.process.pid
    before = resident(pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, resident(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rows = 0
    last = ""
    try:
        with (
            httpx.Client(base_url=server.url, timeout=600) as client,
            client.stream(
                "GET",
                f"/api/v1/runs/{run_id}/export",
                params={"metric": [f"m{i}" for i in range(METRICS)]},
                headers={"Authorization": f"Bearer {token}"},
            ) as r,
        ):
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                rows += 1
                last = line
    finally:
        done.set()
        sampler.join()
    assert rows == STEPS + 1  # the header and a row a step
    assert last.startswith(f"{STEPS - 1},") and last.count(",") == METRICS
    assert peak - before < LIMIT, f"grew by {(peak - before) / 2**20:.0f} MiB"
