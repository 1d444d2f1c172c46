"""The client's promise under real faults: every point logged arrives exactly once.

Real parts only: ``normwatch serve`` processes, a Postgres database of this module's own
(so that cutting it off cannot disturb other tests), the real client, trainers run as
subprocesses, and ``normwatch sync`` as a subprocess. What arrived is read straight from
the ``points`` table: the exact value of every (metric, step), and that it all landed in
segment 1 (a replay must never open a segment of its own).

The server stores a point once per (run, segment, step, metric); the client sends every
point at least once. Together: exactly once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import make_url

from normwatch.client import Run
from normwatch.scratch import admin_dsn
from normwatch.testing import ServerProcess, free_port, start_server
from tests.helpers.databases import base_url, scratch_pg
from tests.helpers.points import EXACT, assert_same, stored_once
from tests.helpers.series import TRAINER_METRICS, trainer_points, trainer_value
from tests.helpers.tenants import Tenant, make_tenant


@pytest.fixture(scope="module")
def fault_db() -> Iterator[str]:
    """A migrated database for this module alone: its outages harm no other test."""
    with scratch_pg("faults") as url:
        yield url


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Servers a test starts, all stopped at its end."""
    started: list[ServerProcess] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(10)


def run_row(database_url: str, project: str, name: str) -> tuple[str, int, int]:
    """(status, segment, number of events) of the run."""
    with psycopg.connect(admin_dsn(database_url)) as conn:
        row = conn.execute(
            "SELECT r.status, r.segment, (SELECT count(*) FROM events e WHERE e.run_key = r.key) "
            "FROM runs r JOIN projects j ON j.id = r.project_id "
            "WHERE j.name = %s AND r.name = %s",
            (project, name),
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def log_steps(run: Run, steps: range, *, per_second: float) -> None:
    started = time.monotonic()
    for n, step in enumerate(steps):
        run.log({f"m/{i}": trainer_value(step, i) for i in range(TRAINER_METRICS)}, step=step)
        delay = started + (n + 1) / per_second - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


TRAINER = textwrap.dedent(
    """
    import sys, time
    from normwatch.client import Run

    url, token, project, name, spool, first, then = sys.argv[1:8]
    run = Run(url, token=token, project=project, name=name, spool_dir=spool,
              flush_interval=0.05, max_batch_points=400, timeout=2.0)
    def log(step):
        run.log({f"m/{i}": step * 0.001 + i for i in range({metrics})}, step=step)
    for step in range(int(first)):
        log(step)
    run.event("first phase logged", step=int(first) - 1, kind="note")
    print("logged", int(first), flush=True)
    if then == "finish":
        run.finish(timeout=1.0)
        print("finished", run.pending_points, flush=True)
        sys.exit(0)
    step = int(first)
    while True:  # the second phase runs until the test kills this process
        log(step)
        print("step", step, flush=True)
        step += 1
        time.sleep(0.002)
    """
).replace("{metrics}", str(TRAINER_METRICS))


def start_trainer(
    tmp_path: Path, url: str, tenant: Tenant, name: str, first: int, then: str
) -> subprocess.Popen[str]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    arguments = [url, tenant.ingest, tenant.project, name, str(tmp_path / "spool"), str(first)]
    return subprocess.Popen(
        [sys.executable, str(script), *arguments, then],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def sync(spool: Path, tenant: Tenant, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "normwatch", "sync", str(spool), "--token", tenant.ingest, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_server_killed_and_restarted_mid_run(
    fault_db: str, servers: list[ServerProcess], tmp_path: Path
) -> None:
    server = start_server(fault_db, tmp_path, **EXACT)
    servers.append(server)
    port = httpx.URL(server.url).port
    assert port is not None
    tenant = make_tenant(fault_db)
    run = Run(
        server.url,
        token=tenant.ingest,
        project=tenant.project,
        name="server-killed",
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
        max_batch_points=400,
    )
    log_steps(run, range(0, 600), per_second=2000)
    server.process.send_signal(signal.SIGKILL)  # while batches are in flight
    server.process.wait(10)
    log_steps(run, range(600, 1200), per_second=2000)
    time.sleep(0.5)  # let the client meet the dead server
    servers.append(start_server(fault_db, tmp_path, port=port, **EXACT))
    log_steps(run, range(1200, 1800), per_second=2000)
    run.finish(timeout=60)

    assert (run.pending_points, run.dropped_points) == (0, 0)
    assert run.sent_points == 1800 * TRAINER_METRICS
    assert_same(stored_once(fault_db, tenant.project, "server-killed"), trainer_points(range(1800)))
    assert run_row(fault_db, tenant.project, "server-killed")[:2] == ("finished", 1)
    assert list((tmp_path / "spool").iterdir()) == [], "all delivered: nothing left in the spool"


def test_database_outage_answers_503_and_loses_nothing(
    fault_db: str, servers: list[ServerProcess], tmp_path: Path
) -> None:
    server = start_server(fault_db, tmp_path, **EXACT)
    servers.append(server)
    tenant = make_tenant(fault_db)
    database = make_url(fault_db).database
    run = Run(
        server.url,
        token=tenant.ingest,
        project=tenant.project,
        name="database-outage",
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
        max_batch_points=400,
    )
    log_steps(run, range(0, 600), per_second=2000)
    wait_until(lambda: run.run_id is not None, 10)
    with psycopg.connect(admin_dsn(base_url()), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )
            log_steps(run, range(600, 1200), per_second=2000)
            probe = httpx.post(
                f"{server.url}/api/v1/runs/{run.run_id}/metrics",
                json={"steps": [0], "metrics": {"probe": [1.0]}},
                headers=tenant.headers("ingest"),
                timeout=10,
            )
            assert probe.status_code == 503 and probe.headers["retry-after"].isdigit()
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 503
            outage_pending = run.pending_points
            time.sleep(1.0)  # the client keeps retrying while the database is away
        finally:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    assert outage_pending > 0, "the outage must have held data back"
    log_steps(run, range(1200, 1800), per_second=2000)
    run.finish(timeout=60)

    assert (run.pending_points, run.dropped_points) == (0, 0)
    assert_same(
        stored_once(fault_db, tenant.project, "database-outage"), trainer_points(range(1800))
    )
    assert "database unavailable" in server.log()


def test_server_down_for_the_whole_run_then_sync(
    fault_db: str, servers: list[ServerProcess], tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tenant = make_tenant(fault_db)
    spool = tmp_path / "spool"
    trainer = start_trainer(tmp_path, url, tenant, "server-down", 1500, "finish")
    out, err = trainer.communicate(timeout=60)
    assert trainer.returncode == 0, err
    assert out.splitlines() == ["logged 1500", f"finished {1500 * TRAINER_METRICS}"]
    chunks = {path: path.read_bytes() for path in spool.rglob("*") if path.is_file()}
    assert any(path.suffix == ".nws" for path in chunks)

    refused = sync(spool, tenant, "--retry-for", "1")
    assert refused.returncode == 1
    assert f"the server at {url} did not take the data" in refused.stderr
    assert {p: p.read_bytes() for p in spool.rglob("*") if p.is_file()} == chunks

    servers.append(start_server(fault_db, tmp_path, port=port, **EXACT))
    synced = sync(spool, tenant)
    assert synced.returncode == 0, synced.stderr
    assert f"{1500 * TRAINER_METRICS} points replayed; 0 dead-lettered" in synced.stdout

    assert_same(stored_once(fault_db, tenant.project, "server-down"), trainer_points(range(1500)))
    assert run_row(fault_db, tenant.project, "server-down") == ("finished", 1, 1)
    assert list(spool.iterdir()) == []


@pytest.mark.parametrize("server_up", [False, True], ids=["server-down", "server-up"])
def test_trainer_killed_mid_run_then_sync(
    fault_db: str, servers: list[ServerProcess], tmp_path: Path, server_up: bool
) -> None:
    """What is guaranteed: every point whose ``log()`` returned more than one flush interval
    (plus one spool write) before the SIGKILL. The trainer logs a first phase, reports it,
    and is killed half a second later (ten flush intervals) while it logs a second phase.
    The first phase must arrive whole; of the second, what arrives is a prefix of what was
    logged (the spool is written in order; a record torn by the kill is skipped whole);
    every point arrives once."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if server_up:
        servers.append(start_server(fault_db, tmp_path, port=port, **EXACT))
    tenant = make_tenant(fault_db)
    name = f"trainer-killed-{server_up}"
    trainer = start_trainer(tmp_path, url, tenant, name, 1000, "continue")
    assert trainer.stdout is not None
    assert trainer.stdout.readline() == "logged 1000\n"
    time.sleep(0.5)
    trainer.send_signal(signal.SIGKILL)
    out, _ = trainer.communicate(timeout=10)
    # The kill can tear the last line (print writes its pieces separately), so only whole lines
    # count; the step after the last whole line may have been logged without being reported.
    whole = [line.split() for line in out.splitlines(keepends=True) if line.endswith("\n")]
    logged_up_to = max([999] + [int(fields[1]) for fields in whole if len(fields) == 2]) + 1
    assert logged_up_to > 1000, "the kill should land in the second phase"

    if not server_up:
        servers.append(start_server(fault_db, tmp_path, port=port, **EXACT))
    synced = sync(tmp_path / "spool", tenant)
    assert synced.returncode == 0, synced.stderr

    points = stored_once(fault_db, tenant.project, name)
    steps = sorted({step for _, step in points})
    assert steps == list(range(len(steps))), "what arrived is a prefix of what was logged"
    assert 1000 <= len(steps) <= logged_up_to + 1
    assert points == trainer_points(range(len(steps)))
    status, segment, events = run_row(fault_db, tenant.project, name)
    assert (status, segment, events) == ("running", 1, 1), "a killed trainer marks nothing"
