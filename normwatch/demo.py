"""``normwatch demo``: a server on an SQLite file with a simulated run streaming live.

The simulated run (`normwatch.simulate`) goes through the real trainer client over HTTP:
its history up to shortly before the config change at step 81k is backfilled fast, then
steps arrive live, so the grad-norm surge after 81k happens in front of the viewer. The
llm.c GPT-2 log shipped in ``normwatch/data`` is imported as a second run.

The file is made afresh on each start, unless ``keep``: then the last demo's runs, rules,
alerts and tokens stay, and the simulated run goes on from its last stored step.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import httpx

from normwatch.testing import wait_healthy

PROJECT = "demo"
RUN_NAME = "48L-moe-ep-routing"
LLMC_RUN_NAME = "llmc-gpt2-124M"
HISTORY_END = 78_500
LIVE_END = 95_000
LLMC_LOG = Path(__file__).resolve().parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"


def run_demo(
    *,
    db_path: str,
    port: int | None,
    steps_per_second: float,
    keep: bool = False,
    webhook_allow: Sequence[str] = (),
) -> int:
    """Serve the demo until Ctrl-C or SIGTERM.

    ``keep``: keep the file at ``db_path`` if there is one (else it is made afresh).
    ``webhook_allow``: hosts alert webhooks may target although private or loopback,
    added to ``NORMWATCH_WEBHOOK_ALLOW`` (validated by the caller).
    """
    db = Path(db_path).resolve()
    port = port or int(os.environ.get("NORMWATCH_PORT", "8000"))
    # Another demo on this file, or anything on this port: refuse before the file is touched
    # (a fresh demo deletes it, and a server already serving it would go on serving a
    # deleted file).
    lock = claim_database(db)
    if lock is None:
        return 1
    if not port_free(port):
        print(
            f"error: 127.0.0.1:{port} is in use (another normwatch demo or server?); stop "
            "it or pass --port",
            file=sys.stderr,
        )
        return 1
    kept = keep and db.exists()
    url, admin, ingest = prepare_database(db, keep=kept)
    base = f"http://127.0.0.1:{port}"
    allow = [e for e in (os.environ.get("NORMWATCH_WEBHOOK_ALLOW", ""), *webhook_allow) if e]

    env = {
        **os.environ,
        "NORMWATCH_DATABASE_URL": url,
        "NORMWATCH_HOST": "127.0.0.1",
        "NORMWATCH_PORT": str(port),
        "NORMWATCH_WEBHOOK_ALLOW": ",".join(allow),
    }
    server = subprocess.Popen([sys.executable, "-m", "normwatch", "serve", "--no-migrate"], env=env)
    # A plain `kill` must also stop the server child: turn SIGTERM into a clean exit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        if not wait_healthy(base, server, timeout=30):
            print(f"error: the server did not start on {base}; is the port free?", file=sys.stderr)
            return 1
        print()
        # The token travels in the fragment, which browsers never send: it stays out of logs.
        print(f"  dashboard   {base}/login#token={admin}")
        print(f"  API docs    {base}/docs")
        print(f"  admin token {admin}")
        print(f"  database    {db}  ({'kept from the last demo' if kept else 'new'})")
        if allow:
            print(f"  webhooks    may target {', '.join(allow)} (NORMWATCH_WEBHOOK_ALLOW)")
        print()
        # Other commands (`normwatch token create`, `db`, `aliases`) work on this database
        # once this is exported; sqlite:/// and an absolute path make four slashes.
        print("  For other normwatch commands to use this database:")
        print(f"    export NORMWATCH_DATABASE_URL={url}")
        print()
        create_demo_rules(base, admin)
        resume_from, llmc_stored = demo_progress(base, admin)
        if resume_from >= LIVE_END:
            print(f"The simulated run is complete (step {resume_from - 1:,}).")
        else:
            if resume_from:
                print(f"Going on with the simulated run from step {resume_from:,}.")
            if resume_from < HISTORY_END:
                print("Backfilling history, then streaming live past step 81,000 (Ctrl-C stops).")
            else:
                print("Streaming live (Ctrl-C stops).")
            stream_simulated_run(
                base,
                ingest,
                steps_per_second=steps_per_second,
                resume_from=resume_from,
                import_llmc=not llmc_stored,
            )
            print("Simulated run finished.")
        print("Still serving (Ctrl-C stops).")
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
    return 0


def claim_database(db: Path) -> IO[str] | None:
    """Hold ``<db>.lock`` for as long as this process runs (the open file it returns), so
    that no second demo deletes or serves the same file; None, saying which process holds
    it, when another demo does."""
    db.parent.mkdir(parents=True, exist_ok=True)
    lock = open(f"{db}.lock", "a+")  # held, and locked, until the process ends
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        print(
            f"error: {db} is in use by another normwatch demo (pid {holder}); stop it, or "
            "pass --db for a demo of its own",
            file=sys.stderr,
        )
        return None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return lock


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (a bind there succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def prepare_database(db: Path, *, keep: bool) -> tuple[str, str, str]:
    """Migrate the SQLite file ``db`` (made afresh unless ``keep``) and make the demo
    project's admin and ingest tokens: (URL, admin token, ingest token)."""
    from normwatch.server.auth import create_token
    from normwatch.server.db import build_engine, session_factory
    from normwatch.server.migrate import upgrade

    if not keep:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    engine = build_engine(url)
    upgrade(engine)
    with session_factory(engine)() as session, session.begin():
        admin, _ = create_token(session, PROJECT, "admin", "demo admin")
        ingest, _ = create_token(session, PROJECT, "ingest", "demo trainer")
    engine.dispose()
    return url, admin, ingest


