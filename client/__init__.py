"""Stream training metrics to a normwatch server without slowing the training loop.

>>> from normwatch.client import Run
>>> run = Run("http://127.0.0.1:8000", token="...", name="32b-exp1295")  # doctest: +SKIP
>>> run.log({"train/loss": 2.31, "grad/norm/total": 0.42}, step=81000)  # doctest: +SKIP
>>> run.event("near-dropless EP routing", step=81000, kind="config")  # doctest: +SKIP
>>> run.finish()  # doctest: +SKIP

`Run.log` and `Run.event` never block on the network and never raise: problems are
reported through the ``normwatch.client`` logger and counted on the `Run`. What the server
cannot take yet waits in an on-disk spool; `sync_spool` (``normwatch sync``) delivers spools
that a finished or killed trainer left behind.
"""

from __future__ import annotations

from ._run import Run
from ._sync import SyncReport, sync_spool

__all__ = ["Run", "SyncReport", "sync_spool"]
