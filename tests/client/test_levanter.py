"""The Levanter tracker: conformance to Levanter's interface, and what reaches a server.

Levanter itself is no test dependency (see `normwatch.client.levanter`): the tracker is
bound to the transcription of its interface in `tests.helpers.levanter_interface`, and
configs are decoded by the real draccus. Runs go to a real server, or, where only what the
client sends matters, to `IngestRecorder` through `httpx.MockTransport`.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import draccus
import httpx
import jax.numpy as jnp
import numpy as np
import pytest

import tests.helpers.levanter_interface as levanter
from normwatch.client import Run
from normwatch.client._hparams import fit_config
from normwatch.client.levanter import NormwatchConfig, NormwatchTracker, register
from normwatch.testing import ServerProcess
from tests.helpers.api import client_for
from tests.helpers.ingest import IngestRecorder
from tests.helpers.tenants import Tenant, make_tenant

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "levanter"


@pytest.fixture(scope="module")
def registered() -> type[NormwatchConfig]:
    return register(levanter.TrackerConfig, levanter.Tracker)


@pytest.fixture
def tenant(pg_server: ServerProcess) -> Tenant:
    return make_tenant(pg_server.database_url)


@pytest.fixture
def reader(pg_server: ServerProcess, tenant: Tenant) -> Iterator[httpx.Client]:
    with client_for(pg_server, tenant, "read") as client:
        yield client


def tracker_for(
    server: ServerProcess, tenant: Tenant, tmp_path: Path, run_id: str, **fields: Any
) -> NormwatchTracker:
    config = NormwatchConfig(
        url=server.url, token=tenant.ingest, flush_interval=0.05, spool_dir=str(tmp_path), **fields
    )
    return config.init(run_id)


def series(reader: httpx.Client, run_id: str, metric: str) -> dict[int, object]:
    [got] = reader.get(f"/api/v1/runs/{run_id}/series", params={"metric": metric}).json()["series"]
    return dict(zip(got["steps"], got["values"], strict=True))


def the_run(reader: httpx.Client) -> dict[str, Any]:
    [listed] = reader.get("/api/v1/runs").json()
    run: dict[str, Any] = reader.get(f"/api/v1/runs/{listed['id']}").json()
    return run


# Levanter's interface ------------------------------------------------------------------

LEVANTER_METHODS = ["log_hyperparameters", "log", "log_summary", "log_artifact", "finish"]


@pytest.mark.parametrize("method", [*LEVANTER_METHODS, "log_html"])
def test_tracker_takes_the_arguments_levanter_passes(
    registered: type[NormwatchConfig], method: str
) -> None:
    tracker = registered(mode="disabled").init("run-1")
    theirs = list(inspect.signature(getattr(levanter.Tracker, method)).parameters.values())
    ours = list(inspect.signature(getattr(type(tracker), method)).parameters.values())
    shape = [(p.name, p.kind, p.default) for p in theirs]
    assert [(p.name, p.kind, p.default) for p in ours[: len(theirs)]] == shape
    assert all(p.default is not inspect.Parameter.empty for p in ours[len(theirs) :])


def test_registered_classes_are_levanters_and_complete(registered: type[NormwatchConfig]) -> None:
    assert levanter.Tracker.__abstractmethods__ == frozenset(LEVANTER_METHODS)
    tracker = registered(mode="disabled").init("run-1")
    assert isinstance(tracker, levanter.Tracker) and isinstance(tracker, NormwatchTracker)
    assert issubclass(registered, levanter.TrackerConfig) and not inspect.isabstract(registered)
    assert not inspect.isabstract(type(tracker)) and tracker.name == "normwatch"
    metrics = {"grad/norm/total": jnp.float32(1.0)}
    assert tracker._prepare_log(metrics) is metrics, "device values stay on the device"
    assert levanter.TrackerConfig.get_choice_class("normwatch") is registered
    assert register(levanter.TrackerConfig, levanter.Tracker) is registered


@dataclass
class Trainer:
    """The part of Levanter's ``TrainerConfig`` that holds trackers, typed as there."""

    id: str | None = None
    num_train_steps: int = 1
    tracker: levanter.TrackerConfig | tuple[levanter.TrackerConfig, ...] = field(
        default_factory=levanter.NoopConfig
    )


