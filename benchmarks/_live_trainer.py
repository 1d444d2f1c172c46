"""A trainer streaming into the server while a benchmark measures it, as on a busy server.

`LiveTrainer` starts a process that logs the demo's simulation (48 layers, all its 162
metrics at every step) through the real client, `normwatch.client.Run`, at a steady number of
steps a second, into a run of its own, until it is stopped or its time runs out (it stops
by itself). What it logged is counted, so a report can say what load the numbers were
measured under.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from multiprocessing.sharedctypes import Synchronized
from types import TracebackType

from normwatch.client import Run
from normwatch.simulate import SimulatedRun

__all__ = ["LiveTrainer"]

BLOCK = 10
"""Steps simulated at once; each is logged on its own, as a training loop logs."""


def _train(
    base: str,
    token: str,
    project: str,
    name: str,
    steps_per_s: float,
    limit_s: float,
    logged: Synchronized[int],
) -> None:
    """The trainer's process: ``run.log`` one step at a time, paced to ``steps_per_s``."""
    sim = SimulatedRun(seed=2)
    with tempfile.TemporaryDirectory() as spool:
        run = Run(base, token=token, project=project, name=name, spool_dir=spool)
        started = time.monotonic()
        step = 0
        while time.monotonic() - started < limit_s:
            steps, metrics = sim.block(step, step + BLOCK)
            for i, at in enumerate(steps.tolist()):
                record = {k: float(v[i]) for k, v in metrics.items() if v[i] == v[i]}
                run.log(record, step=at)
                with logged.get_lock():
                    logged.value += len(record)
                step = at + 1
                ahead = started + step / steps_per_s - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        run.finish()


class LiveTrainer:
    """The trainer process, as a context manager: started on entry, stopped on exit."""

    def __init__(
        self,
        base: str,
        token: str,
        project: str,
        *,
        name: str | None = None,
        steps_per_s: float = 5.0,
        limit_s: float = 3600.0,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._logged: Synchronized[int] = context.Value("q", 0)  # type: ignore[assignment]
        self.steps_per_s = steps_per_s
        self._process = context.Process(
            target=_train,
            # A run of its own each time: a kept database may hold the last one's steps.
            args=(base, token, project, name or f"live-trainer-{int(time.time())}")
            + (steps_per_s, limit_s, self._logged),
            daemon=True,
        )
        self._started = 0.0
        self.points_per_s = 0.0

    def __enter__(self) -> LiveTrainer:
        self._process.start()
        self._started = time.monotonic()
        return self

    @property
    def points(self) -> int:
        """Points logged so far."""
        return int(self._logged.value)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        elapsed = time.monotonic() - self._started
        self.points_per_s = self.points / elapsed if elapsed > 0 else 0.0
        self._process.terminate()
        self._process.join(10)
