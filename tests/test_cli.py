"""The command line: db upgrade, token create, import, and the demo end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from normwatch.testing import ServerProcess, free_port
from tests.conftest import make_tenant

LLMC_LOG = Path(__file__).resolve().parent.parent / "normwatch" / "data"
LLMC_LOG = LLMC_LOG / "llmc_gpt2_124M_modded-nanogpt.log"


def normwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "normwatch", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_db_upgrade_and_token_create_on_sqlite(tmp_path: Path) -> None:
    env = {"NORMWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    up = normwatch("db", "upgrade", env=env)
    assert up.returncode == 0, up.stderr
    created = normwatch("token", "create", "--project", "marin", "--scope", "read", env=env)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert re.fullmatch(r"nw_[A-Za-z0-9_-]{40,}", token)
    assert "shown only once" in created.stderr
    bad = normwatch("token", "create", "--project", "marin", "--scope", "root", env=env)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_import_llmc_through_the_client(server: ServerProcess) -> None:
    tenant = make_tenant(server.database_url)
    done = normwatch(
        "import",
        "llmc",
        str(LLMC_LOG),
        "--url",
        server.url,
        "--token",
        tenant.ingest,
        "--name",
        "gpt2-llmc",
    )
    assert done.returncode == 0, done.stderr
    assert "imported 19561 steps" in done.stdout
    with httpx.Client(base_url=server.url, headers=tenant.headers("read")) as api:
        [run] = api.get("/api/v1/runs").json()
        assert run["name"] == "gpt2-llmc" and run["last_step"] == 19560
        got = api.get(
            f"/api/v1/runs/{run['id']}/series", params={"metric": "grad/norm/total", "points": 5000}
        ).json()
    series = got["series"][0]
    assert series["total_points"] == 19560
    assert series["steps"][:2] == [0, 1] and series["values"][:2] == [15.37, 15.24]
    missing = normwatch("import", "llmc", "/nonexistent.log", "--token", "x")
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_demo_streams_live_past_the_config_change(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "normwatch",
            "demo",
            "--db",
            str(tmp_path / "demo.db"),
            "--port",
            str(port),
            "--steps-per-second",
            "3000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "live: step 82,000" in line:
                break
        output = "".join(lines)
        assert "live: step 82,000" in output, output
        token = re.search(r"admin token (nw_\S+)", output)
        assert token is not None, output
        assert f"http://127.0.0.1:{port}/login?token={token.group(1)}" in output
        headers = {"Authorization": f"Bearer {token.group(1)}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as api:
            runs = {r["name"]: r for r in api.get("/api/v1/runs").json()}
            assert set(runs) == {"48L-moe-ep-routing", "llmc-gpt2-124M"}
            sim = runs["48L-moe-ep-routing"]["id"]
            # Lines are printed when queued; delivery trails them by a batch or two.
            wait_until = time.monotonic() + 30
            while time.monotonic() < wait_until:
                events = api.get(f"/api/v1/runs/{sim}/events").json()
                if 81_000 in [e["step"] for e in events]:
                    break
                time.sleep(0.2)
            assert [(e["step"], e["kind"]) for e in events] == [(0, "config"), (81_000, "config")]
            names = {m["name"] for m in api.get(f"/api/v1/runs/{sim}/metrics").json()}
            assert {
                "grad/norm/total",
                "params/norm/final_norm.weight",
                "grad/norm/layers.0",
                "grad/norm/layers.47",
            } <= names
            series = api.get(
                f"/api/v1/runs/{sim}/series",
                params={"metric": "params/norm/final_norm.weight", "start": 79_990, "end": 80_000},
            ).json()
            values = series["series"][0]["values"]
            assert values and 320 < values[-1] < 360
    finally:
        proc.terminate()
        proc.wait(20)
        if proc.stdout is not None:
            proc.stdout.close()


def compactor_children(pid: int) -> list[int]:
    """Pids of the ``db compact --follow`` processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and b"--follow" in cmdline and b"compact" in cmdline:
            found.append(int(entry.name))
    return found


def wait_for(check: object, timeout: float = 20.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()  # type: ignore[operator]
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s")


def test_serve_compacts_in_a_process_beside_it_restarts_it_and_ends_it(tmp_path: Path) -> None:
    """`serve` runs the compactor as a child process: it compacts what the workers take in,
    comes back when it dies, and goes away when the server is SIGKILLed."""
    from normwatch.testing import start_server

    url = f"sqlite:///{tmp_path / 'serve.db'}"
    assert normwatch("db", "upgrade", env={"NORMWATCH_DATABASE_URL": url}).returncode == 0
    tenant = make_tenant(url)
    server = start_server(
        url, tmp_path, NORMWATCH_COMPACTION_INTERVAL_S="0.2", NORMWATCH_COMPACTION_IDLE_S="0.5"
    )
    try:
        pid = server.process.pid
        [first] = wait_for(lambda: compactor_children(pid))  # type: ignore[misc]
        with httpx.Client(base_url=server.url, headers=tenant.headers(), timeout=30) as api:
            run = api.post("/api/v1/runs", json={"name": "beside"}).json()["id"]
            body = {"steps": list(range(300)), "metrics": {"g": [0.5] * 300}}
            assert api.post(f"/api/v1/runs/{run}/metrics", json=body).status_code == 202

            def hot_points() -> float:
                for line in api.get("/metrics").text.splitlines():
                    if line.startswith("normwatch_hot_points "):
                        return float(line.split()[1])
                raise AssertionError("no normwatch_hot_points on /metrics")

            wait_for(lambda: hot_points() == 0)
            os.kill(first, 9)
            [second] = wait_for(  # type: ignore[misc]
                lambda: [p for p in compactor_children(pid) if p != first]
            )
            server.process.kill()
            server.process.wait(10)
            wait_for(lambda: _gone(second))
    finally:
        server.stop()


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")
