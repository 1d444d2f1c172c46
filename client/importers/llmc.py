"""llm.c training logs: ``s:<step> trl:<loss> lr:<lr> norm:<grad norm>`` lines.

The line format and metric names are those of `normwatch.client.llmc`; this module reads
a file the way the other importers do: errors name the file, and `count_llmc` sizes a
progress bar without parsing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ..llmc import METRIC_NAMES, parse_llmc_log
from ._errors import ImportFormatError
from ._values import metric_name

__all__ = ["METRIC_NAMES", "count_llmc", "parse_llmc"]


def parse_llmc(
    path: str | os.PathLike[str], *, prefix: str = ""
) -> Iterator[tuple[int, dict[str, float]]]:
    """Yield ``(step, metrics)`` per step of the llm.c log at ``path``, in file order.

    See `normwatch.client.llmc.parse_llmc_log`; a malformed ``s:`` line raises
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
