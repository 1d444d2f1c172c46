"""``normwatch import <format>`` end to end: each format imported through the client into a
real server and read back over HTTP; a refused token and a missing file reported.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import httpx

from normwatch.client.importers.jsonl import parse_jsonl
from normwatch.client.importers.llmc import parse_llmc
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant
from tests.helpers.training_logs import HISTORY_CSV, LLMC_LOG, TB_EXPECTED, by_metric, write_logdir


def normwatch_import(
    server: ServerProcess, token: str, spool: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``python -m normwatch import *args`` into ``server``, the client's spool in ``spool``."""
    environment = {
        **os.environ,
        "NORMWATCH_URL": server.url,
        "NORMWATCH_TOKEN": token,
        "NORMWATCH_SPOOL_DIR": str(spool),
    }
    return subprocess.run(
        [sys.executable, "-m", "normwatch", "import", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )


def stored_series(server: ServerProcess, token: str, run_name: str) -> dict[str, list[object]]:
    """Every metric of the run, read back whole over the HTTP API."""
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        [run] = [run for run in api.get("/api/v1/runs").json() if run["name"] == run_name]
        names = [metric["name"] for metric in api.get(f"/api/v1/runs/{run['id']}/metrics").json()]
        answer = api.get(
            f"/api/v1/runs/{run['id']}/series", params={"metric": names, "points": 20_000}
        )
        assert answer.status_code == 200, answer.text
    stored = {}
    for series in answer.json()["series"]:
        assert not series["downsampled"]
        stored[series["metric"]] = list(zip(series["steps"], series["values"], strict=True))
    return stored


def test_cli_imports_the_llmc_log(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    done = normwatch_import(sqlite_server, tenant.ingest, tmp_path / "spool", "llmc", str(LLMC_LOG))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "imported 19561 steps (0..19560) into run 'llmc_gpt2_124M_modded-nanogpt': "
        "58,760 values sent, 0 dropped, in "
    )
    assert "llmc_gpt2_124M_modded-nanogpt: 19,561 steps in " in done.stderr
    expected = by_metric(parse_llmc(LLMC_LOG))
    assert stored_series(sqlite_server, tenant.read, "llmc_gpt2_124M_modded-nanogpt") == expected


def test_cli_imports_json_lines(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    path = tmp_path / "exp-jsonl.jsonl"
    rng = random.Random(3)
    with path.open("w") as lines:
        for step in range(0, 3_000, 3):
            total = rng.lognormvariate(0, 1)
            grad: dict[str, object] = {"total": total, "layers": {"0": total / 2}}
            if step == 1_500:
                grad["total"] = float("nan")
            document = {"global_step": step, "train": {"loss": 4 - step / 1_000}, "grad": grad}
            document["lr"] = "Infinity" if step == 2_997 else 3e-4
            document["host"] = "tpu-7"
            lines.write(json.dumps(document) + "\n")

    done = normwatch_import(
        sqlite_server, tenant.ingest, tmp_path / "spool", "jsonl", str(path), "--prefix", "j"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 1000 steps (0..2997) into run 'exp-jsonl': 4,000 ")
    assert "note: skipped non-numeric field 'j/host' (text, line 1)" in done.stderr
    stored = stored_series(sqlite_server, tenant.read, "exp-jsonl")
    assert stored == by_metric(parse_jsonl(path, prefix="j"))
    assert stored["j/grad/total"][500] == (1_500, "NaN")
    assert stored["j/lr"][-1] == (2_997, "Infinity")
    assert sorted(stored) == ["j/grad/layers/0", "j/grad/total", "j/lr", "j/train/loss"]

    # The same file again: every point is held already, so nothing is stored and that is
    # no error; the summary counts them.
    again = normwatch_import(
        sqlite_server, tenant.ingest, tmp_path / "spool", "jsonl", str(path), "--prefix", "j"
    )
    assert again.returncode == 0, again.stderr
    assert "': 0 values sent, 0 dropped, in " in again.stdout
    assert again.stdout.rstrip().endswith(
        "; 4,000 were stored already (the first value of a step is kept)"
    )
    assert stored_series(sqlite_server, tenant.read, "exp-jsonl") == stored

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "loss": 1}\n{"step": 1, "loss": 2\n')
    failed = normwatch_import(
        sqlite_server,
        tenant.ingest,
        tmp_path / "spool",
        "jsonl",
        str(bad),
        "--name",
        "bad",
        "--no-progress",
    )
    assert failed.returncode == 1
    assert f"error: {bad}, line 2, column 22: not valid JSON" in failed.stderr


def test_cli_imports_a_wandb_csv(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    path = tmp_path / "history.csv"
    path.write_text(HISTORY_CSV)
    done = normwatch_import(
        sqlite_server,
        tenant.ingest,
        tmp_path / "spool",
        "wandb-csv",
        str(path),
        "--name",
        "wandb-run",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 5 steps (0..4) into run 'wandb-run': 11 values sent")
    assert "note: skipped W&B's own column '_runtime'" in done.stderr
    assert stored_series(sqlite_server, tenant.read, "wandb-run") == {
        "train/loss": [(0, 2.5), (2, "NaN"), (3, "Infinity"), (4, "-Infinity")],
        "grad/norm/total": [(0, 0.31), (1, "NaN"), (2, "Infinity"), (3, "-Infinity"), (4, 0.25)],
        "lr": [(1, 0.001), (3, 0.0001)],
    }


def test_cli_imports_a_tensorboard_logdir(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    write_logdir(tmp_path / "tb-run")
    done = normwatch_import(
        sqlite_server, tenant.ingest, tmp_path / "spool", "tensorboard", str(tmp_path / "tb-run")
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 7 steps (0..200) into run 'tb-run': 17 values sent")
    assert "note: skipped 'histo' values (only scalars are imported)" in done.stderr
    assert "tb-run: 12 events in " in done.stderr
    assert stored_series(sqlite_server, tenant.read, "tb-run") == TB_EXPECTED


def test_cli_reports_a_refused_token_and_a_missing_file(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0, "loss": 1}\n')
    refused = normwatch_import(
        sqlite_server, "nw_not-a-token", tmp_path / "spool", "jsonl", str(path)
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        f"error: the server at {sqlite_server.url} refused the token "
        '(HTTP 401: {"detail":"invalid or revoked token"})\n'
    )
    elsewhere = normwatch_import(
        sqlite_server, "t", tmp_path / "spool", "jsonl", str(path), "--url", "http://127.0.0.1:9"
    )
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.startswith("error: cannot reach the server at http://127.0.0.1:9: ")
    missing = normwatch_import(
        sqlite_server, "t", tmp_path / "spool", "wandb-csv", str(tmp_path / "none.csv")
    )
    assert missing.returncode == 2 and "error: no such file" in missing.stderr
