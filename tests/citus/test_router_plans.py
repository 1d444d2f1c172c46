"""On Citus, every statement of a hot path on a sharded table is a router plan: one task, on
the shard of its run. Cross-run pages reach the shards of the runs they name, never all.

The service runs here in this process, served by uvicorn on a thread (with its dispatcher
thread), so that every statement it sends, with its parameters, can be recorded; each
one that names a sharded table is then bound and EXPLAINed on the coordinator.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
import uvicorn

from normwatch.scratch import admin_dsn
from normwatch.server.app import create_app
from normwatch.server.config import Settings
from normwatch.server.db import build_engine, session_factory
from normwatch.server.storage import citus, schedule
from normwatch.server.storage.policy import Policy
from normwatch.testing import free_port
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.tenants import Tenant, make_tenant

SHARDED = re.compile(
    rf"\b(?:FROM|INTO|UPDATE|JOIN|USING)\s+({'|'.join(citus.BY_RUN)})\b", re.IGNORECASE
)


@dataclass
class Recorder:
    """Every statement on a sharded table that any psycopg cursor of this process sends (the
    service's own SQL runs partly through SQLAlchemy, partly on the driver's cursors), under
    the phase it was sent in; ``copies``: the COPY statements."""

    phase: str = "setup"
    sent: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    copies: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, cursor: psycopg.Cursor[Any], query: Any, params: Any) -> None:
        statement = query if isinstance(query, str) else query.as_string(cursor.connection)
        if SHARDED.search(statement):
            # The dispatcher's clock runs on its own schedule, whatever the phase.
            clock = threading.current_thread().name == "normwatch-dispatcher"
            with self.lock:
                self.sent.setdefault("clock" if clock else self.phase, []).append(
                    (statement, params)
                )


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Records what the cursors send; they still send it."""
    record = Recorder()
    execute, executemany, copy = (
        psycopg.Cursor.execute,
        psycopg.Cursor.executemany,
        psycopg.Cursor.copy,
    )

    def recorded_execute(
        self: psycopg.Cursor[Any], query: Any, params: Any = None, **kw: Any
    ) -> Any:
        record.saw(self, query, params)
        return execute(self, query, params, **kw)

    def recorded_executemany(self: psycopg.Cursor[Any], query: Any, params: Any, **kw: Any) -> Any:
        params = list(params)
        record.saw(self, query, params)
        return executemany(self, query, params, **kw)

    def recorded_copy(self: psycopg.Cursor[Any], statement: Any, *args: Any, **kw: Any) -> Any:
        text_ = statement if isinstance(statement, str) else statement.as_string(self.connection)
        with record.lock:
            record.copies.append(text_)
        return copy(self, statement, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", recorded_execute)
    monkeypatch.setattr(psycopg.Cursor, "executemany", recorded_executemany)
    monkeypatch.setattr(psycopg.Cursor, "copy", recorded_copy)
    return record


def task_counts(plan: Any) -> list[int]:
    """Every "Task Count" in a Citus EXPLAIN (FORMAT JSON) plan, subplans included."""
    found: list[int] = []
    if isinstance(plan, dict):
        for key, value in plan.items():
            if key == "Task Count":
                found.append(int(value))
            else:
                found.extend(task_counts(value))
    elif isinstance(plan, list):
        for item in plan:
            found.extend(task_counts(item))
    return found


def explained(conn: psycopg.Connection[Any], statement: str, params: Any) -> list[int]:
    """The task counts of ``statement`` with ``params`` bound (the first row's, for an
    executemany), as the coordinator plans it."""
    if isinstance(params, list | tuple) and params and isinstance(params[0], dict):
        params = params[0]
    bound = psycopg.ClientCursor(conn).mogrify(statement, params or None)
    [(plan,)] = conn.execute(f"EXPLAIN (FORMAT JSON) {bound}").fetchall()
    return task_counts(plan)


def unrouted(url: str, sent: list[tuple[str, Any]], most: int) -> list[tuple[list[int], str]]:
    """The statements whose plan has a step of more than ``most`` tasks (or none at all)."""
    bad = []
    with psycopg.connect(admin_dsn(url), autocommit=True) as conn:
        for statement, params in sent:
            counts = explained(conn, statement, params)
            if not counts or max(counts) > most:
                bad.append((counts, statement))
    return bad


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The service on a free loopback port, in a thread of this process; its URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, dashboard=False), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def _post(api: httpx.Client, tenant: Tenant, run: str, steps: range, **metrics: Any) -> None:
    r = api.post(
        f"/api/v1/runs/{run}/metrics",
        json={"steps": list(steps), "metrics": metrics},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 202, r.text


def _run(api: httpx.Client, tenant: Tenant, name: str) -> str:
    r = api.post("/api/v1/runs", json={"name": name}, headers=tenant.headers("ingest"))
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def test_the_checker_sees_a_statement_that_fans_out(pg_url: str) -> None:
    """A statement on a sharded table that names no run has a step of one task a shard."""
    with psycopg.connect(admin_dsn(pg_url), autocommit=True) as conn:
        assert max(explained(conn, "SELECT count(*) FROM blocks", None)) == citus.SHARD_COUNT
        one = explained(conn, "SELECT count(*) FROM blocks WHERE run_key = %(k)s", {"k": 7})
        assert one == [1]


def test_hot_paths_are_router_plans_and_cross_run_pages_reach_only_their_runs(
    pg_url: str, receiver: WebhookReceiver, recorder: Recorder
) -> None:
    engine = build_engine(pg_url, pool_size=1)
    with engine.connect() as conn:
        kinds = citus.placed(conn)
    assert {t: kinds.get(t) for t in citus.BY_RUN} == {t: "by run" for t in citus.BY_RUN}
    tenant = make_tenant(pg_url)
    settings = Settings(
        database_url=pg_url,
        webhook_allow="127.0.0.1",
        dispatch_tick_s=0.2,
        compaction=False,
    )
    layers = [f"layers.{i}.grad_norm" for i in range(8)]
    steps = range(0, 4000)
    t = np.arange(len(steps))
    parts = {name: (0.2 + 0.01 * i + 0.05 * np.sin(t / (50 + i))) for i, name in enumerate(layers)}
    total = np.sqrt(sum(v**2 for v in parts.values()))
    total[3000] = 9.0  # a spike the rules fire on
    total[-1] = 9.0  # and still firing at the end, for the clock
    body = {name: v.round(6).tolist() for name, v in parts.items()}
    with (
        served(settings) as url,
        httpx.Client(base_url=url, headers=tenant.headers("admin"), timeout=60) as api,
    ):
        for name, condition in (
            ("grad norm 5+", {"kind": "threshold", "op": ">=", "value": 5.0}),
            ("spike", {"kind": "spike", "factor": 3.0, "window": 50}),
            ("not finite", {"kind": "non_finite"}),
        ):
            r = api.post(
                "/api/v1/alert-rules",
                json={
                    "name": name,
                    "metric": "grad_norm",
                    "condition": condition,
                    "channels": [{"type": "webhook", "url": receiver.url()}],
                    # A rule the dispatcher's clock repeats: it reads firing states.
                    "repeat_every_seconds": 3600 if name == "grad norm 5+" else 0,
                },
            )
            assert r.status_code == 201, r.text
        runs = [_run(api, tenant, f"run-{i}") for i in range(3)]
        recorder.phase = "ingest"
        for run in runs:
            for lo in range(0, len(steps), 500):
                window = range(lo, lo + 500)
                _post(
                    api,
                    tenant,
                    run,
                    window,
                    grad_norm=total[lo : lo + 500].round(6).tolist(),
                    loss=(3.0 - t[lo : lo + 500] / 4000).tolist(),
                    **{k: v[lo : lo + 500] for k, v in body.items()},
                )
        # A re-send of steps stored already takes the path that merges into stored blocks.
        _post(api, tenant, runs[0], range(0, 100), loss=[1.0] * 100)
        assert receiver.wait_for(2)  # the spike fired and resolved, in all three runs
        time.sleep(1.0)  # a few dispatcher ticks with the alerts firing
        recorder.phase = "compaction"
        schedule.compact_pass(session_factory(engine), Policy(idle_s=0.0))
        recorder.phase = "reads"
        run = runs[0]
        for params in (
            {"metric": "grad_norm"},
            {"metric": "grad_norm", "start": 2900, "end": 3100},
            {"metric": ["grad_norm", "loss"], "points": 200},
            {"metric": "rss(layers.*.grad_norm)"},
        ):
            r = api.get(f"/api/v1/runs/{run}/series", params=params)
            assert r.status_code == 200, r.text
        for path, params in (
            ("transitions", {"metric": ["grad_norm", "loss"]}),
            ("spikes", {"metric": "grad_norm"}),
            ("layers", {"prefix": "layers", "points": 100}),
            ("metrics", {}),
        ):
            r = api.get(f"/api/v1/runs/{run}/{path}", params=params)
            assert r.status_code == 200, (path, r.text)
        recorder.phase = "cross-run"
        for path, params in (
            ("/api/v1/runs", {"project": tenant.project}),
            ("/api/v1/compare", {"run": runs, "metric": "grad_norm"}),
            ("/api/v1/alerts", {"project": tenant.project}),
        ):
            r = api.get(path, params=params)
            assert r.status_code == 200, (path, r.text)
    engine.dispose()

    recorder.phase = "explaining"
    sent = {phase: list(statements) for phase, statements in recorder.sent.items()}
    for phase in ("ingest", "compaction", "reads"):
        assert len(sent.get(phase, [])) >= 5, (phase, sent.get(phase))
        assert unrouted(pg_url, sent[phase], 1) == [], phase
    touched = {
        phase: {m.lower() for s, _ in statements for m in SHARDED.findall(s)}
        for phase, statements in sent.items()
    }
    assert {"alert_states", "blocks"} <= touched["ingest"], touched
    assert touched["compaction"] == {"blocks", "chunks", "rollups", "series"}, touched
    assert {"blocks", "chunks", "rollups"} <= touched["reads"], touched
    # Hot points arrive by COPY, which Citus splits by run_key: one run's rows, one shard.
    assert recorder.copies and all(c.startswith("COPY blocks ") for c in recorder.copies)
    assert unrouted(pg_url, sent.get("cross-run", []), len(runs)) == []
    # The clock reads the firing states of the running runs: their shards, not every one.
    assert "alert_states" in touched["clock"], touched
    assert unrouted(pg_url, sent["clock"], len(runs)) == []


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as hook:
        yield hook
