"""An export's pages written out: CSV, JSON lines or Parquet, a page at a time.

- **CSV**: a header ``step,A,B``, then a row a step where any column is logged; an empty
  cell where one is not; each value as the shortest decimal that a float64 parser reads
  back to the value the page holds (``0.1``, ``1e-7``, ``2.99993896484375``: what
  ``repr(float)`` prints), non-finite ones as ``NaN``, ``Infinity``, ``-Infinity``.
- **JSON lines**: an object a row, ``{"step": 3, "A": 0.5, "B": null}``: ``null`` where a
  column has no point, finite values as CSV prints them, non-finite values as the strings
  the series API uses.
- **Parquet** (when pyarrow is installed): a column ``step`` (int64) and a float64 column
  each, null where a column has no point; NaN and infinities kept as such. One row group a
  page.

The first column is always the step, named ``step``. A metric that is itself named
``step`` keeps a column of its own, named ``step (metric)`` in every format (`column_keys`:
one more `` (metric)`` for a name that is ``step`` followed by any number of them, so no
two columns ever share a name). CSV header cells are written for spreadsheets too: one
that would start with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return (a formula,
to a spreadsheet) gets a leading ``'``, which spreadsheets take as "text" and do not show,
and so does one that starts with ``'`` itself, so that the header always tells the names
apart (`spreadsheet_safe`); a header cell holding ``,``, ``"``, a line feed or a carriage
return is quoted. JSON lines and Parquet keep names exactly: their keys are data, never
evaluated.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
import orjson

from ..errors import Invalid
from .export import Column, Page

__all__ = [
    "FORMATS",
    "FORMULA_STARTS",
    "STEP",
    "Format",
    "column_keys",
    "media_type",
    "spreadsheet_safe",
    "written",
]

Format = Literal["csv", "jsonl", "parquet"]
FORMATS: dict[str, tuple[str, str]] = {
    "csv": ("text/csv; charset=utf-8", "csv"),
    "jsonl": ("application/x-ndjson", "jsonl"),
    "parquet": ("application/vnd.apache.parquet", "parquet"),
}
"""Each format's media type and file extension."""


STEP = "step"
"""The step column's name, in every format."""

_OWN = " (metric)"

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")
"""First characters that make a CSV header cell start a spreadsheet formula (OWASP's list),
and the ``'`` that `spreadsheet_safe` puts in front of them."""


def column_keys(cols: Sequence[Column]) -> list[str]:
    """The export's column names: `STEP`, then each column's header, except that a header
    which is ``step`` followed by any number of `` (metric)`` gets one more (so a metric
    named ``step`` is ``step (metric)``, and one named ``step (metric)`` is not mistaken
    for it).

    >>> column_keys([Column("step", "step"), Column("loss", "loss")])
    ['step', 'step (metric)', 'loss']
    """
    keys = [STEP]
    for col in cols:
        bare = col.header
        while bare.endswith(_OWN):
            bare = bare[: -len(_OWN)]
        keys.append(col.header + _OWN if bare == STEP else col.header)
    return keys


def spreadsheet_safe(cell: str) -> str:
    """A CSV header cell no spreadsheet evaluates: a leading ``'`` before a cell that starts
    with one of `FORMULA_STARTS`. Reversible: a cell that starts with ``'`` always had one
    added (`normwatch.client.Api.history` takes it off).

    >>> [spreadsheet_safe(c) for c in ("=SUM(1,1)", "-loss", "'quoted", "grad/norm")]
    ["'=SUM(1,1)", "'-loss", "''quoted", 'grad/norm']
    """
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def media_type(fmt: Format) -> str:
    return FORMATS[fmt][0]


def written(fmt: Format, cols: Sequence[Column], pages: Iterable[Page]) -> Iterator[bytes]:
    """The export's bytes, a page at a time (the header first, even with no page).
    `Invalid` (422) for Parquet without pyarrow, before anything is written."""
    if fmt == "parquet":
        return _parquet(cols, pages)
    if fmt == "jsonl":
        return _jsonl(cols, pages)
    return _csv(cols, pages)


