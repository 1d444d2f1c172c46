"""What a trainer logs comes back as the same float64 from every reader of a real server on
each backend: `Api.history` and `history_frame`, the export in CSV (read by Python and
pandas), JSON lines and Parquet (pyarrow and pandas), a series at full resolution and a
spike's ``peak_value``, before and after compaction (as float64). A float32 from JAX or
NumPy arrives as its exact float64. A metric
named ``step`` (logged by a trainer, or imported with ``--step-key``) keeps its own column
everywhere, and formula-like names come back exact from `history` while the CSV header
neutralises them."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import jax.numpy as jnp
import numpy as np
import orjson
import pandas as pd
import pyarrow.parquet as pq
import pytest

from normwatch.client import Api, Run
from normwatch.client._packed import PackedMetrics
from normwatch.server.db import build_engine, session_factory
from normwatch.server.storage.policy import Policy
from normwatch.testing import ServerProcess
from tests.helpers.committed import compact, count_rows
from tests.helpers.floats import TRICKY_FLOATS, bits
from tests.helpers.tenants import Tenant

N = 400
PEAK = 300


@pytest.fixture
def api(server: ServerProcess, tenant: Tenant) -> Any:
    with Api(server.url, tenant.read) as client:
        yield client


def logged_through_the_client(
    server: ServerProcess, tenant: Tenant, spool: Path, name: str, rows: list[dict[str, Any]]
) -> str:
    """``rows[s]`` logged at step ``s`` by the trainer client; the run's id."""
    run = Run(server.url, token=tenant.ingest, name=name, start_step=0, spool_dir=spool)
    for step, metrics in enumerate(rows):
        run.log(metrics, step=step)
    run.finish()
    assert run.pending_points == 0 and run.run_id is not None
    return run.run_id


def every_reader(api: Api, run_id: str, names: list[str], tmp_path: Path) -> dict[str, Any]:
    """Each name's values at every step, as each reader gives them (None where absent)."""
    history = api.history(run_id, names)
    frame = api.history_frame(run_id, names)
    csv_path = api.export(run_id, names, tmp_path / "x.csv")
    rows = list(csv.reader(io.StringIO(csv_path.read_text(), newline="")))
    pandas_csv = pd.read_csv(csv_path, keep_default_na=False, na_values=["NaN", ""])
    jsonl = [
        orjson.loads(line)
        for line in api.export(run_id, names, tmp_path / "x.jsonl").read_bytes().splitlines()
    ]
    parquet_path = api.export(run_id, names, tmp_path / "x.parquet")
    table = pq.read_table(parquet_path).to_pydict()
    pandas_parquet = pd.read_parquet(parquet_path)
    series = {s["metric"]: s for s in api.series(run_id, names, points=20_000)}
    out: dict[str, Any] = {"steps": history["step"]}
    for i, name in enumerate(names, start=1):
        assert not series[name]["downsampled"]
        by_step = dict(zip(series[name]["steps"], series[name]["values"], strict=True))
        out[name] = {
            "history": history[name],
            "history_frame": frame[name].tolist(),
            "csv": [float(row[i]) if row[i] else None for row in rows[1:]],
            "pandas csv": pandas_csv.iloc[:, i].tolist(),
            "jsonl": [row[name] for row in jsonl],
            "parquet": table[name],
            "pandas parquet": pandas_parquet[name].tolist(),
            "series": [by_step.get(step) for step in history["step"]],
        }
        assert frame["step"].tolist() == history["step"] == table["step"]
    return out


