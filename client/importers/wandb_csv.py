"""W&B history exports as CSV: a step column and one column per metric.

Two shapes come out of W&B and both are read:

* a run's history (``run.history().to_csv()``, or the run page's export): columns ``_step``,
  the metrics, and W&B's own ``_runtime``, ``_timestamp``, ``_wandb...`` (skipped);
* a chart's "Export CSV": a ``Step`` column and ``<run name> - <metric>`` columns, with
  ``...__MIN``/``...__MAX`` companions when the chart groups or smooths (skipped, with a
  note). When every metric column carries the same ``<run name> - `` it is dropped from the
  metric names.

An empty cell means "not logged at that step". Numbers are read as Python reads them, so
``NaN``, ``nan``, ``inf``, ``Infinity`` and ``-inf`` are non-finite values. A column whose
first non-empty cell is not a number (a run name, a media file) is skipped with a note; a
non-number later in a numeric column raises `ImportFormatError` naming line and column.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._errors import ImportFormatError, NoteSink, OnceNotes
from ._values import as_step, is_wandb_internal, metric_name

__all__ = ["STEP_COLUMNS", "count_wandb_csv", "parse_wandb_csv"]

STEP_COLUMNS = ("_step", "Step", "step", "global_step")
"""Where the step is when ``step_key`` is not given, in order of preference."""

_GROUP_SUFFIXES = ("__MIN", "__MAX")
_RUN_SEPARATOR = " - "


@dataclass
class _Column:
    index: int
    header: str
    metric: str
    numeric: bool | None = None
    """Decided by the first non-empty cell: True for numbers, False for text (skipped)."""


def parse_wandb_csv(
    path: str | os.PathLike[str],
    *,
    step_key: str | None = None,
    prefix: str = "",
    notes: NoteSink | None = None,
) -> Iterator[tuple[int, dict[str, float]]]:
    """Yield ``(step, metrics)`` for each row of the CSV file at ``path``, in file order.

    ``prefix`` is put in front of every metric name. Rows with no metric are skipped.
    Skipped columns are reported through ``notes``.
    """
    source = Path(path)
    once = OnceNotes(notes)
    # utf-8-sig: spreadsheet programs that re-save an export put a byte-order mark first.
    with source.open(encoding="utf-8-sig", newline="") as text:
        reader = csv.reader(text)
        try:
            header = next(reader, None)
            if header is None:
                raise ImportFormatError(source, None, "the file is empty; expected a header row")
            step_index, columns = _columns(header, step_key, prefix, once, source)
            for row in reader:
                if not row:
                    continue
                record = _record(row, header, step_index, columns, once, source, reader.line_num)
                if record[1]:
                    yield record
        except UnicodeDecodeError as exc:
            raise ImportFormatError(
                source, f"line {reader.line_num + 1}", f"not UTF-8 text ({exc.reason})"
            ) from None
        except csv.Error as exc:
            raise ImportFormatError(source, f"line {reader.line_num}", f"bad CSV: {exc}") from None


def count_wandb_csv(path: str | os.PathLike[str]) -> int:
    """Lines after the header: about the rows `parse_wandb_csv` reads, counted in bytes to
    size a progress bar (a quoted cell spanning lines makes it an overestimate)."""
    newlines = 0
    last = b""
    with Path(path).open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    lines = newlines + (last not in (b"", b"\n"))  # a last line without its newline
    return max(lines - 1, 0)


def _columns(
    header: Sequence[str],
    step_key: str | None,
    prefix: str,
    once: OnceNotes,
    source: Path,
) -> tuple[int, list[_Column]]:
    """The step column's index and the metric columns, with their metric names."""
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise ImportFormatError(source, "line 1", f"column {name!r} appears twice")
        seen.add(name)
    wanted = (step_key,) if step_key else STEP_COLUMNS
    step_name = next((name for name in wanted if name in seen), None)
    if step_name is None:
        hint = "" if step_key else "; name it with --step-key"
        raise ImportFormatError(
            source,
            "line 1",
            f"no step column ({', '.join(map(repr, wanted))}) among {list(header)!r}{hint}",
        )
    metrics: list[tuple[int, str]] = []
    for index, name in enumerate(header):
        if name == step_name:
            continue
        if is_wandb_internal(name):
            once(f"internal:{name}", f"skipped W&B's own column {name!r}")
        elif name.endswith(_GROUP_SUFFIXES):
            once(
                "group",
                f"skipped {name!r} and the other __MIN/__MAX columns "
                "(a grouped chart's range, not logged values)",
            )
        else:
            metrics.append((index, name))
    names = [name for _, name in metrics]
    run_names = {name.split(_RUN_SEPARATOR, 1)[0] for name in names if _RUN_SEPARATOR in name}
    shared_run = (
        len(run_names) == 1 and all(_RUN_SEPARATOR in name for name in names) and bool(names)
    )
    if shared_run:
        (run,) = run_names
        once(
            "chart-export",
            f"columns are named '{run}{_RUN_SEPARATOR}<metric>' (a W&B chart export); "
            f"importing them as '<metric>'",
        )
        names = [name.split(_RUN_SEPARATOR, 1)[1] for name in names]
    columns = [
        _Column(index, header_name, metric_name(prefix, name))
        for (index, header_name), name in zip(metrics, names, strict=True)
    ]
    return header.index(step_name), columns


def _record(
    row: Sequence[str],
    header: Sequence[str],
    step_index: int,
    columns: list[_Column],
    once: OnceNotes,
    source: Path,
    line_number: int,
) -> tuple[int, dict[str, float]]:
    if len(row) != len(header):
        raise ImportFormatError(
            source,
            f"line {line_number}",
            f"{len(row)} cells, but the header has {len(header)} columns",
        )
    cell = row[step_index].strip()
    step = _step(cell)
    if step is None:
        raise ImportFormatError(
            source,
            f"line {line_number}, column {header[step_index]!r}",
            f"expected a non-negative integer step, got {cell!r}",
        )
    metrics: dict[str, float] = {}
    for column in columns:
        cell = row[column.index].strip()
        if not cell or column.numeric is False:
            continue
        try:
            value: float | None = float(cell)  # also reads NaN, nan, inf, Infinity, -inf
        except ValueError:
            value = None
        if value is None:
            if column.numeric:
                raise ImportFormatError(
                    source,
                    f"line {line_number}, column {column.header!r}",
                    f"{cell!r} is not a number (expected a number, NaN, inf, or an empty cell)",
                )
            column.numeric = False
            once(
                f"text:{column.header}",
                f"skipped column {column.header!r}: its first value, {cell!r} on line "
                f"{line_number}, is not a number",
            )
            continue
        column.numeric = True
        metrics[column.metric] = value
    return step, metrics


def _step(cell: str) -> int | None:
    try:
        return as_step(int(cell))
    except ValueError:
        pass
    try:
        return as_step(float(cell))
    except ValueError:
        return None
