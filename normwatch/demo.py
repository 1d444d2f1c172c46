"""``normwatch demo``: a server on a fresh SQLite file with a simulated run streaming live.

The simulated run (`normwatch.simulate`) goes through the real trainer client over HTTP:
its history up to shortly before the config change at step 81k is backfilled fast, then
steps arrive live, so the grad-norm surge after 81k happens in front of the viewer. The
llm.c GPT-2 log shipped in ``normwatch/data`` is imported as a second run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from normwatch.testing import wait_healthy

PROJECT = "demo"
RUN_NAME = "48L-moe-ep-routing"
HISTORY_END = 78_500
LIVE_END = 95_000
LLMC_LOG = Path(__file__).resolve().parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"


def run_demo(*, db_path: str, port: int | None, steps_per_second: float) -> int:
    from normwatch.server.auth import create_token
    from normwatch.server.db import build_engine, session_factory
    from normwatch.server.migrate import upgrade

    db = Path(db_path).resolve()
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    port = port or int(os.environ.get("NORMWATCH_PORT", "8000"))
    base = f"http://127.0.0.1:{port}"

    engine = build_engine(url)
    upgrade(engine)
    with session_factory(engine)() as session, session.begin():
        admin, _ = create_token(session, PROJECT, "admin", "demo admin")
        ingest, _ = create_token(session, PROJECT, "ingest", "demo trainer")
    engine.dispose()

    env = {
        **os.environ,
        "NORMWATCH_DATABASE_URL": url,
        "NORMWATCH_HOST": "127.0.0.1",
        "NORMWATCH_PORT": str(port),
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
        print(f"  database    {db}")
        print()
        # Other commands (`normwatch token create`, `db`, `aliases`) work on this database
        # once this is exported; sqlite:/// and an absolute path make four slashes.
        print("  For other normwatch commands to use this database:")
        print(f"    export NORMWATCH_DATABASE_URL={url}")
        print()
        create_demo_rules(base, admin)
        print("Backfilling history, then streaming live past step 81,000 (Ctrl-C stops).")
        stream_simulated_run(base, ingest, steps_per_second=steps_per_second)
        print("Simulated run finished; still serving (Ctrl-C stops).")
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
    """Alert rules without channels: their history shows on the dashboard's alerts page."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=10) as api:
        for rule in DEMO_RULES:
            answer = api.post("/api/v1/alert-rules", json={"runs": {"name": RUN_NAME}, **rule})
            answer.raise_for_status()


def stream_simulated_run(base: str, token: str, *, steps_per_second: float) -> None:
    """Backfill the history fast, import the llm.c log, then stream steps in real time."""
    from normwatch.client import Run
    from normwatch.client.importers.llmc import import_llmc
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
        start_step=0,
        max_batch_points=200_000,
    ) as run:
        started = time.monotonic()
        for step, metrics in sim.iter_steps(0, HISTORY_END, layer_every=100):
            run.log(metrics, step=step)
        for step, kind, text in events:
            if step < HISTORY_END:
                run.event(text, step=step, kind=kind)
        elapsed = time.monotonic() - started
        print(f"  history: steps 0–{HISTORY_END - 1:,} queued in {elapsed:.1f} s")

        with Run(
            base,
            token=token,
            project=PROJECT,
            name="llmc-gpt2-124M",
            tags=["llm.c", "real"],
            start_step=0,
        ) as llmc:
            steps = import_llmc(LLMC_LOG, llmc)
        print(f"  llm.c GPT-2 124M log: {steps:,} steps imported")

        interval = 1.0 / steps_per_second
        next_at = time.monotonic()
        pending = [e for e in events if e[0] >= HISTORY_END]
        for step, metrics in sim.iter_steps(HISTORY_END, LIVE_END, layer_every=10, chunk=500):
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