@dataclass
class ExampleJob:
    trainer: Trainer
    model: dict[str, int]
    optimizer: dict[str, float]


def test_the_example_config_decodes_to_the_normwatch_tracker(
    registered: type[NormwatchConfig],
) -> None:
    job = draccus.parse(
        ExampleJob,
        config_path=EXAMPLE / "config.yaml",
        args=["--trainer.num_train_steps", "5"],
    )
    assert job.trainer.tracker == registered(
        url="http://127.0.0.1:8000",
        project="demo",
        tags=["levanter", "example"],
        flush_interval=0.2,
    )
    assert type(job.trainer.tracker) is registered and job.trainer.num_train_steps == 5
    both = draccus.decode(
        Trainer, {"tracker": [{"type": "noop"}, {"type": "normwatch", "name": "exp"}]}
    )
    assert both.tracker == (levanter.NoopConfig(), registered(name="exp"))


# What reaches the server ---------------------------------------------------------------


def test_metrics_arrive_under_levanters_names_at_their_steps(
    pg_server: ServerProcess, tenant: Tenant, reader: httpx.Client, tmp_path: Path
) -> None:
    tracker = tracker_for(pg_server, tenant, tmp_path, "lev-names")
    tracker.log_hyperparameters(
        {"trainer": {"id": "lev-names", "tracker": {"token": tenant.ingest}}, "lr": 3e-4}
    )
    tracker.log_summary({"parameter_count": 1234})
    # Before any step (a preprocessing monitor): joins the first step.
    tracker.log({"preprocessing/docs": 10}, step=None, commit=False)
    # Step 100 (resumed from a checkpoint): the values from inside jit, then the
    # trainer's, which hand the step over.
    tracker.log(
        {"grad/norm/total": jnp.float32(0.5), "params/norm/layers.0.mlp.w1": np.float32(3.0)},
        step=100,
        commit=False,
    )
    tracker.log({"train/loss": 2.0, "updates/norm/total": jnp.asarray(0.25)}, step=100)
    # Step 101 gathers two commit=False calls and goes when step 102 starts.
    tracker.log({"grad/norm/total": 0.75}, step=101, commit=False)
    tracker.log({"eval": {"loss": 1.5}}, step=101, commit=False)
    tracker.log({"train/loss": 1.75}, step=102, commit=True)
    # After a commit, step=None is the next step; finish hands it over.
    tracker.log({"throughput/hook_time": 0.125}, step=None)
    tracker.finish()

    run = the_run(reader)
    assert (run["name"], run["status"], run["last_step"]) == ("lev-names", "finished", 103)
    assert run["config"] == {
        "trainer": {"id": "lev-names", "tracker": {"token": "<redacted>"}},
        "lr": 3e-4,
        "summary": {"parameter_count": 1234},
    }
    assert [s["start_step"] for s in run["segments"]] == [100]
    names = sorted(m["name"] for m in reader.get(f"/api/v1/runs/{run['id']}/metrics").json())
    assert names == [
        "eval/loss",
        "grad/norm/total",
        "params/norm/layers.0.mlp.w1",
        "preprocessing/docs",
        "throughput/hook_time",
        "train/loss",
        "updates/norm/total",
    ]
    assert series(reader, run["id"], "grad/norm/total") == {100: 0.5, 101: 0.75}
    assert series(reader, run["id"], "train/loss") == {100: 2.0, 102: 1.75}
    assert series(reader, run["id"], "preprocessing/docs") == {100: 10.0}
    assert series(reader, run["id"], "params/norm/layers.0.mlp.w1") == {100: 3.0}
    assert series(reader, run["id"], "updates/norm/total") == {100: 0.25}
    assert series(reader, run["id"], "eval/loss") == {101: 1.5}
    assert series(reader, run["id"], "throughput/hook_time") == {103: 0.125}


