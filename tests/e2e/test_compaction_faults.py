"""Compaction killed with SIGKILL mid-way, and compactors racing: nothing lost or doubled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, runs
from normwatch.server.storage import compaction, pyramid
from normwatch.server.storage.metric_ids import metric_ids_by_name
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of
from tests.helpers.databases import migrated_sqlite, scratch_pg

METRICS = 24
STEPS = 6000
POLICY = dict(
    chunk_points=256, precision="float64", metrics_per_transaction=2, points_per_transaction=512
)

COMPACTOR = """
import sys, time
from normwatch.server.db import build_engine, session_factory
from normwatch.server.storage import compaction
from normwatch.server.storage.policy import Policy
engine = build_engine(sys.argv[1], pool_size=1)
sessions = session_factory(engine)
policy = Policy(
    chunk_points=256, precision="float64", metrics_per_transaction=2, points_per_transaction=512
)
stop_in = int(sys.argv[3])
if stop_in:
    # Freeze inside the n-th group's transaction: its hot rows are deleted, nothing written.
    load = compaction.load_rollups
    calls = []
    def frozen(*args, **kwargs):
        calls.append(1)
        if len(calls) == stop_in:
            print("inside", flush=True)
            time.sleep(600)
        return load(*args, **kwargs)
    compaction.load_rollups = frozen
print("compacting", flush=True)
compaction.compact_run(sessions, policy, int(sys.argv[2]), 1, 2**62)
print("done", flush=True)
"""


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgresql":
        with scratch_pg("kill") as pg:
            yield pg
    else:
        yield migrated_sqlite(tmp_path / "kill.db")


def load(url: str) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(11)
    steps = np.arange(STEPS, dtype=np.int64)
    data = {f"layer{i}/grad": rng.normal(size=STEPS) for i in range(METRICS)}
    data["layer0/grad"][[5, 6, 7]] = [np.nan, np.inf, -np.inf]
    engine = build_engine(url, pool_size=1)
    sessions = session_factory(engine)
    try:
        with session_scope(sessions) as session:
            from normwatch.server.auth import authenticate, create_token

            who = authenticate(session, create_token(session, "kill", "admin")[0])
            assert who is not None
            run_id = runs.create_or_resume(session, who, RunCreate(name="k")).id
        for lo in range(0, STEPS, 2000):
            body = {
                "steps": steps[lo : lo + 2000].tolist(),
                "metrics": {
                    k: [
                        "NaN"
                        if np.isnan(x)
                        else ("Infinity" if x == np.inf else ("-Infinity" if x == -np.inf else x))
                        for x in v[lo : lo + 2000].tolist()
                    ]
                    for k, v in data.items()
                },
            }
            with session_scope(sessions) as session:
                ingest.ingest_batch(session, run_id, parse_batch(body, max_points=10**7))
        with session_scope(sessions) as session:
            found = runs.get_run(session, run_id)
            assert found is not None
            return found[0].key, data, steps
    finally:
        engine.dispose()


def counts(url: str, run_key: int) -> tuple[int, int]:
    engine = build_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            hot = conn.execute(
                text("SELECT coalesce(sum(count), 0) FROM blocks WHERE run_key = :k"),
                {"k": run_key},
            ).scalar_one()
            done = conn.execute(
                text("SELECT coalesce(sum(points), 0) FROM series WHERE run_key = :k"),
                {"k": run_key},
            ).scalar_one()
            return int(hot), int(done)
    finally:
        engine.dispose()


def check_everything_once(
    url: str, run_key: int, data: dict[str, np.ndarray], steps: np.ndarray
) -> None:
    engine = build_engine(url, pool_size=1)
    sessions = session_factory(engine)
    try:
        with session_scope(sessions) as session:
            lineage = lineage_of(segments_of(session, run_key))
            ids = metric_ids_by_name(session, run_key, list(data))
            for name, values in data.items():
                pts = pyramid.read_all(session, run_key, ids[name], lineage, None, None)
                assert np.array_equal(pts.steps, steps), name
                assert np.array_equal(pts.values, values, equal_nan=True), name
    finally:
        engine.dispose()


def test_sigkill_during_compaction_loses_and_duplicates_nothing(url: str) -> None:
    run_key, data, steps = load(url)
    total = METRICS * STEPS
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for stop_in in (3, 2, 4):  # killed inside a transaction, after others committed
        proc = subprocess.Popen(
            [sys.executable, "-c", COMPACTOR, url, str(run_key), str(stop_in)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "compacting"
        assert proc.stdout.readline().strip() == "inside"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
        proc.stdout.close()
        hot, done = counts(url, run_key)
        assert hot + done == total  # each point hot or compacted, exactly once
    hot, done = counts(url, run_key)
    assert 0 < done < total
    check_everything_once(url, run_key, data, steps)  # half hot, half compacted
    engine = build_engine(url, pool_size=2)
    try:
        compaction.compact_run(session_factory(engine), Policy(**POLICY), run_key, 1, 2**62)  # type: ignore[arg-type]
    finally:
        engine.dispose()
    assert counts(url, run_key) == (0, total)
    check_everything_once(url, run_key, data, steps)


def test_racing_compactors_share_the_work(url: str) -> None:
    run_key, data, steps = load(url)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", COMPACTOR, url, str(run_key), "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert out.split() == ["compacting", "done"]
    assert counts(url, run_key) == (0, METRICS * STEPS)
    check_everything_once(url, run_key, data, steps)
