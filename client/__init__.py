"""Stream training metrics to a normwatch server without slowing the training loop.

Imported as ``normwatch.client`` (this folder is mapped onto that name by ``package-dir`` in
pyproject.toml).

>>> from normwatch.client import Run
>>> run = Run("http://127.0.0.1:8000", token="...", name="32b-exp1295")  # doctest: +SKIP
>>> run.log({"train/loss": 2.31, "grad/norm/total": 0.42}, step=81000)  # doctest: +SKIP
>>> run.event("near-dropless EP routing", step=81000, kind="config")  # doctest: +SKIP
>>> run.finish()  # doctest: +SKIP

Or, like ``wandb``, one global run: ``normwatch.client.init(name=...)``, then
``normwatch.client.log(metrics, step=step)`` and ``normwatch.client.finish()``.

`Run.log` and `Run.event` never block on the network and never raise: problems are
reported through the ``normwatch.client`` logger and counted on the `Run`. What the server
cannot take yet waits in an on-disk spool; `sync_spool` (``normwatch sync``) delivers spools
that a finished or killed trainer left behind. `Tracker` is the interface every backend
here satisfies (`Run`, `NoopTracker`, `MemoryTracker`, `CompositeTracker`).
`mirror_wandb` sends a W&B run's ``wandb.log`` stream here too, at wandb's steps; the
Levanter tracker backend is `normwatch.client.levanter`.

`Api` reads runs back (for notebooks): `Api.runs`, `Api.history` (every stored point,
exactly), `Api.history_frame` (a pandas DataFrame), and the analyses the dashboard shows.

An admin can ask a run to checkpoint or to stop from the dashboard or the API, and an alert
rule can ask it when it fires: the trainer reads that between steps with
`Run.should_checkpoint` and `Run.should_stop`, at no cost to the step.
"""

from __future__ import annotations

from ._api import Api, ApiError
from ._control import ControlRequest
from ._packed import PackedMetrics
from ._run import Run
from ._sync import SyncReport, sync_spool
from ._tracker import (
    CompositeTracker,
    MemoryTracker,
    NoopTracker,
    Tracker,
    event,
    finish,
    init,
    log,
    process_index,
    should_checkpoint,
    should_stop,
)
from .wandb_mirror import WandbMirror, mirror_wandb

__all__ = [
    "Api",
    "ApiError",
    "CompositeTracker",
    "ControlRequest",
    "MemoryTracker",
    "NoopTracker",
    "PackedMetrics",
    "Run",
    "SyncReport",
    "Tracker",
    "WandbMirror",
    "event",
    "finish",
    "init",
    "log",
    "mirror_wandb",
    "process_index",
    "should_checkpoint",
    "should_stop",
    "sync_spool",
]