def test_a_job_resumed_below_the_last_step_opens_a_segment(
    pg_server: ServerProcess, tenant: Tenant, reader: httpx.Client, tmp_path: Path
) -> None:
    first = tracker_for(pg_server, tenant, tmp_path, "lev-resume")
    for step in range(10):
        first.log({"train/loss": 10.0 - step}, step=step)
    try:
        raise RuntimeError("preempted")
    except RuntimeError:
        first.finish()
    assert the_run(reader)["status"] == "failed"
    resumed = tracker_for(pg_server, tenant, tmp_path, "lev-resume")
    for step in range(6, 9):  # from the checkpoint at step 6
        resumed.log({"train/loss": 100.0 + step}, step=step)
    resumed.finish()

    run = the_run(reader)
    assert [(s["segment"], s["start_step"]) for s in run["segments"]] == [(1, 0), (2, 6)]
    assert run["status"] == "finished"
    assert series(reader, run["id"], "train/loss") == {
        **{step: 10.0 - step for step in range(6)},
        **{step: 100.0 + step for step in range(6, 9)},
    }


def test_later_hyperparameters_and_summaries_and_a_config_over_the_limit(
    pg_server: ServerProcess, tenant: Tenant, reader: httpx.Client, tmp_path: Path
) -> None:
    tracker = tracker_for(pg_server, tenant, tmp_path, "lev-later", tags=["32b"])
    shards = [f"gs://marin/tokenized/shard-{i:05d}.jsonl.zst" for i in range(4000)]
    tracker.log_hyperparameters({"data": {"train_urls": shards}, "lr": 1e-3})
    tracker.log({"train/loss": 3.0}, step=4)
    tracker.log_hyperparameters({"decayed_weights": ["w1", "w2"], "token": tenant.ingest})
    tracker.log_summary({"throughput/p50_mfu": 41.5, "throughput/device_kind": "TPU v5"})
    tracker.log_artifact(tmp_path / "config.yaml", name="config.yaml", type="config")
    tracker.log({"train/loss": 2.5}, step=5)
    tracker.finish()

    run = the_run(reader)
    assert run["tags"] == ["32b"]
    omitted = run["config"]["data"]["train_urls"]
    assert omitted == f"<{len(json.dumps(shards, separators=(',', ':')))} bytes omitted>"
    assert run["config"]["lr"] == 1e-3
    events = reader.get(f"/api/v1/runs/{run['id']}/events").json()
    assert [(e["step"], e["kind"], e["text"]) for e in events] == [
        (4, "config", 'hyperparameters: {"decayed_weights":["w1","w2"],"token":"<redacted>"}')
    ]
    assert series(reader, run["id"], "summary/throughput/p50_mfu") == {4: 41.5}
    assert series(reader, run["id"], "train/loss") == {4: 3.0, 5: 2.5}


# Values, failures and configuration -----------------------------------------------------


@dataclass
class SummaryStats:
    """Levanter's ``SummaryStats``: its scalars, and a histogram of buckets."""

    min: Any
    max: Any
    num: Any
    nonzero_count: Any
    sum: Any
    sum_squares: Any
    mean: Any
    variance: Any
    rms: Any
    histogram: Any = None


@dataclass
class OlderHistogram:
    """The older Levanter's ``Histogram``: reductions, buckets, and ``mean``/``variance``
    computed when read."""

    min: Any
    max: Any
    num: Any
    sum: Any
    sum_squares: Any
    bucket_limits: Any
    bucket_counts: Any

    @property
    def mean(self) -> Any:
        return self.sum / self.num

    @property
    def variance(self) -> Any:
        return self.sum_squares / self.num - self.mean**2