DEMO_RULES = (
    # The contingency as an on-call team would set it: fire after 3 steps at 5 or more, stay
    # firing through dips (resolve only after 100 steps below 4), say so every 1,000 steps,
    # and every hour should the trainer hang while it fires.
    {
        "name": "grad norm 5+",
        "metric": "grad/norm/total",
        "condition": {
            "kind": "threshold",
            "op": ">=",
            "value": 5.0,
            "for_steps": 3,
            "resolve_value": 4.0,
            "resolve_steps": 100,
        },
        "repeat_every_steps": 1000,
        "repeat_every_seconds": 3600,
    },
    {
        "name": "grad norm heading for 5",
        "metric": "grad/norm/total",
        "condition": {
            "kind": "forecast",
            "op": ">=",
            "value": 5.0,
            "within_steps": 2000,
            "window": 500,
        },
    },
    {
        "name": "update-norm spike",
        "metric": "updates/norm/total",
        "condition": {"kind": "spike", "factor": 1.6, "window": 50},
    },
    {"name": "loss is not finite", "metric": "train/loss", "condition": {"kind": "non_finite"}},
)


def create_demo_rules(base: str, admin_token: str) -> None:
    """Alert rules without channels: their history shows on the dashboard's alerts page.

    A rule of that name already there (a kept database) is left as it is, edits included.
    """
    headers = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=10) as api:
        listed = api.get("/api/v1/alert-rules")
        listed.raise_for_status()
        present = {rule["name"] for rule in listed.json()}
        for rule in DEMO_RULES:
            if rule["name"] in present:
                continue
            answer = api.post("/api/v1/alert-rules", json={"runs": {"name": RUN_NAME}, **rule})
            answer.raise_for_status()


def demo_progress(base: str, admin_token: str) -> tuple[int, bool]:
    """Where the simulated run goes on (its last stored step + 1; 0 for none) and whether
    the llm.c run is stored already."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=10) as api:
        answer = api.get("/api/v1/runs")
        answer.raise_for_status()
    runs = {run["name"]: run for run in answer.json()}
    simulated = runs.get(RUN_NAME)
    last_step = None if simulated is None else simulated.get("last_step")
    resume_from = 0 if last_step is None else int(last_step) + 1
    llmc = runs.get(LLMC_RUN_NAME)
    return resume_from, llmc is not None and llmc.get("last_step") is not None


def stream_simulated_run(
    base: str,
    token: str,
    *,
    steps_per_second: float,
    resume_from: int = 0,
    import_llmc: bool = True,
    finish_timeout: float = 30.0,
) -> None:
    """Backfill the history fast, import the llm.c log, then stream steps in real time.

    ``resume_from``: the first step to send (the steps before it are stored already, in
    the run's current segment); ``import_llmc`` False when that run is stored already.
    ``finish_timeout``: how long each run's client may take to deliver what is queued when
    the stream ends (what it has not sent by then stays in its spool).
    """
    from normwatch.client import Run
    from normwatch.client.importers.llmc import import_llmc as import_llmc_log
    from normwatch.simulate import SimulatedRun

    sim = SimulatedRun(seed=0)
    config = {"layers": sim.n_layers, "z_loss": 1e-4, "final_norm_weight_decay": 0.0}
    events = sorted(sim.events())
    with Run(
        base,
        token=token,
        project=PROJECT,
        name=RUN_NAME,
        config=config,
        tags=["simulated", "moe"],
        start_step=resume_from,
        max_batch_points=200_000,
    ) as run:
        if resume_from < HISTORY_END:
            started = time.monotonic()
            for step, metrics in sim.iter_steps(resume_from, HISTORY_END, layer_every=100):
                run.log(metrics, step=step)
            for step, kind, text in events:
                if resume_from <= step < HISTORY_END:
                    run.event(text, step=step, kind=kind)
            elapsed = time.monotonic() - started
            print(f"  history: steps {resume_from:,}–{HISTORY_END - 1:,} queued in {elapsed:.1f} s")

        if import_llmc:
            with Run(
                base,
                token=token,
                project=PROJECT,
                name=LLMC_RUN_NAME,
                tags=["llm.c", "real"],
                start_step=0,
            ) as llmc:
                steps = import_llmc_log(LLMC_LOG, llmc)
                llmc.finish(timeout=finish_timeout)
            print(f"  llm.c GPT-2 124M log: {steps:,} steps imported")

        interval = 1.0 / steps_per_second
        next_at = time.monotonic()
        live_from = max(resume_from, HISTORY_END)
        pending = [e for e in events if e[0] >= live_from]
        for step, metrics in sim.iter_steps(live_from, LIVE_END, layer_every=10, chunk=500):
            while pending and pending[0][0] <= step:
                ev_step, kind, text = pending.pop(0)
                run.event(text, step=ev_step, kind=kind)
                print(f"  step {ev_step:,}: event '{text}'")
            run.log(metrics, step=step)
            # What the run page's "Ask the trainer" buttons (or a rule) asked of it.
            stop = run.should_stop()
            if stop or run.should_checkpoint():
                run.event("checkpoint saved (simulated)", step=step, kind="checkpoint")
                print(f"  step {step:,}: checkpoint saved, as asked")
            if stop:
                print(f"  step {step:,}: stopping, as asked")
                break
            if step % 1000 == 0:
                print(
                    f"  live: step {step:,}  grad/norm/total={metrics['grad/norm/total']:.3f}  "
                    f"final_norm={metrics['params/norm/final_norm.weight']:.1f}"
                )
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        run.finish(timeout=finish_timeout)
