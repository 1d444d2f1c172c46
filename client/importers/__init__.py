"""Import existing training logs into normwatch, through the same client path as a live
trainer (`normwatch.client.Run.log`).

>>> from normwatch.client import Run
>>> from normwatch.client.importers import import_records
>>> from normwatch.client.importers.jsonl import parse_jsonl
>>> with Run(url, token=token, name="exp1") as run:  # doctest: +SKIP
...     summary = import_records(parse_jsonl("metrics.jsonl"), run)

One module per format, each with a pure ``parse_<format>`` that yields ``(step, metrics)``
records and a fast ``count_<format>`` that sizes a progress bar:

=================  =====================================  ==============================
module             reads                                  needs
=================  =====================================  ==============================
``llmc``           llm.c ``main.log`` files               -
``jsonl``          one JSON object per line               -
``wandb_csv``      W&B history and chart CSV exports      -
``tensorboard``    TensorBoard event files, recursively   ``normwatch[tensorboard]``
=================  =====================================  ==============================

`import_records` logs the records into a `Run` at the pace the server takes them and
returns an `ImportSummary`. A bad file raises `ImportFormatError` (naming file, place and
field), a missing optional library `MissingDependencyError` (naming the ``pip install``),
a server that takes nothing `ImportAborted`.
"""

from __future__ import annotations

from ._errors import ImportAborted, ImportFormatError, MissingDependencyError, NoteSink
from ._progress import ProgressBar
from ._records import ImportSummary, import_records

__all__ = [
    "ImportAborted",
    "ImportFormatError",
    "ImportSummary",
    "MissingDependencyError",
    "NoteSink",
    "ProgressBar",
    "import_records",
]
