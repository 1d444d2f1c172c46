"""The command line: db upgrade, tokens, import, and the demo end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import normwatch
from normwatch.cli import main
from normwatch.testing import ServerProcess, free_port
from tests.helpers.tenants import make_tenant

LLMC_LOG = Path(normwatch.__file__).parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"


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


def test_serve_no_migrate_refuses_a_schema_that_is_not_the_newest(tmp_path: Path) -> None:
    """Said in one line, where it failed with a traceback on the first missing table."""
    env = {"NORMWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}"}
    port = str(free_port())
    fresh = normwatch("serve", "--no-migrate", "--port", port, env=env)
    assert fresh.returncode == 2, fresh.stderr
    assert "it has no normwatch schema yet" in fresh.stderr
    assert "Run `normwatch db upgrade` first" in fresh.stderr
    assert "Traceback" not in fresh.stderr
    older = normwatch("db", "upgrade", "0001", env=env)
    assert older.returncode == 0, older.stderr
    behind = normwatch("serve", "--no-migrate", "--port", port, env=env)
    assert behind.returncode == 2, behind.stderr
    assert "its schema is at revision 0001, not this version's newest" in behind.stderr


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``normwatch ARGS`` in this process: exit code, stdout, stderr."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def table(out: str) -> list[list[str]]:
    """``token list`` rows, split on the two spaces between columns."""
    return [re.split(r" {2,}", line) for line in out.splitlines()]


WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"


def test_tokens_are_listed_rotated_and_revoked(
    fresh_pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NORMWATCH_DATABASE_URL", fresh_pg_url)
    code, out, err = run_cli(
        capsys, "token", "create", "--project", "marin", "--scope", "read", "--expires-in", "30d"
    )
    assert code == 0, err
    reader = out.strip()
    assert re.fullmatch(r"nw_[A-Za-z0-9_-]{40,}", reader)
    assert re.search(rf"^it expires at {WHEN}$", err, re.M)
    assert f"dashboard login: http://127.0.0.1:8000/login#token={reader}\n" in err
    assert "?token=" not in err
    code, out, _ = run_cli(capsys, "token", "create", "--project", "marin", "--name", "trainer 7")
    trainer = out.strip()
    assert code == 0
    run_cli(capsys, "token", "create", "--project", "other", "--scope", "admin")

    code, out, err = run_cli(capsys, "token", "list", "--project", "marin")
    assert code == 0 and err == ""
    rows = table(out)
    assert rows[0] == [
        "id", "project", "scope", "name", "prefix", "created", "last used", "expires", "state"
    ]  # fmt: skip
    assert [r[:5] + r[6:7] + r[8:] for r in rows[1:]] == [
        ["1", "marin", "read", "read token", reader[:10], "never", "active"],
        ["2", "marin", "ingest", "trainer 7", trainer[:10], "never", "active"],
    ]
    assert re.fullmatch(WHEN, rows[1][5]) and re.fullmatch(WHEN, rows[1][7])
    assert rows[2][7] == "never"
    assert reader not in out and trainer not in out
    assert [r[1] for r in table(run_cli(capsys, "token", "list")[1])[1:]] == [
        "marin",
        "marin",
        "other",
    ]

    code, out, err = run_cli(capsys, "token", "rotate", "2", "--grace", "1h")
    assert code == 0, err
    successor = out.strip()
    assert successor != trainer and re.fullmatch(r"nw_[A-Za-z0-9_-]{40,}", successor)
    assert "ingest token for project 'marin' (id 4); it is shown only once" in err
    assert re.search(rf"^token 2 keeps working until {WHEN}$", err, re.M)
    assert "dashboard login" not in err  # an ingest token cannot log in
    rows = table(run_cli(capsys, "token", "list", "--project", "marin")[1])
    assert [(r[0], r[3], r[8]) for r in rows[1:]] == [
        ("1", "read token", "active"),
        ("2", "trainer 7", "active"),
        ("4", "trainer 7", "active"),
    ]
    assert re.fullmatch(WHEN, rows[2][7]) and rows[3][7] == "never"

    code, out, err = run_cli(capsys, "token", "revoke", "2", "99", "2")
    assert code == 1
    assert re.fullmatch(
        rf"token 2 \(ingest, project 'marin', 'trainer 7'\) revoked at {WHEN}\n", out
    )
    assert err == "error: no token with id 99 (see `normwatch token list`)\n"
    code, out, err = run_cli(capsys, "token", "revoke", "2")
    assert code == 0 and err == "" and out.startswith("token 2 ")  # again: no change
    assert [r[0] for r in table(run_cli(capsys, "token", "list", "--project", "marin")[1])] == [
        "id",
        "1",
        "4",
    ]
    rows = table(run_cli(capsys, "token", "list", "--project", "marin", "--all")[1])
    assert [(r[0], r[8]) for r in rows[1:]] == [("1", "active"), ("2", "revoked"), ("4", "active")]

    code, out, err = run_cli(capsys, "token", "rotate", "2")
    assert (code, out) == (1, "")
    assert err == "error: token 2 is revoked; create a new one instead\n"
    code, out, err = run_cli(capsys, "token", "rotate", "1")
    assert code == 0 and "token 1 is revoked\n" in err
    assert re.search(rf"^it expires at {WHEN}$", err, re.M)  # the old token's 30 days again
    assert f"/login#token={out.strip()}" in err
    assert run_cli(capsys, "token", "rotate", "4000000000")[2] == (
        "error: no token with id 4000000000 (see `normwatch token list`)\n"
    )
    code, out, err = run_cli(capsys, "token", "list", "--project", "nobody")
    assert (code, out) == (0, "")
    assert err == "no active tokens (--all lists expired and revoked ones) in project 'nobody'\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("create", "--project", "p", "--expires-in", "30"), "'30' is not a duration"),
        (("create", "--project", "p", "--expires-in", "0"), "longer than 0"),
        (("create", "--project", "p", "--expires-in", "9999w"), "longer than 3660 days"),
        (("rotate", "1", "--grace", "31d"), "'31d' is longer than 30 days"),
        (("rotate", "x"), "invalid int value"),
        (("revoke",), "the following arguments are required: ID"),
    ],
)
def test_token_usage_errors_exit_2(
    args: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "token", *args)
    assert (code, out) == (2, "")
    assert says in err


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


@pytest.mark.slow
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
        assert f"http://127.0.0.1:{port}/login#token={token.group(1)}" in output
        # What other commands need to work on the demo's database, ready to paste.
        demo_url = f"sqlite:///{tmp_path / 'demo.db'}"
        assert f"\n    export NORMWATCH_DATABASE_URL={demo_url}\n" in output
        assert demo_url.startswith("sqlite:////")  # an absolute path
        reader = normwatch(
            "token",
            "create",
            "--project",
            "demo",
            "--scope",
            "read",
            env={"NORMWATCH_DATABASE_URL": demo_url},
        )
        assert reader.returncode == 0, reader.stderr
        read_headers = {"Authorization": f"Bearer {reader.stdout.strip()}"}
        listed = httpx.get(f"http://127.0.0.1:{port}/api/v1/runs", headers=read_headers)
        assert {r["name"] for r in listed.json()} == {"48L-moe-ep-routing", "llmc-gpt2-124M"}
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


def test_db_distribute_refuses_a_database_without_citus(pg_url: str) -> None:
    """On plain Postgres there is nothing to shard: a clear refusal, nothing changed."""
    done = normwatch("db", "distribute", env={"NORMWATCH_DATABASE_URL": pg_url})
    assert done.returncode == 1
    assert "is not a Citus coordinator (no citus extension in the database)" in done.stderr
    again = normwatch("db", "distribute", "--undo", env={"NORMWATCH_DATABASE_URL": pg_url})
    assert again.returncode == 1 and "not a Citus coordinator" in again.stderr
