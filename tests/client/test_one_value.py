"""One point, one value, through the real client and a real server on each backend: a
metric logged twice at a step keeps its first value whether the two calls fall in one
flush or in two batches, what is not stored is counted on the `Run`, and each metric is
named once in a warning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from normwatch.client import Api, Run
from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_first_value_stands_within_a_flush_and_across_batches(
    server: ServerProcess, tenant: Tenant, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = {
        "token": tenant.ingest,
        "name": "twice",
        "spool_dir": tmp_path / "spool",
    }
    with caplog.at_level(logging.WARNING, logger="normwatch.client"):
        first = Run(server.url, flush_interval=30.0, **options)  # one flush: finish sends it
        for step in range(10):
            first.log({"loss": float(step), "lr": 0.5}, step=step)
            first.log({"loss": -1.0, "gnorm": 2.0}, step=step)  # loss again: not stored
        first.finish(timeout=30.0)
        local = warnings_of(caplog)
        assert (first.sent_points, first.ignored_points) == (30, 10)
        assert len(local) == 1 and "'loss' was logged more than once at step 0" in local[0]

        caplog.clear()
        # The same name again without start_step: the same segment, so steps 5..9 are
        # points the server holds; the later values are counted, not stored.
        second = Run(server.url, flush_interval=0.05, max_batch_points=6, **options)
        for step in range(5, 15):
            second.log({"loss": 100.0 + step, "lr": 0.5}, step=step)
        second.finish(timeout=30.0)
    assert (second.sent_points, second.ignored_points, second.pending_points) == (10, 10, 0)
    remote = warnings_of(caplog)
    # Steps 5..9 span two batches of the second run: one warning a metric all the same.
    assert len(remote) == 2 and all("start_step=" in m for m in remote)
    assert "already held values of 'loss'" in remote[0] and "values of 'lr'" in remote[1]

    with Api(server.url, tenant.read) as api:
        [run] = api.runs(project=tenant.project)
        got = api.history(run["id"], ["loss", "lr", "gnorm"])
    assert got["step"] == list(range(15))
    assert got["loss"] == [float(s) for s in range(10)] + [100.0 + s for s in range(10, 15)]
    assert got["lr"] == [0.5] * 15
    assert got["gnorm"] == [2.0] * 10 + [None] * 5


def test_a_restart_from_a_checkpoint_logs_new_points(
    server: ServerProcess, tenant: Tenant, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = {"token": tenant.ingest, "name": "restart", "spool_dir": tmp_path / "spool"}
    with Run(server.url, **options) as first:
        for step in range(10):
            first.log({"loss": 1.0}, step=step)
    with caplog.at_level(logging.WARNING, logger="normwatch.client"):
        with Run(server.url, start_step=5, **options) as second:
            for step in range(5, 12):
                second.log({"loss": 2.0}, step=step)
    assert (second.segment, second.sent_points, second.ignored_points) == (2, 7, 0)
    assert warnings_of(caplog) == []
    with Api(server.url, tenant.read) as api:
        [run] = api.runs(project=tenant.project)
        got = api.history(run["id"], ["loss"])
    assert got["loss"] == [1.0] * 5 + [2.0] * 7
