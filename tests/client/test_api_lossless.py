"""Values read back through the HTTP API as they were logged, before and after compaction,
on each backend: `Api.history`, the CSV and JSON-lines exports and a series read at full
resolution give every float64 bit for bit (the server compacts losslessly by default)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from normwatch.client import Api
from normwatch.server.db import build_engine, session_factory
from normwatch.testing import ServerProcess
from tests.helpers.committed import Sessions, compact
from tests.helpers.tenants import Tenant

LOSS = "train/loss"
LOGGED = [  # nothing past float32's range, which alone would keep a float32 chunk float64
    16.017241,
    1 / 3,
    float(2**53 + 1),  # 2**53: the float64 a trainer's 2**53 + 1 becomes
    float(2**53 + 2),
    1e-50,
    5e-324,
    -0.0,
    2.99993896484375,
    math.nan,
    math.inf,
    -math.inf,
]
SPELLED = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


@pytest.fixture
def sessions(server: ServerProcess) -> Iterator[Sessions]:
    engine = build_engine(server.database_url, pool_size=2)
    yield session_factory(engine)
    engine.dispose()


def bits(values: list[Any]) -> list[int | None]:
    """Each value's bits (one NaN for all); None stays None."""
    out: list[int | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        x = float(v)
        out.append(int(np.array([math.nan if x != x else x]).view(np.uint64)[0]))
    return out


def reads(api: Api, run_id: str, tmp_path: Path) -> dict[str, list[int | None]]:
    """The logged metric's values from each reader, as bits."""
    history = api.history(run_id, LOSS)
    assert history["step"] == list(range(len(LOGGED)))
    rows = list(csv.reader(api.export(run_id, LOSS, tmp_path / "out.csv").read_text().splitlines()))
    assert rows[0] == ["step", LOSS]
    lines = api.export(run_id, LOSS, tmp_path / "out.jsonl").read_text().splitlines()
    jsonl = [json.loads(line)[LOSS] for line in lines]
    [series] = api.series(run_id, LOSS, points=len(LOGGED))
    assert series["steps"] == list(range(len(LOGGED))) and not series["downsampled"]
    return {
        "history": bits(history[LOSS]),
        "csv": bits([cell for _, cell in rows[1:]]),
        "jsonl": bits([{v: k for k, v in SPELLED.items()}.get(v, v) for v in jsonl]),
        "series": bits([{v: k for k, v in SPELLED.items()}.get(v, v) for v in series["values"]]),
    }


def test_every_reader_gives_the_logged_float64s_after_compaction(
    server: ServerProcess, tenant: Tenant, sessions: Sessions, tmp_path: Path
) -> None:
    created = httpx.post(
        f"{server.url}/api/v1/runs", json={"name": "exact"}, headers=tenant.headers("ingest")
    )
    assert created.status_code == 200, created.text
    run_id = str(created.json()["id"])
    body = {
        "steps": list(range(len(LOGGED))),
        "metrics": {LOSS: [SPELLED.get(repr(v), v) for v in LOGGED]},
    }
    sent = httpx.post(
        f"{server.url}/api/v1/runs/{run_id}/metrics", json=body, headers=tenant.headers("ingest")
    )
    assert sent.status_code == 202, sent.text
    want = bits(LOGGED)
    with Api(server.url, tenant.read) as api:
        hot = reads(api, run_id, tmp_path)
        assert hot == {reader: want for reader in hot}
        compact(sessions, run_id)  # what the server's compactor does, at its defaults
        compacted = reads(api, run_id, tmp_path)
        assert compacted == {reader: want for reader in compacted}
        history = api.history(run_id, LOSS)[LOSS]
    assert history[:6] == [16.017241, 1 / 3, 2.0**53, 2.0**53 + 2, 1e-50, 5e-324]
    assert math.copysign(1.0, history[6]) == -1.0
