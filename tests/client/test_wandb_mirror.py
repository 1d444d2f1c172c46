"""`normwatch.client.wandb_mirror` beside real wandb runs, offline.

What normwatch receives is compared, step for step, with what wandb itself recorded, read
back from the run's own transaction log (`tests.helpers.wandb_history`), not with what the
test logged. wandb runs offline, with its server URL pointing at a closed port, so nothing
can leave the machine; its service process is torn down with the module's last test.
"""

from __future__ import annotations

import doctest
import math
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import wandb

from normwatch.client import MemoryTracker, Run, _wandb_rules
from normwatch.client.wandb_mirror import mirror_wandb
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant
from tests.helpers.wandb_history import recorded_numbers, same_number

from .fake_ingest import TOKEN, URL, FakeIngest

WANDB_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_CONSOLE": "off",
    "WANDB_ERROR_REPORTING": "false",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_BASE_URL": "http://127.0.0.1:9",
}

Call = tuple[dict[str, Any], dict[str, Any]]
"""One ``run.log(data, **options)``."""

Rows = dict[int, dict[str, float]]


def wandb_services() -> list[int]:
    """Process ids of wandb-core services started by this process."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"wandb-core" in command:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """wandb's environment, shared by the module's runs (one service for all of them)."""
    path = tmp_path_factory.mktemp("wandb")
    env = {**WANDB_ENV, "WANDB_DIR": str(path)}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield path
    finally:
        wandb.teardown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert wandb_services() == [], "wandb.teardown() left the wandb-core service running"


def start_wandb(wandb_dir: Path, **options: Any) -> wandb.Run:
    return wandb.init(
        project="normwatch-mirror",
        dir=wandb_dir,
        config={"lr": 3e-4, "model": {"layers": 2}},
        settings=wandb.Settings(x_disable_stats=True),
        **options,
    )


@pytest.fixture
def wandb_run(wandb_dir: Path) -> Iterator[wandb.Run]:
    run = start_wandb(wandb_dir)
    yield run
    run.finish()


@pytest.fixture
def ingest() -> FakeIngest:
    return FakeIngest()


@pytest.fixture
def make_run(ingest: FakeIngest, tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def make(**options: Any) -> Run:
        run = Run(
            URL,
            token=TOKEN,
            **{
                "name": "exp1",
                "flush_interval": 0.05,
                "transport": ingest.transport(),
                "spool_dir": tmp_path / "spool",
            }
            | options,
        )
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.finish(timeout=1.0)


def wandb_record(run: wandb.Run) -> Rows:
    """The numeric history rows wandb recorded for a finished ``run``."""
    return recorded_numbers(Path(run.settings.sync_file))


def received(ingest: FakeIngest) -> Rows:
    rows: Rows = {}
    for (step, name), value in ingest.points.items():
        rows.setdefault(step, {})[name] = float(value)  # type: ignore[arg-type]
    return rows


def assert_same_rows(got: Rows, want: Rows) -> None:
    assert sorted(got) == sorted(want)
    for step, row in want.items():
        assert sorted(got[step]) == sorted(row), f"metrics at step {step}"
        for name, value in row.items():
            assert same_number(got[step][name], value), f"{name} at step {step}"


SCENARIOS: dict[str, tuple[list[Call], list[int]]] = {
    # (calls, the steps wandb records them at)
    "implicit steps": (
        [({"loss": 3.0}, {}), ({"loss": 2.5}, {}), ({"loss": 2.0, "lr": 1e-3}, {})],
        [0, 1, 2],
    ),
    "commit=False accumulates": (
        [
            ({"a": 1.0}, {"commit": False}),
            ({"b": 2.0, "a": 1.5}, {"commit": False}),
            ({"c": 3.0}, {}),
            ({"a": 4.0}, {"commit": True}),
        ],
        [0, 1],
    ),
    "explicit steps": (
        [
            ({"a": 1.0}, {"step": 5}),
            ({"b": 2.0}, {"step": 5}),
            ({"a": 3.0}, {"step": 7}),
            ({"c": 4.0}, {"step": 7, "commit": True}),
            ({"d": 5.0}, {}),
            ({"e": 6.0}, {"step": 12, "commit": False}),
        ],
        [5, 7, 8, 12],
    ),
    "a backwards step is dropped": (
        [
            ({"a": 1.0}, {"step": 10}),
            ({"a": 2.0}, {"step": 4}),
            ({"b": 3.0}, {"step": 4, "commit": True}),
            ({"c": 4.0}, {}),
            ({"a": 5.0}, {"step": 10}),
            ({"a": 6.0}, {}),
        ],
        [10, 11],
    ),
    "nested dicts": (
        [
            ({"train": {"loss": 1.0, "opt": {"lr": 1e-3}}, "val.acc": 0.5}, {}),
            ({"train": {"loss": 0.9}, "val": {"acc": 0.6, "note": "ok"}}, {}),
        ],
        [0, 1],
    ),
    "non-scalars are skipped": (
        [
            (
                {
                    "loss": 1.0,
                    "hist": wandb.Histogram(np.arange(10)),
                    "table": wandb.Table(columns=["x"], data=[[1]]),
                    "html": wandb.Html("<b>spike</b>"),
                    "text": "warmup",
                    "flag": True,
                    "vector": [1.0, 2.0],
                    "grads": np.arange(40.0),
                    "small": np.arange(3.0),
                    "one": np.array([2.5]),
                    "f32": np.float32(0.5),
                    "i64": np.int64(7),
                    "bool_array": np.array([True]),
                    "nan": math.nan,
                    "inf": -math.inf,
                    "none": None,
                },
                {},
            ),
            ({"hist": wandb.Histogram(np.arange(5))}, {}),
            ({"loss": 0.5}, {}),
        ],
        [0, 2],
    ),
}


@pytest.mark.parametrize("calls, steps", SCENARIOS.values(), ids=list(SCENARIOS))
def test_normwatch_gets_what_wandb_records_step_for_step(
    wandb_run: wandb.Run,
    ingest: FakeIngest,
    make_run: Callable[..., Run],
    calls: list[Call],
    steps: list[int],
) -> None:
    run = make_run()
    mirror_wandb(run, wandb_run=wandb_run)
    for data, options in calls:
        wandb_run.log(data, **options)
    wandb_run.finish()  # finishes the normwatch run too, which sends everything

    recorded = wandb_record(wandb_run)
    assert sorted(recorded) == steps
    assert_same_rows(received(ingest), recorded)
    assert run.dropped_points == 0, "nothing the mirror forwarded was refused by Run.log"


def test_a_random_mix_of_calls_lands_where_wandb_puts_it(
    wandb_run: wandb.Run, ingest: FakeIngest, make_run: Callable[..., Run]
) -> None:
    rng = random.Random(1295)
    mirror = mirror_wandb(make_run(), wandb_run=wandb_run)
    explicit = 0
    for i in range(120):
        options: dict[str, Any] = {}
        if rng.random() < 0.5:
            explicit = max(0, explicit + rng.choice([-3, -1, 0, 0, 1, 2, 5]))
            options["step"] = explicit
        if rng.random() < 0.5:
            options["commit"] = rng.random() < 0.5
        wandb_run.log({f"m{rng.randrange(4)}": float(i), "i": i}, **options)
    tracked = mirror.step
    assert tracked == wandb_run.step, "the mirror's step count follows wandb-core's"
    wandb_run.finish()

    recorded = wandb_record(wandb_run)
    assert len(recorded) > 20
    assert_same_rows(received(ingest), recorded)


def test_custom_step_axes_keep_wandbs_step_without_its_synced_copies(
    wandb_run: wandb.Run, ingest: FakeIngest, make_run: Callable[..., Run]
) -> None:
    mirror_wandb(make_run(), wandb_run=wandb_run)
    wandb_run.define_metric("trainer/step")
    wandb_run.define_metric("train/*", step_metric="trainer/step")
    wandb_run.log({"trainer/step": 100, "train/loss": 1.0})
    wandb_run.log({"train/loss": 0.9})
    wandb_run.log({"trainer/step": 200})
    wandb_run.log({"train/loss": 0.8})
    wandb_run.finish()

    recorded = wandb_record(wandb_run)
    # wandb copies the axis's last value into each row that logs a metric on that axis.
    assert (recorded[1].pop("trainer/step"), recorded[3].pop("trainer/step")) == (100, 200)
    assert_same_rows(received(ingest), recorded)


def test_nested_names_can_take_another_separator(wandb_run: wandb.Run) -> None:
    tracker = MemoryTracker()
    mirror_wandb(tracker, wandb_run=wandb_run, separator="/")
    wandb.log({"train": {"loss": 1.0, "opt": {"lr": 1e-3}}})
    assert tracker.history == [(0, {"train/loss": 1.0, "train/opt/lr": 1e-3})]


def test_wandb_log_run_log_and_wandb_run_log_are_all_mirrored(wandb_run: wandb.Run) -> None:
    tracker = MemoryTracker()
    mirror_wandb(tracker)  # the current wandb.run
    wandb.log({"a": 1.0})
    wandb_run.log({"a": 2.0})
    assert wandb.run is not None
    wandb.run.log({"a": 3.0}, step=5)
    wandb.finish()

    assert tracker.history == [(0, {"a": 1.0}), (1, {"a": 2.0}), (5, {"a": 3.0})]
    assert {step: row["a"] for step, row in wandb_record(wandb_run).items()} == {
        0: 1.0,
        1: 2.0,
        5: 3.0,
    }
    assert tracker.status == "finished"


def test_stop_undoes_the_mirror_and_wandb_goes_on_alone(wandb_run: wandb.Run) -> None:
    tracker = MemoryTracker()
    mirror = mirror_wandb(tracker, wandb_run=wandb_run)
    assert {"_log", "_finish"} <= set(vars(wandb_run))
    wandb.log({"a": 1.0})
    mirror.stop()
    mirror.stop()
    assert not mirror.active
    assert not {"_log", "_finish"} & set(vars(wandb_run)), "the run's own methods are back"
    wandb.log({"a": 2.0})
    wandb_run.log({"a": 3.0})
    wandb.finish()

    assert tracker.history == [(0, {"a": 1.0})]
    assert tracker.status is None, "a stopped mirror does not finish the tracker"
    assert sorted(wandb_record(wandb_run)) == [0, 1, 2]


def test_a_later_mirror_picks_up_at_wandbs_step(wandb_run: wandb.Run) -> None:
    first = MemoryTracker()
    mirror = mirror_wandb(first, wandb_run=wandb_run)
    wandb_run.log({"a": 1.0}, step=3, commit=True)
    wandb_run.log({"a": 2.0}, step=1, commit=True)  # dropped: wandb stays at 4
    with pytest.raises(ValueError, match="already mirrored"):
        mirror_wandb(MemoryTracker(), wandb_run=wandb_run)
    mirror.stop()
    second = MemoryTracker()
    mirror_wandb(second, wandb_run=wandb_run)
    wandb_run.log({"a": 3.0})
    wandb_run.finish()

    assert first.history == [(3, {"a": 1.0})]
    assert second.history == [(4, {"a": 3.0})]
    assert wandb_record(wandb_run) == {3: {"a": 1.0}, 4: {"a": 3.0}}


@pytest.mark.parametrize(
    "end, status",
    [
        (lambda run: wandb.finish(), "finished"),
        (lambda run: run.finish(exit_code=0), "finished"),
        (lambda run: wandb.finish(exit_code=1), "failed"),
    ],
    ids=["wandb.finish()", "run.finish(exit_code=0)", "wandb.finish(exit_code=1)"],
)
def test_finishing_wandb_finishes_the_normwatch_run(
    wandb_run: wandb.Run,
    ingest: FakeIngest,
    make_run: Callable[..., Run],
    end: Callable[[wandb.Run], None],
    status: str,
) -> None:
    run = make_run()
    mirror = mirror_wandb(run, wandb_run=wandb_run)
    wandb.log({"loss": 1.0})
    end(wandb_run)

    assert not mirror.active
    assert ingest.updates == [{"status": status}]
    assert run.pending_points == 0 and run.sent_points == 1


def test_a_with_block_ended_by_an_exception_marks_the_run_failed(
    wandb_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tracker = MemoryTracker()
    with pytest.raises(RuntimeError, match="diverged"), start_wandb(wandb_dir) as run:
        mirror_wandb(tracker, wandb_run=run)
        run.log({"loss": math.inf})
        raise RuntimeError("diverged")
    assert tracker.status == "failed"
    assert math.isinf(tracker.last("loss"))
    assert "RuntimeError: diverged" in capsys.readouterr().err  # wandb prints the traceback


def test_finish_false_leaves_the_tracker_running(wandb_run: wandb.Run) -> None:
    tracker = MemoryTracker()
    mirror = mirror_wandb(tracker, wandb_run=wandb_run, finish=False)
    wandb.log({"a": 1.0})
    wandb.finish()
    assert tracker.status is None and not mirror.active


class Exploding:
    def log(self, metrics: object, *, step: int) -> None:
        raise RuntimeError("tracker down")

    def event(self, text: str, *, step: int, kind: str = "note") -> None:
        raise RuntimeError("tracker down")

    def finish(self, timeout: float = 30.0, status: str = "finished") -> None:
        raise RuntimeError("tracker down")


def test_a_failing_tracker_never_reaches_the_trainer(
    wandb_run: wandb.Run, caplog: pytest.LogCaptureFixture
) -> None:
    mirror_wandb(Exploding(), wandb_run=wandb_run)  # type: ignore[arg-type]
    for step in range(3):
        wandb.log({"loss": float(step)})
    wandb.finish()

    assert sorted(wandb_record(wandb_run)) == [0, 1, 2]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert [r.getMessage() for r in warnings] == [
        "could not mirror a wandb.log call: tracker down"
    ], "one warning, not one a step"
    assert any("finishing" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")


def test_wandbs_own_errors_reach_the_trainer_unchanged(wandb_run: wandb.Run) -> None:
    tracker = MemoryTracker()
    mirror = mirror_wandb(tracker, wandb_run=wandb_run)
    wandb.log({"a": 1.0})
    with pytest.raises(TypeError, match="must be strings"):
        wandb.log({1: 2.0})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="dictionary"):
        wandb.log([("a", 1.0)])  # type: ignore[arg-type]
    wandb.log({"a": 3.0})
    assert mirror.step == wandb_run.step == 2
    wandb.finish()
    assert tracker.history == [(0, {"a": 1.0}), (1, {"a": 3.0})]
    assert wandb_record(wandb_run) == {0: {"a": 1.0}, 1: {"a": 3.0}}


def test_a_new_run_takes_wandbs_name_config_and_step(
    wandb_run: wandb.Run, ingest: FakeIngest, tmp_path: Path
) -> None:
    wandb_run.log({"a": 1.0}, step=41, commit=True)
    mirror = mirror_wandb(
        url=URL,
        token=TOKEN,
        project="marin",
        transport=ingest.transport(),
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
    )
    assert isinstance(mirror.tracker, Run)
    wandb.log({"a": 2.0})
    wandb.finish()

    assert ingest.created == [
        {
            "name": wandb_run.id,  # offline runs have no name
            "config": {"lr": 3e-4, "model": {"layers": 2}},
            "tags": [],
            "project": "marin",
            "start_step": 42,
        }
    ]
    assert received(ingest) == {42: {"a": 2.0}}
    assert ingest.updates == [{"status": "finished"}]


def test_refusals_name_the_fix(wandb_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert wandb.run is None
    with pytest.raises(ValueError, match=r"call wandb.init\(\) first"):
        mirror_wandb(MemoryTracker())
    run = start_wandb(wandb_dir)
    try:
        with pytest.raises(ValueError, match="either a tracker or"):
            mirror_wandb(MemoryTracker(), name="x")
        monkeypatch.delenv("NORMWATCH_URL", raising=False)
        monkeypatch.delenv("NORMWATCH_TOKEN", raising=False)
        with pytest.raises(ValueError, match="NORMWATCH_TOKEN"):
            mirror_wandb()
        assert not {"_log", "_finish"} & set(vars(run)), "a refused mirror hooks nothing"
        monkeypatch.setenv("NORMWATCH_MODE", "disabled")
        mirror = mirror_wandb()
        assert type(mirror.tracker).__name__ == "NoopTracker"
        mirror.stop()
    finally:
        run.finish()


def test_mirrored_metrics_reach_a_real_server(wandb_dir: Path, pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    run = start_wandb(wandb_dir)
    mirror = mirror_wandb(
        name="wandb-side-by-side", url=pg_server.url, token=tenant.ingest, flush_interval=0.05
    )
    run.log({"train": {"loss": 2.0}, "grad/norm/total": 0.5}, commit=False)
    run.log({"lr": 1e-3})
    run.log({"train": {"loss": 1.5}, "hist": wandb.Histogram(np.arange(5))}, step=10)
    run.log({"train": {"loss": 9.9}}, step=3)  # dropped by wandb
    run.log({"grad/norm/total": math.nan}, step=10, commit=True)
    run.log({"train": {"loss": 1.0}})
    wandb.finish()
    assert isinstance(mirror.tracker, Run) and mirror.tracker.pending_points == 0

    recorded = wandb_record(run)
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("read"), timeout=30) as api:
        [listed] = api.get("/api/v1/runs").json()
        assert (listed["name"], listed["status"]) == ("wandb-side-by-side", "finished")
        assert listed["config"] == {"lr": 3e-4, "model": {"layers": 2}}
        names = sorted({name for row in recorded.values() for name in row})
        assert names == ["grad/norm/total", "lr", "train.loss"]
        body = api.get(f"/api/v1/runs/{listed['id']}/series", params={"metric": names}).json()
    stored: Rows = {}
    for series in body["series"]:
        for step, value in zip(series["steps"], series["values"], strict=True):
            stored.setdefault(step, {})[series["metric"]] = float(value)
    assert sorted(recorded) == [0, 10, 11]
    assert_same_rows(stored, recorded)


def test_the_rules_examples_run() -> None:
    result = doctest.testmod(_wandb_rules, raise_on_error=False)
    assert result.attempted >= 3 and result.failed == 0