@dataclass
class Buckets:
    bucket_limits: Any
    bucket_counts: Any


def recorded_tracker(recorder: IngestRecorder, tmp_path: Path) -> NormwatchTracker:
    return NormwatchConfig(
        url="http://normwatch.test",
        token="nw_ingest_test",
        flush_interval=0.05,
        spool_dir=str(tmp_path),
    ).init("values", transport=httpx.MockTransport(recorder.handle))


def test_statistics_are_expanded_and_other_non_scalars_dropped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = IngestRecorder()
    tracker = recorded_tracker(recorder, tmp_path)
    values = jnp.asarray([1.0, 1.0, 7.0, 7.0])
    counts, limits = np.histogram(np.asarray(values), bins=2)
    stats = SummaryStats(
        *(jnp.float32(x) for x in (1.0, 7.0, 4.0, 4.0, 16.0, 100.0, 4.0, 9.0, 5.0)),
        histogram=Buckets(limits, counts),
    )
    older = OlderHistogram(
        values.min(), values.max(), 4, values.sum(), (values**2).sum(), limits, counts
    )
    for step in (0, 1):
        tracker.log(
            {
                "grad/norm/total": 0.5,
                "grad/hist/w1": stats,
                "params/hist/w1": older,
                "buckets": Buckets(limits, counts),
                "text": "hello",
                "vector": np.ones(3),
            },
            step=step,
        )
    tracker.finish()

    statistics = [
        "min",
        "max",
        "num",
        "nonzero_count",
        "sum",
        "sum_squares",
        "mean",
        "variance",
        "rms",
    ]
    at_one = {name: value for (step, name), value in recorder.points.items() if step == 1}
    assert at_one == {
        "grad/norm/total": 0.5,
        **{
            f"grad/hist/w1/{s}": v
            for s, v in zip(
                statistics, (1.0, 7.0, 4.0, 4.0, 16.0, 100.0, 4.0, 9.0, 5.0), strict=True
            )
        },
        **{
            f"params/hist/w1/{s}": v
            for s, v in {
                "min": 1.0,
                "max": 7.0,
                "num": 4.0,
                "sum": 16.0,
                "sum_squares": 100.0,
                "mean": 4.0,
                "variance": 9.0,
            }.items()
        },
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "dropped buckets, a Buckets: normwatch stores real scalars only",
        "dropped text, a str: normwatch stores real scalars only",
        "dropped vector, a ndarray of shape (3,): normwatch stores real scalars only",
    ]


def test_a_failing_server_or_bad_calls_never_reach_the_trainer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    tracker = NormwatchConfig(
        url="http://normwatch.test", token="t", spool_dir=str(tmp_path), finish_timeout=0.3
    ).init("down", transport=httpx.MockTransport(refuse))
    tracker.log({"train/loss": 1.0}, step=0)
    tracker.log({"train/loss": 1.0}, step=-1)
    tracker.log({"train/loss": 1.0}, step="seven")  # type: ignore[arg-type]
    tracker.log(None, step=2)  # type: ignore[arg-type]
    tracker.log_hyperparameters(None)  # type: ignore[arg-type]
    started = time.monotonic()
    tracker.finish()
    assert time.monotonic() - started < 5.0
    tracker.finish()
    tracker.log({"train/loss": 1.0}, step=3)  # after finish: dropped
    run = tracker.run
    assert isinstance(run, Run) and run.pending_points == 1 and run.sent_points == 0
    dropped = [r.getMessage() for r in caplog.records if "dropped a log()" in r.getMessage()]
    assert len(dropped) == 3

    def cannot_start(config: dict[str, object], start_step: int | None) -> Run:
        raise OSError("no space left for the spool")

    broken = NormwatchTracker(cannot_start)
    broken.log({"train/loss": 1.0}, step=0)
    broken.log_summary({"x": 1})
    broken.finish()
    assert broken.run is None
    assert "could not start the normwatch run" in caplog.text


