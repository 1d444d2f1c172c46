"""``normwatch demo --keep`` across restarts, and ``--allow-webhook`` for a local receiver.
Each runs the real command."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from normwatch.demo import DEMO_RULES, RUN_NAME
from normwatch.testing import free_port
from tests.helpers.receivers import WebhookReceiver

ADMIN = re.compile(r"admin token (nw_\S+)")


class Demo:
    """A ``normwatch demo`` process and the lines it printed so far."""

    def __init__(self, db: Path, port: int, *args: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        command = [sys.executable, "-m", "normwatch", "demo", "--db", str(db), "--port", str(port)]
        self.process = subprocess.Popen(
            [*command, "--steps-per-second", "1000", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def read_until(self, text: str, timeout: float = 120.0) -> str:
        """The output up to the first line containing ``text``."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not any(text in line for line in self.lines):
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
        output = self.output()
        assert text in output, output
        return output

    def output(self) -> str:
        return "".join(self.lines)

    def admin(self) -> httpx.Client:
        token = ADMIN.search(self.output())
        assert token is not None, self.output()
        return admin_client(self.url, token.group(1))

    def stop(self) -> None:
        # The demo sends what it has queued before it ends (seconds on a loaded machine).
        self.process.terminate()
        self.process.wait(60)
        if self.process.stdout is not None:
            self.process.stdout.close()


def admin_client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def webhook_rule(receiver: WebhookReceiver) -> dict[str, Any]:
    return {
        "name": "local hook",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">=", "value": 50.0},
        "channels": [{"type": "webhook", "url": receiver.url("/hook"), "secret": "s3cret"}],
    }


def simulated_run(api: httpx.Client) -> dict[str, Any]:
    [run] = [r for r in api.get("/api/v1/runs").json() if r["name"] == RUN_NAME]
    detail: dict[str, Any] = api.get(f"/api/v1/runs/{run['id']}").json()
    return detail


@pytest.mark.slow
def test_demo_keep_and_allow_webhook_need_no_fresh_database(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    port = free_port()
    with WebhookReceiver() as receiver:
        # A fresh demo: a loopback webhook is refused, as everywhere by default.
        first = Demo(db, port)
        try:
            output = first.read_until("live: step 79,000")
            assert f"database    {db}  (new)" in output and "webhooks" not in output
            with first.admin() as api:
                refused = api.post("/api/v1/alert-rules", json=webhook_rule(receiver))
                assert refused.status_code == 422, refused.text
                run_id = simulated_run(api)["id"]
        finally:
            first.stop()
        token = ADMIN.search(first.output())
        assert token is not None
        admin = token.group(1)

        # Restarted with --keep and --allow-webhook: same runs, rules and tokens; the local
        # receiver is allowed without any other setting.
        allow = f"127.0.0.1:{receiver.port}"
        second = Demo(db, port, "--keep", "--allow-webhook", allow)
        try:
            output = second.read_until("Going on with the simulated run from step")
            assert f"database    {db}  (kept from the last demo)" in output
            assert f"webhooks    may target {allow} (NORMWATCH_WEBHOOK_ALLOW)" in output
            resumed = int(output.rsplit("from step ", 1)[1].split(".")[0].replace(",", ""))
            assert resumed > 78_500
            with admin_client(second.url, admin) as api:  # the first demo's token
                made = api.post("/api/v1/alert-rules", json=webhook_rule(receiver))
                assert made.status_code == 201, made.text
                sent = api.post(f"/api/v1/alert-rules/{made.json()['id']}/test").json()
                assert [(d["ok"], d["status_code"]) for d in sent] == [(True, 200)]
                assert [p["rule"]["name"] for p in receiver.wait_for(1)] == ["local hook"]
                # Lines are printed when queued; delivery trails them by a batch or two.
                deadline = time.monotonic() + 30
                while (run := simulated_run(api))["last_step"] < resumed + 1000:
                    assert time.monotonic() < deadline, run
                    time.sleep(0.2)
                assert run["id"] == run_id
                assert [s["segment"] for s in run["segments"]] == [1]  # no restart at 0
        finally:
            second.stop()

        # Once more: the rule made above is still there and still delivers; the demo's own
        # rules are not made twice.
        third = Demo(db, port, "--keep", "--allow-webhook", allow)
        try:
            third.read_until("Going on with the simulated run from step")
            with admin_client(third.url, admin) as api:
                rules = {r["name"]: r for r in api.get("/api/v1/alert-rules").json()}
                assert sorted(rules) == sorted(["local hook", *(r["name"] for r in DEMO_RULES)])
                sent = api.post(f"/api/v1/alert-rules/{rules['local hook']['id']}/test").json()
                assert [d["ok"] for d in sent] == [True]
                assert len(receiver.wait_for(2)) == 2
        finally:
            third.stop()


def test_demo_refuses_a_webhook_host_it_cannot_read(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "normwatch", "demo", "--db", str(tmp_path / "demo.db")]
        + ["--allow-webhook", "127.0.0.1:99999"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error: --allow-webhook: '127.0.0.1:99999' is not a host name, host:port, IP address "
        "or network (CIDR such as 10.0.0.0/8)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_second_demo_never_touches_a_running_ones_database_or_port(tmp_path: Path) -> None:
    """A second ``normwatch demo`` on the database or the port of a running one refuses,
    naming which, before it deletes or serves anything: the first goes on with its runs."""
    db, port = tmp_path / "demo.db", free_port()
    first = Demo(db, port)
    try:
        first.read_until("Backfilling history")
        with first.admin() as api:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                before = {run["name"] for run in api.get("/api/v1/runs").json()}
                if RUN_NAME in before:
                    break
                time.sleep(0.2)
        assert RUN_NAME in before
        inode = db.stat().st_ino

        for args, said in (
            (["--db", str(db), "--port", str(free_port())], f"{db} is in use by another"),
            (["--db", str(db), "--port", str(free_port()), "--keep"], f"pid {first.process.pid}"),
            (["--db", str(tmp_path / "other.db"), "--port", str(port)], f"{port} is in use"),
        ):
            second = subprocess.run(
                [sys.executable, "-m", "normwatch", "demo", *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert second.returncode == 1, second.stdout + second.stderr
            assert said in second.stderr, second.stderr
            assert "Traceback" not in second.stderr
            assert "admin token" not in second.stdout

        assert db.stat().st_ino == inode  # the same file, never deleted and made again
        assert not (tmp_path / "other.db").exists()
        with first.admin() as api:
            after = {run["name"] for run in api.get("/api/v1/runs").json()}
        assert before <= after
    finally:
        first.stop()
    # Once the first has stopped, the file is free again.
    again = Demo(db, free_port(), "--keep")
    try:
        again.read_until("admin token")
        assert "kept from the last demo" in again.read_until("database")
    finally:
        again.stop()