def test_float32s_from_jax_arrive_exact_and_every_reader_gives_the_number_logged(
    server: ServerProcess, tenant: Tenant, api: Api, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    grad = (1.0 + 0.01 * rng.standard_normal(N)).astype(np.float32)
    grad[PEAK] = np.float32(2.99993896484375)
    rows: list[dict[str, Any]] = [
        {
            "grad/norm/total": jnp.asarray(grad[s]),  # a float32 on the device
            "params/norm/total": np.float32(grad[s] * 80),  # a NumPy float32
            "odd": TRICKY_FLOATS[s % len(TRICKY_FLOATS)],  # a Python float
            "bf16": jnp.asarray(grad[s], jnp.bfloat16),
        }
        for s in range(N)
    ]
    packed = ["packed/a", "packed/b"]
    rows += [
        PackedMetrics(packed, jnp.asarray([grad[s], grad[s] / 3], jnp.float32)) for s in range(N)
    ]
    run_id = logged_through_the_client(server, tenant, tmp_path / "spool", "exact", rows)
    want = {
        "grad/norm/total": [float(v) for v in grad] + [None] * N,  # float(np.float32): exact
        "params/norm/total": [float(np.float32(v * 80)) for v in grad] + [None] * N,
        "odd": [TRICKY_FLOATS[s % len(TRICKY_FLOATS)] for s in range(N)] + [None] * N,
        "bf16": [float(jnp.asarray(v, jnp.bfloat16).astype(jnp.float32)) for v in grad]
        + [None] * N,
        "packed/a": [None] * N + [float(v) for v in grad],
        "packed/b": [None] * N + [float(np.float32(v / 3)) for v in grad],
    }
    assert want["grad/norm/total"][PEAK] == 2.99993896484375
    assert 0.8963446021080017 == float(np.float32(0.8963446))  # such values, not 0.8963446

    for stored in ("hot", "compacted as float64"):
        if stored != "hot":
            engine = build_engine(server.database_url, pool_size=1)
            try:
                sessions = session_factory(engine)
                compact(sessions, run_id, Policy(precision="float64"))
                assert count_rows(sessions, run_id, "blocks") == 0
                assert count_rows(sessions, run_id, "chunks") > 0
            finally:
                engine.dispose()
        read = every_reader(api, run_id, list(want), tmp_path)
        assert read["steps"] == list(range(2 * N))
        for name, values in want.items():
            logged = [v for v in values if v is not None]
            for reader, got in read[name].items():
                present = [v for v in got if v is not None and v == v]  # pandas: NaN if absent
                assert bits(present) == bits(logged), (stored, name, reader)

    spikes = api.spikes(run_id, "grad/norm/total")
    [spike] = [s for s in spikes["spikes"] if s["peak"] == PEAK]
    assert bits([spike["peak_value"]]) == bits([2.99993896484375])


def test_a_metric_named_step_keeps_its_own_column_in_history_and_every_export(
    server: ServerProcess, tenant: Tenant, api: Api, tmp_path: Path
) -> None:
    rows = [{"step": 0.5 * s, "loss": 3.0 - s / 100} for s in range(10, 20)]
    # The trainer logs from step 0; the first ten steps hold nothing.
    run_id = logged_through_the_client(
        server, tenant, tmp_path / "spool", "stepped", [{}] * 10 + rows
    )
    h = api.history(run_id, ["step", "loss"])
    assert list(h) == ["step", "step (metric)", "loss"]
    assert h["step"] == list(range(10, 20))
    assert h["step (metric)"] == [0.5 * s for s in range(10, 20)]
    frame = api.history_frame(run_id, ["step", "loss"])
    assert list(frame.columns) == ["step", "step (metric)", "loss"]
    assert frame["step"].tolist() == list(range(10, 20))
    text = api.export(run_id, ["step", "loss"], tmp_path / "s.csv").read_text()
    assert text.splitlines()[:2] == ["step,step (metric),loss", "10,5.0,2.9"]
    [first, *_] = api.export(run_id, ["step"], tmp_path / "s.jsonl").read_bytes().splitlines()
    assert orjson.loads(first) == {"step": 10, "step (metric)": 5.0}
    parquet = api.export(run_id, ["step", "loss"], tmp_path / "s.parquet")
    assert pq.read_table(parquet).column_names == ["step", "step (metric)", "loss"]
    assert pd.read_parquet(parquet)["step (metric)"].tolist() == [0.5 * s for s in range(10, 20)]


def test_a_step_field_imported_beside_step_key_is_a_metric_of_its_own(
    server: ServerProcess, tenant: Tenant, api: Api, tmp_path: Path
) -> None:
    path = tmp_path / "scheduler.jsonl"
    path.write_text(
        "".join(
            json.dumps({"global_step": 100 + s, "step": s, "loss": 2.0 + s / 8}) + "\n"
            for s in range(5)
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "normwatch",
            "import",
            "jsonl",
            str(path),
            "--step-key",
            "global_step",
            "--no-progress",
        ],
        env={
            **os.environ,
            "NORMWATCH_URL": server.url,
            "NORMWATCH_TOKEN": tenant.ingest,
            "NORMWATCH_SPOOL_DIR": str(tmp_path / "spool"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    [run] = api.runs(name="scheduler")
    assert api.history(run["id"], ["step", "loss"]) == {
        "step": [100, 101, 102, 103, 104],
        "step (metric)": [0.0, 1.0, 2.0, 3.0, 4.0],
        "loss": [2.0, 2.125, 2.25, 2.375, 2.5],
    }


FORMULAS = [
    '=HYPERLINK("http://evil.example","x")',
    "+SUM(1+1)",
    "@SUM(1,1)",
    "-loss",
    "'quoted",
    'say "hi", then',
]
"""Names ingest takes (no control characters) that a spreadsheet or a CSV reader could
take for something else."""


def test_formula_like_names_come_back_exact_from_history_and_neutralised_in_the_csv(
    server: ServerProcess, tenant: Tenant, api: Api, tmp_path: Path
) -> None:
    rows = [{name: float(i + s) for i, name in enumerate(FORMULAS)} for s in range(3)]
    run_id = logged_through_the_client(server, tenant, tmp_path / "spool", "formulas", rows)
    h = api.history(run_id, FORMULAS)
    assert h == {
        "step": [0, 1, 2],
        **{n: [float(i + s) for s in range(3)] for i, n in enumerate(FORMULAS)},
    }
    assert list(api.history_frame(run_id, FORMULAS).columns) == ["step", *FORMULAS]
    text = api.export(run_id, FORMULAS, tmp_path / "f.csv").read_text()
    header = next(csv.reader(io.StringIO(text, newline="")))
    assert header == ["step", *("'" + n if n[0] in "=+@-'" else n for n in FORMULAS)]
    r = httpx.get(
        f"{server.url}/api/v1/runs/{run_id}/export",
        params={"metric": FORMULAS, "format": "jsonl"},
        headers=tenant.headers("read"),
    )
    assert list(orjson.loads(r.content.splitlines()[0])) == ["step", *FORMULAS]
