"""JSON lines: one object per line, holding a step and metrics.

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
>>> _ = path.write_text('{"step": 3, "loss": 2.5, "grad": {"norm": {"total": NaN}}}\\n')
>>> list(parse_jsonl(path))
[(3, {'loss': 2.5, 'grad/norm/total': nan})]

What each line may hold:

* the step, under ``step_key`` or else the first of ``step``, ``_step``, ``global_step``:
  a non-negative integer (``100.0`` is read as 100);
* metrics: every other number; nested objects are flattened with ``/``
  (``{"grad": {"norm": 1.0}}`` → ``grad/norm``);
* non-finite values as bare ``NaN``/``Infinity``/``-Infinity`` tokens (Python's
  ``json.dumps`` writes these) or as strings such as ``"NaN"``, ``"inf"``, ``"-Infinity"``;
* ``null``: not logged at that step. Other strings, booleans and lists are not metrics:
  they are skipped, with one note per field. W&B's ``_runtime``, ``_timestamp`` and
  ``_wandb`` fields are skipped too (the history files of ``wandb`` runs are JSON lines).

Blank lines are skipped; a line that is not a JSON object, or has no valid step, raises
`ImportFormatError` naming the line (and column or field).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from ._errors import ImportFormatError, NoteSink, OnceNotes
from ._values import STEP_KEYS, as_step, is_wandb_internal, metric_name, non_finite

__all__ = ["count_jsonl", "parse_jsonl"]


def parse_jsonl(
    path: str | os.PathLike[str],
    *,
    step_key: str | None = None,
    prefix: str = "",
    notes: NoteSink | None = None,
) -> Iterator[tuple[int, dict[str, float]]]:
    """Yield ``(step, metrics)`` for each line of the JSON-lines file at ``path``, in order.

    ``prefix`` is put in front of every metric name (``"train"`` → ``train/loss``). Lines
    with a step but no metric are skipped. Skipped fields are reported through ``notes``.
    """
    source = Path(path)
    once = OnceNotes(notes)
    keys = (step_key,) if step_key else STEP_KEYS
    with source.open("rb") as lines:
        for line_number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            document = _load(raw, source, line_number)
            used_key, step = _step_of(document, keys, source, line_number)
            metrics: dict[str, float] = {}
            for key, value in document.items():
                if key == used_key:
                    continue
                if is_wandb_internal(key):
                    once(f"internal:{key}", f"skipped W&B's own field {key!r}")
                    continue
                _flatten(metric_name(prefix, key), value, metrics, once, source, line_number)
            if metrics:
                yield step, metrics


def count_jsonl(path: str | os.PathLike[str]) -> int:
    """Non-blank lines in the file: what `parse_jsonl` yields, less lines without metrics.

    Reads bytes only, much faster than parsing, to size a progress bar.
    """
    count = 0
    with Path(path).open("rb") as lines:
        for raw in lines:
            if raw.strip():
                count += 1
    return count


def _load(raw: bytes, source: Path, line_number: int) -> dict[str, object]:
    try:
        # Without the line break, so that a column number counts from the line's start.
        document = json.loads(raw.rstrip(b"\r\n"))
    except json.JSONDecodeError as exc:
        raise ImportFormatError(
            source, f"line {line_number}, column {exc.colno}", f"not valid JSON: {exc.msg}"
        ) from None
    except UnicodeDecodeError as exc:
        raise ImportFormatError(
            source, f"line {line_number}", f"not UTF-8 text ({exc.reason})"
        ) from None
    if not isinstance(document, dict):
        raise ImportFormatError(
            source,
            f"line {line_number}",
            f"expected a JSON object with a step and metrics, got a {type(document).__name__}",
        )
    return document


def _step_of(
    document: dict[str, object], keys: tuple[str, ...], source: Path, line_number: int
) -> tuple[str, int]:
    """The step field's name and value: the first of ``keys`` the line has."""
    key = next((key for key in keys if key in document), None)
    if key is None:
        wanted = ", ".join(repr(k) for k in keys)
        hint = "" if len(keys) == 1 else "; name the step field with --step-key"
        raise ImportFormatError(source, f"line {line_number}", f"no step field ({wanted}){hint}")
    step = as_step(document[key])
    if step is None:
        raise ImportFormatError(
            source,
            f"line {line_number}, field {key!r}",
            f"expected a non-negative integer step, got {document[key]!r}",
        )
    return key, step


def _flatten(
    name: str,
    value: object,
    metrics: dict[str, float],
    once: OnceNotes,
    source: Path,
    line_number: int,
) -> None:
    """Add ``value`` (a number, or an object of them) to ``metrics`` under ``name``."""
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{name}/{key}", inner, metrics, once, source, line_number)
    elif value is None:
        return
    elif isinstance(value, bool):
        # bool is an int to Python, but true/false is a flag, not a measurement.
        once(f"skip:{name}", f"skipped non-numeric field {name!r} (a boolean, line {line_number})")
    elif isinstance(value, int | float):
        try:
            metrics[name] = float(value)
        except OverflowError:
            raise ImportFormatError(
                source,
                f"line {line_number}, field {name!r}",
                "the integer is too large for a float",
            ) from None
    elif isinstance(value, str) and (number := non_finite(value)) is not None:
        metrics[name] = number
    else:
        kind = "text" if isinstance(value, str) else f"a {type(value).__name__}"
        once(f"skip:{name}", f"skipped non-numeric field {name!r} ({kind}, line {line_number})")
