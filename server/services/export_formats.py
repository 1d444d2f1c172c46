"""An export's pages written out: CSV, JSON lines or Parquet, a page at a time.

- **CSV**: a header ``step,A,B``, then a row a step where any column is logged; an empty
  cell where one is not; values in their shortest round-trip form (``0.1``, ``1e-7``; a
  float32-stored value as the float32's shortest repr), non-finite ones as ``NaN``,
  ``Infinity``, ``-Infinity``.
- **JSON lines**: an object a row, ``{"step": 3, "A": 0.5, "B": null}``: ``null`` where a
  column has no point, non-finite values as the strings the series API uses.
- **Parquet** (when pyarrow is installed): a column ``step`` (int64) and a float64 column
  each, null where a column has no point; NaN and infinities kept as such. One row group a
  page.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
import orjson

from ..errors import Invalid
from .export import Column, Page

__all__ = ["FORMATS", "Format", "media_type", "written"]

Format = Literal["csv", "jsonl", "parquet"]
FORMATS: dict[str, tuple[str, str]] = {
    "csv": ("text/csv; charset=utf-8", "csv"),
    "jsonl": ("application/x-ndjson", "jsonl"),
    "parquet": ("application/vnd.apache.parquet", "parquet"),
}
"""Each format's media type and file extension."""


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
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(["step", *(c.header for c in cols)])
    return out.getvalue().encode()


def _texts(values: np.ndarray, present: np.ndarray) -> list[str]:
    """Each value's cell: shortest round-trip text, the non-finite spelled out, "" where
    absent. orjson writes the finite ones (shortest repr, as ``repr`` would, in C)."""
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
    headers = ["step", *(c.header for c in cols)]
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
    schema = pa.schema(
        [pa.field("step", pa.int64(), nullable=False)]
        + [pa.field(c.header, pa.float64()) for c in cols]
    )

    def chunks() -> Iterator[bytes]:
        sink = _Sink()
        with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
            for page in pages:
                arrays = [pa.array(page.steps, pa.int64())]
                arrays += [
                    pa.array(v, pa.float64(), mask=~p)
                    for v, p in zip(page.values, page.present, strict=True)
                ]
                writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
                yield sink.take()
        yield sink.take()

    return chunks()