def _csv_header(cols: Sequence[Column]) -> bytes:
    return (",".join(_quoted(spreadsheet_safe(k)) for k in column_keys(cols)) + "\n").encode()


def _quoted(cell: str) -> str:
    """``cell`` as RFC 4180 writes it: in double quotes (doubled inside) when it holds a
    comma, a quote or a line break. Python's own writer leaves a lone carriage return
    unquoted, which every reader takes for the end of the row."""
    if any(c in cell for c in ',"\r\n'):
        return '"' + cell.replace('"', '""') + '"'
    return cell


def _texts(values: np.ndarray, present: np.ndarray) -> list[str]:
    """Each value's cell: shortest round-trip text, the non-finite spelled out, "" where
    absent. orjson writes the finite ones: the shortest digits that read back as the same
    float64, as ``repr`` has them (``1e-7`` where repr writes ``1e-07``), in C. Values are
    taken as float64: the shortest digits of a float32 read back as another float64."""
    values = values.astype(np.float64, copy=False)
    out = np.full(len(values), "", dtype=object)
    finite = present & np.isfinite(values)
    if finite.any():
        out[finite] = orjson.dumps(values[finite].tolist())[1:-1].decode().split(",")
    out[present & np.isnan(values)] = "NaN"
    out[present & (values == np.inf)] = "Infinity"
    out[present & (values == -np.inf)] = "-Infinity"
    texts: list[str] = out.tolist()
    return texts


def _csv(cols: Sequence[Column], pages: Iterable[Page]) -> Iterator[bytes]:
    yield _csv_header(cols)
    for page in pages:
        steps = [str(s) for s in page.steps.tolist()]
        cells = [_texts(v, p) for v, p in zip(page.values, page.present, strict=True)]
        yield ("\n".join(map(",".join, zip(steps, *cells, strict=True))) + "\n").encode()


def _json_value(values: np.ndarray, present: np.ndarray) -> list[Any]:
    out: list[Any] = values.tolist()
    for i in np.flatnonzero(~present | ~np.isfinite(values)).tolist():
        v = out[i]
        if not present[i]:
            out[i] = None
        elif v != v:
            out[i] = "NaN"
        else:
            out[i] = "Infinity" if v > 0 else "-Infinity"
    return out


def _jsonl(cols: Sequence[Column], pages: Iterable[Page]) -> Iterator[bytes]:
    headers = column_keys(cols)
    yield b""
    for page in pages:
        columns = [page.steps.tolist()]
        columns += [_json_value(v, p) for v, p in zip(page.values, page.present, strict=True)]
        yield b"".join(
            orjson.dumps(dict(zip(headers, row, strict=True))) + b"\n"
            for row in zip(*columns, strict=True)
        )


class _Sink(io.RawIOBase):
    """A write-only file that keeps what is written until taken: Parquet's writer needs a
    file whose position only grows."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._written = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._parts.append(data)
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


def _parquet(cols: Sequence[Column], pages: Iterable[Page]) -> Iterator[bytes]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise Invalid(
            "format=parquet needs pyarrow on the server (pip install pyarrow); "
            "csv and jsonl need nothing"
        ) from None
    step, *keys = column_keys(cols)
    schema = pa.schema(
        [pa.field(step, pa.int64(), nullable=False)] + [pa.field(k, pa.float64()) for k in keys]
    )

    def chunks() -> Iterator[bytes]:
        sink = _Sink()
        with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
            for page in pages:
                arrays = [pa.array(page.steps, pa.int64())]
                arrays += [
                    pa.array(v.astype(np.float64, copy=False), pa.float64(), mask=~p)
                    for v, p in zip(page.values, page.present, strict=True)
                ]
                writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
                yield sink.take()
        yield sink.take()

    return chunks()
