"""Read llm.c training logs (the ``main.log`` files its ``train_gpt2`` writes).

Two record kinds, one per line::

    s:0 trl:11.0091 lr:0.000001 norm:15.37     a training step
    s:0 tel:11.0092                            a validation evaluation

Each becomes ``(step, metrics)`` with the names normwatch uses elsewhere:

==========  ===================
``trl``     ``train/loss``
``lr``      ``optim/lr``
``norm``    ``grad/norm/total``
``tel``     ``val/loss``
==========  ===================

llm.c writes the validation line of a step next to its training line, so adjacent lines of
the same step are merged into one record.

>>> list(parse_llmc_log(["s:0 tel:11.0092", "s:0 trl:11.0091 lr:0.000001 norm:15.37"]))
[(0, {'val/loss': 11.0092, 'train/loss': 11.0091, 'optim/lr': 1e-06, 'grad/norm/total': 15.37})]

`parse_llmc` reads a file the way the other importers do (errors name the file), `count_llmc`
sizes a progress bar without parsing, and `import_llmc` streams a log into a run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from ._errors import ImportFormatError
from ._values import metric_name

__all__ = [
    "METRIC_NAMES",
    "SupportsLog",
    "count_llmc",
    "import_llmc",
    "parse_llmc",
    "parse_llmc_log",
]


METRIC_NAMES = {
    "trl": "train/loss",
    "lr": "optim/lr",
    "norm": "grad/norm/total",
    "tel": "val/loss",
}
"""llm.c field → normwatch metric name. Other ``key:value`` fields are ignored."""


class SupportsLog(Protocol):
    """What `import_llmc` needs of its target: `normwatch.client.Run`, or a test double."""

    def log(self, metrics: Mapping[str, float], *, step: int) -> None: ...


_FORMAT = "expected 's:<step> trl:<loss> lr:<lr> norm:<grad norm>' or 's:<step> tel:<val loss>'"


def _parse_record(line: str, line_number: int) -> tuple[int, dict[str, float]]:
    """One ``s:`` line → ``(step, metrics)``; ValueError naming the line when malformed."""

    def malformed(reason: str) -> ValueError:
        return ValueError(f"line {line_number}: {reason} in {line!r}; {_FORMAT}")

    step_field, *fields = line.split()
    try:
        step = int(step_field.removeprefix("s:"))
    except ValueError:
        raise malformed("the step is not an integer") from None
    if step < 0:
        raise malformed("the step is negative")
    metrics: dict[str, float] = {}
    for field in fields:
        key, colon, value = field.partition(":")
        if not colon or not key:
            raise malformed(f"field {field!r} is not key:value")
        try:
            number = float(value)  # also reads llm.c's "nan", "-nan" and "inf"
        except ValueError:
            raise malformed(f"field {field!r} has no numeric value") from None
        if key in METRIC_NAMES:
            metrics[METRIC_NAMES[key]] = number
    if not metrics:
        raise malformed("no trl, lr, norm or tel field")
    return step, metrics


def parse_llmc_log(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, float]]]:
    """Yield ``(step, metrics)`` per step of an llm.c log, in file order.

    Blank lines and lines not starting with ``s:`` (banners, warnings) are skipped. A line
    that starts with ``s:`` but cannot be read raises ValueError naming its line number.
    Records of the same step on adjacent lines are merged (a later field wins).
    """
    pending: tuple[int, dict[str, float]] | None = None
    for line_number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line.startswith("s:"):
            continue
        step, metrics = _parse_record(line, line_number)
        if pending is not None and pending[0] == step:
            pending[1].update(metrics)
            continue
        if pending is not None:
            yield pending
        pending = (step, metrics)
    if pending is not None:
        yield pending


def import_llmc(path: str | os.PathLike[str], run: SupportsLog) -> int:
    """Stream the llm.c log at ``path`` through ``run.log``; return how many steps it logged.

    The file is read line by line, so logs of any length import in constant memory. A
    malformed line raises ValueError before anything after it is logged.
    """
    logged = 0
    with open(path, encoding="utf-8") as log_file:
        for step, metrics in parse_llmc_log(log_file):
            run.log(metrics, step=step)
            logged += 1
    return logged


def parse_llmc(
    path: str | os.PathLike[str], *, prefix: str = ""
) -> Iterator[tuple[int, dict[str, float]]]:
    """Yield ``(step, metrics)`` per step of the llm.c log at ``path``, in file order.

    See `parse_llmc_log`; a malformed ``s:`` line raises
    `ImportFormatError` naming the file and line.
    """
    source = Path(path)
    # Banners and warnings around the s: lines may hold any bytes; they are skipped anyway.
    with source.open(encoding="utf-8", errors="replace") as lines:
        records = parse_llmc_log(lines)
        while True:
            try:
                step, metrics = next(records)
            except StopIteration:
                return
            except ValueError as exc:
                where, _, reason = str(exc).partition(": ")
                raise ImportFormatError(source, where, reason) from None
            if prefix:
                metrics = {metric_name(prefix, name): value for name, value in metrics.items()}
            yield step, metrics


def count_llmc(path: str | os.PathLike[str]) -> int:
    """The number of records `parse_llmc` yields for a well-formed log, read without
    parsing numbers (adjacent ``s:`` lines of one step count once)."""
    count = 0
    previous = b""
    with Path(path).open("rb") as lines:
        for raw in lines:
            line = raw.strip()
            if line.startswith(b"s:"):
                step = line.split(None, 1)[0]
                if step != previous:
                    count += 1
                    previous = step
    return count