def test_disabled_and_misconfigured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NORMWATCH_URL", raising=False)
    monkeypatch.delenv("NORMWATCH_TOKEN", raising=False)
    monkeypatch.setenv("NORMWATCH_MODE", "disabled")
    quiet = NormwatchConfig().init("x")
    quiet.log({"train/loss": 1.0}, step=0)
    quiet.finish()
    assert quiet.run is None
    monkeypatch.delenv("NORMWATCH_MODE")
    with pytest.raises(ValueError, match="NORMWATCH_TOKEN"):
        NormwatchConfig(url="http://127.0.0.1:9").init("x")
    monkeypatch.setenv("NORMWATCH_TOKEN", "t")
    with pytest.raises(ValueError, match=r"trainer\.id"):
        NormwatchConfig(url="http://127.0.0.1:9").init(None)
    with pytest.raises(ValueError, match="online or disabled"):
        NormwatchConfig(url="http://127.0.0.1:9", mode="offline").init("x")
    with pytest.raises(ValueError, match="flush_interval"):
        NormwatchConfig(url="http://127.0.0.1:9", flush_interval=0).init("x")
    assert "nw_secret" not in repr(NormwatchConfig(token="nw_secret"))


@pytest.mark.parametrize(
    "document",
    [
        {"lr": 1e-3},
        {"urls": [f"gs://b/{i:05d}" for i in range(5000)], "lr": 1e-3},
        {"model": {"layers": [{"name": "x" * 300, "dim": i} for i in range(200)]}, "seed": 0},
        {str(i): i for i in range(3000)},
        {"a": {"b": {"c": "y" * 5000}}, "d": "z" * 5000},
    ],
)
def test_fit_config_stays_under_the_limit_and_keeps_what_fits(document: dict[str, Any]) -> None:
    limit = 2000
    cut = fit_config(document, limit)
    assert len(json.dumps(cut, separators=(",", ":")).encode()) <= limit
    if len(json.dumps(document, separators=(",", ":"))) <= limit:
        assert cut == document
    else:
        small = {k: v for k, v in document.items() if len(json.dumps(v)) < 20}
        assert {k: cut[k] for k in small if k in cut} == {
            k: v for k, v in small.items() if k in cut
        }
        assert cut != document


# The example ----------------------------------------------------------------------------


def test_the_example_trains_and_streams_through_the_tracker(
    pg_server: ServerProcess, tenant: Tenant, reader: httpx.Client, tmp_path: Path
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "train.py"),
            *("--url", pg_server.url, "--project", tenant.project, "--steps", "12"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "NORMWATCH_TOKEN": tenant.ingest,
            "NORMWATCH_SPOOL_DIR": str(tmp_path),
        },
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run = the_run(reader)
    assert (run["name"], run["status"], run["last_step"]) == ("levanter-mlp", "finished", 11)
    assert run["tags"] == ["example", "levanter"]
    assert run["config"]["optimizer"] == {"learning_rate": 0.01, "weight_decay": 0.0001}
    assert run["config"]["summary"]["parameter_count"] == 8 * 32 + 2 * (32 * 32 + 32) + 32
    names = {m["name"] for m in reader.get(f"/api/v1/runs/{run['id']}/metrics").json()}
    leaves = ["embed.weight", "layers.0.weight", "layers.0.bias", "layers.1.weight", "head.weight"]
    assert names == {
        "train/loss",
        "optim/learning_rate",
        "throughput/loading_time",
        "throughput/duration",
        *(
            f"{kind}/norm/{leaf}"
            for kind in ("grad", "params", "updates")
            for leaf in [*leaves, "layers.1.bias", "total"]
        ),
    }
    losses = series(reader, run["id"], "train/loss")
    assert list(losses) == list(range(12))
    assert series(reader, run["id"], "grad/norm/total").keys() == losses.keys()
    assert f"final loss {losses[11]:.4f}" in result.stdout
