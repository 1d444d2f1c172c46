"""Long outages under a live trainer: the database stopped past every timeout, the spool's
disk full.

Real parts only: a PostgreSQL cluster of the test's own (initdb, pg_ctl), ``normwatch serve``
processes, the real client in this process or in a trainer subprocess, and a real full
filesystem (a small tmpfs; where mounting is not permitted, a file size limit that makes
the kernel refuse the write instead). What arrived is read straight from the tables, hot
blocks and compacted chunks alike, each (metric, step) exactly once.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import make_url

from normwatch.client import Run
from normwatch.scratch import admin_dsn
from normwatch.server.config import Settings
from normwatch.server.db import build_engine
from normwatch.server.migrate import upgrade
from normwatch.testing import ServerProcess, free_port, start_server
from tests.helpers.databases import scratch_pg
from tests.helpers.points import EXACT, assert_same, stored_once
from tests.helpers.series import TRAINER_METRICS, trainer_points, trainer_value
from tests.helpers.tenants import make_tenant

CLIENT_TIMEOUT_S = 10.0
IDLE_COMPACTION_S = 10.0
"""A run quiet this long is compacted: the outage makes the test's run quiet, so the
compactor meets the stopped database too, and compacts the run once it is back."""
POOL_TIMEOUT_S = Settings.model_fields["db_pool_timeout_s"].default
OUTAGE_S = 25.0
"""Twice the longest wait on either side: the client's request timeout, the server's wait
for a pooled connection (10 s by default) and the idle compaction above, so that every one
of them runs out while the database is away."""
PROMPT_S = 5.0
"""The longest any answer may take while the database is away ("no hang")."""
LOG_BOUND_S = 0.25
"""Far above what a `Run.log` call costs (microseconds; some milliseconds when the
interpreter lock is busy), far below any network or disk wait it must never make."""


def postgres_bindir() -> Path:
    """The newest installed PostgreSQL server binaries (``NORMWATCH_PG_BIN`` overrides)."""
    if configured := os.environ.get("NORMWATCH_PG_BIN"):
        return Path(configured)
    if found := shutil.which("initdb"):
        return Path(found).parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    assert candidates, "no PostgreSQL server binaries (initdb, pg_ctl); set NORMWATCH_PG_BIN"
    return candidates[-1]


@dataclass
class Cluster:
    """A PostgreSQL cluster in a folder of its own, run as the ``postgres`` user when the
    tests run as root (initdb refuses root)."""

    root: Path
    port: int
    bindir: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/normwatch"

    def run(self, program: str, *arguments: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        command = [*as_postgres, str(self.bindir / program), *arguments]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{program} failed: {done.stdout}{done.stderr}"

    def pg_ctl(self, *arguments: str) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", *arguments)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.pg_ctl("-l", str(self.log_path), "-o", options, "start")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A fresh cluster with a migrated ``normwatch`` database, stopped and removed after."""
    root = Path(tempfile.mkdtemp(prefix="normwatch-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    cluster = Cluster(root, free_port(), postgres_bindir())
    try:
        cluster.run(
            "initdb",
            "-D",
            str(cluster.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        cluster.start()
        admin = make_url(admin_dsn(cluster.url)).set(database="postgres")
        with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
            conn.execute("CREATE DATABASE normwatch")
        engine = build_engine(cluster.url, pool_size=1)
        upgrade(engine)
        engine.dispose()
        yield cluster
    finally:
        if cluster.running():
            cluster.pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class Answer:
    """One HTTP exchange as a caller saw it."""

    kind: str
    started: float
    ended: float
    status: int | None
    """None: no answer at all (a transport error, `detail` says which)."""
    retry_after: str | None
    detail: str

    @property
    def took(self) -> float:
        return self.ended - self.started


class RecordingTransport(httpx.HTTPTransport):
    """The client's real transport, noting every answer the client got."""

    def __init__(self, answers: list[Answer]) -> None:
        super().__init__()
        self.answers = answers

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        last = request.url.path.rsplit("/", 1)[-1]
        kind = "client " + {"PATCH": "update run"}.get(request.method, last)
        started = time.monotonic()
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            self.answers.append(Answer(kind, started, time.monotonic(), None, None, repr(exc)))
            raise
        detail = ""
        if response.status_code >= 300:
            detail = response.read().decode(errors="replace")[:300]
        self.answers.append(
            Answer(
                kind,
                started,
                time.monotonic(),
                response.status_code,
                response.headers.get("retry-after"),
                detail,
            )
        )
        return response


def ask(http: httpx.Client, kind: str, method: str, path: str, **kwargs: object) -> Answer:
    started = time.monotonic()
    try:
        response = http.request(method, path, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError as exc:
        return Answer(kind, started, time.monotonic(), None, None, repr(exc))
    detail = response.text[:300] if response.status_code >= 300 else ""
    return Answer(
        kind,
        started,
        time.monotonic(),
        response.status_code,
        response.headers.get("retry-after"),
        detail,
    )


@pytest.mark.slow
def test_database_stopped_past_every_timeout_under_ingest_and_reads(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert OUTAGE_S >= 2 * max(CLIENT_TIMEOUT_S, IDLE_COMPACTION_S, POOL_TIMEOUT_S)
    # float64 chunks: the points compacted after the outage (the run sat idle through it)
    # read back exactly.
    server = start_server(
        cluster.url, tmp_path, **EXACT, NORMWATCH_COMPACTION_IDLE_S=str(IDLE_COMPACTION_S)
    )
    try:
        outage_and_recovery(cluster, server, tmp_path)
    finally:
        server.stop()


def outage_and_recovery(cluster: Cluster, server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(cluster.url)
    client_answers: list[Answer] = []
    run = Run(
        server.url,
        token=tenant.ingest,
        project=tenant.project,
        name="db-stopped",
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
        max_batch_points=400,
        timeout=CLIENT_TIMEOUT_S,
        transport=RecordingTransport(client_answers),
    )
    stop = threading.Event()
    logged_steps = [0]
    log_costs: list[float] = []

    def train() -> None:
        step = 0
        while not stop.is_set():
            started = time.perf_counter()
            run.log({f"m/{i}": trainer_value(step, i) for i in range(TRAINER_METRICS)}, step=step)
            log_costs.append(time.perf_counter() - started)
            step += 1
            logged_steps[0] = step
            time.sleep(0.005)

    with httpx.Client(base_url=server.url, timeout=30) as http:
        probe_run = http.post(
            "/api/v1/runs", json={"name": "probe"}, headers=tenant.headers("ingest")
        ).json()["id"]
    answers: list[Answer] = []
    pending_seen: list[tuple[float, int]] = []

    def read_and_probe() -> None:
        probe_step = 0
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not stop.is_set():
                answers.append(ask(http, "healthz", "GET", "/healthz"))
                if run.run_id is not None:
                    answers.append(
                        ask(
                            http,
                            "series",
                            "GET",
                            f"/api/v1/runs/{run.run_id}/series",
                            params={"metric": ["m/0", "m/1"], "points": 200},
                            headers=tenant.headers("read"),
                        )
                    )
                answers.append(
                    ask(
                        http,
                        "probe ingest",
                        "POST",
                        f"/api/v1/runs/{probe_run}/metrics",
                        json={"steps": [probe_step], "metrics": {"probe": [1.0]}},
                        headers=tenant.headers("ingest"),
                    )
                )
                probe_step += 1
                pending_seen.append((time.monotonic(), run.pending_points))
                time.sleep(0.2)

    threads = [threading.Thread(target=train), threading.Thread(target=read_and_probe)]
    completed = False
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while not any(a.kind == "series" and a.status == 200 for a in answers):
            assert time.monotonic() < deadline, "no series read before the outage"
            time.sleep(0.1)
        time.sleep(2.0)

        cluster.stop()
        down = time.monotonic()
        time.sleep(OUTAGE_S)
        restarting = time.monotonic()
        cluster.start()
        up = time.monotonic()

        deadline = up + 30
        while not any(a.kind == "healthz" and a.status == 200 and a.started > up for a in answers):
            assert time.monotonic() < deadline, "the service did not recover on its own"
            time.sleep(0.1)
        recovered = time.monotonic()
        time.sleep(3.0)  # training goes on over the recovered service
        completed = True
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        if not completed:
            run.finish(timeout=2)  # the test failed: leave no sender behind it
    run.finish(timeout=60)
    steps = logged_steps[0]

    everything = answers + client_answers
    during = [a for a in everything if a.started >= down and a.ended <= restarting]
    after = [a for a in everything if a.started >= recovered]
    worst = {
        kind: max((a.took for a in during if a.kind == kind), default=0.0)
        for kind in sorted({a.kind for a in during})
    }
    statuses = {
        kind: dict(Counter(str(a.status) for a in during if a.kind == kind)) for kind in worst
    }
    outage_pending = max((p for t, p in pending_seen if down <= t <= restarting), default=0)
    report = {
        "steps logged": steps,
        "answers during the outage": len(during),
        "statuses during the outage": statuses,
        "worst latency during the outage (s)": {k: round(v, 3) for k, v in worst.items()},
        "worst run.log (ms)": round(max(log_costs) * 1000, 3),
        "most pending during the outage": outage_pending,
        "recovered after restart (s)": round(recovered - up, 3),
        "statuses after recovery": sorted({(a.kind, a.status) for a in after}, key=str),
    }
    print(json.dumps(report, indent=1))

    wrong = [a for a in during if a.status != 503 or not (a.retry_after or "").isdigit()]
    assert not wrong, (
        f"answers other than 503 with a numeric Retry-After while the database was down: "
        f"{wrong[:5]}\n--- server log ---\n{server.log()[-4000:]}"
    )
    assert {a.kind for a in during} >= {"healthz", "series", "probe ingest", "client metrics"}
    assert max(a.took for a in during) < PROMPT_S, report
    assert worst["healthz"] < 2.0, report
    assert max(log_costs) < LOG_BOUND_S, "a log() call waited on something"
    assert outage_pending > 0, "the client held the outage's points back"
    assert {a.status for a in after if a.kind == "series"} == {200}
    assert {a.status for a in after if a.kind == "probe ingest"} == {202}
    assert (run.pending_points, run.dropped_points) == (0, 0)
    assert run.sent_points == steps * TRAINER_METRICS
    assert_same(
        stored_once(cluster.url, tenant.project, "db-stopped"), trainer_points(range(steps))
    )


# --- the spool's disk full ---------------------------------------------------------------

SPOOL_MAX_BYTES = 2**20
DISK_BYTES = 256 * 1024
"""A quarter of the spool's bound: the disk fills long before the spool would."""

DISK_TRAINER = textwrap.dedent(
    """
    import json, logging, resource, signal, sys, time
    from normwatch.client import Run

    url, token, project, name, spool, steps, file_limit, spool_max = sys.argv[1:9]
    if int(file_limit):
        # The kernel refuses a write past this size (EFBIG) as a full disk refuses it
        # (ENOSPC); SIGXFSZ would end the process instead.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(file_limit), int(file_limit)))
    warnings = []

    class Keep(logging.Handler):
        def emit(self, record):
            warnings.append([record.levelname, record.getMessage()])

    logging.getLogger("normwatch.client").addHandler(Keep(logging.WARNING))
    run = Run(url, token=token, project=project, name=name, spool_dir=spool,
              flush_interval=0.05, max_batch_points=400, spool_max_bytes=int(spool_max),
              timeout=1.0)
    worst, raised = 0.0, 0
    for step in range(int(steps)):
        started = time.perf_counter()
        try:
            run.log({f"m/{i}": step * 0.001 + i for i in range({metrics})}, step=step)
        except Exception:
            raised += 1
        worst = max(worst, time.perf_counter() - started)
        if step % 100 == 99:
            time.sleep(0.002)
    time.sleep(1.0)  # the spool writer has written all of it
    print(json.dumps({"worst_log_s": worst, "raised": raised,
                      "logged": int(steps) * {metrics}, "dropped": run.dropped_points,
                      "pending": run.pending_points, "warnings": warnings}), flush=True)
    sys.stdin.readline()  # the test starts a server at url, then answers
    run.finish(timeout=60)
    print(json.dumps({"sent": run.sent_points, "pending": run.pending_points,
                      "dropped": run.dropped_points, "warnings": warnings}), flush=True)
    """
).replace("{metrics}", str(TRAINER_METRICS))


@dataclass(frozen=True)
class FullDisk:
    """A folder whose filesystem is (or, through a file size limit, behaves as) tiny."""

    path: Path
    file_limit: int
    """0 on a real small filesystem; else RLIMIT_FSIZE for the trainer."""
    error: str
    """How the kernel's refusal reads (strerror)."""


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[FullDisk]:
    path = tmp_path / "disk"
    path.mkdir()
    try:
        mount = ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(path)]
        mounted = subprocess.run(mount, capture_output=True, timeout=30).returncode == 0
    except OSError:  # no mount program
        mounted = False
    if not mounted:  # not permitted here: the kernel's file size limit instead
        yield FullDisk(path, DISK_BYTES // 4, os.strerror(errno.EFBIG))
        return
    try:
        yield FullDisk(path, 0, os.strerror(errno.ENOSPC))
    finally:
        subprocess.run(["umount", str(path)], check=True, timeout=30)


@pytest.fixture(scope="module")
def delivery_db() -> Iterator[str]:
    with scratch_pg("outages") as url:
        yield url


def test_a_full_spool_disk_drops_the_oldest_loudly_and_never_stops_training(
    full_disk: FullDisk, delivery_db: str, tmp_path: Path
) -> None:
    port = free_port()
    tenant = make_tenant(delivery_db)
    steps = 30_000
    script = tmp_path / "trainer.py"
    script.write_text(DISK_TRAINER)
    arguments = [f"http://127.0.0.1:{port}", tenant.ingest, tenant.project, "disk-full"]
    arguments += [str(full_disk.path / "spool"), str(steps), str(full_disk.file_limit)]
    trainer = subprocess.Popen(
        [sys.executable, str(script), *arguments, str(SPOOL_MAX_BYTES)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server: ServerProcess | None = None
    try:
        assert trainer.stdout is not None and trainer.stdin is not None
        logged = json.loads(trainer.stdout.readline() or "{}")
        server = start_server(delivery_db, tmp_path, port=port, **EXACT)
        trainer.stdin.write("go\n")
        trainer.stdin.flush()
        out, err = trainer.communicate(timeout=90)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(10)
        if server is not None:
            server.stop()
    assert trainer.returncode == 0, err
    finished = json.loads(out)
    print(
        json.dumps(
            {
                "disk": "tmpfs" if not full_disk.file_limit else "RLIMIT_FSIZE",
                "while down": {k: v for k, v in logged.items() if k != "warnings"},
                "after finish": {k: v for k, v in finished.items() if k != "warnings"},
                "warnings": finished["warnings"],
            },
            indent=1,
        )
    )

    total = steps * TRAINER_METRICS
    assert logged["raised"] == 0 and logged["logged"] == total
    assert logged["worst_log_s"] < LOG_BOUND_S, "a log() call waited on the disk"
    dropped = logged["dropped"]
    assert dropped > 0, "more was logged than the spool may hold"
    assert dropped == total - logged["pending"], "every point is held or counted as dropped"
    loud = [
        counts
        for level, message in logged["warnings"]
        if level == "WARNING" and full_disk.error in message
        for counts in re.findall(
            r"dropped the oldest (\d+) points .*; (\d+) points dropped", message
        )
    ]
    assert loud, f"no warning names the full disk and the drop: {logged['warnings']}"
    assert all(0 < int(now) <= int(so_far) <= dropped for now, so_far in loud), loud

    # What was kept (the newest steps: whole records go, oldest first) is delivered.
    assert finished["pending"] == 0 and finished["dropped"] == dropped
    assert finished["sent"] == total - dropped
    kept = (total - dropped) // TRAINER_METRICS
    stored = stored_once(delivery_db, tenant.project, "disk-full")
    assert_same(stored, trainer_points(range(steps - kept, steps)))
