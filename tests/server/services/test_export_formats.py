"""The export's writers on pages made by hand: every float64 round-trips through CSV and JSON
lines, the text is the shortest that does, and Parquet without pyarrow is a clear 422."""

from __future__ import annotations

import csv
import io
import re
import sys

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from normwatch.server.errors import Invalid
from normwatch.server.services.export import Column, Page
from normwatch.server.services.export_formats import written

COLUMNS = [Column("a", "a"), Column("b", "b")]


def page(a: list[float | None], b: list[float | None]) -> Page:
    def column(values: list[float | None]) -> tuple[np.ndarray, np.ndarray]:
        present = np.array([v is not None for v in values])
        return np.array([np.nan if v is None else v for v in values], np.float64), present

    (va, pa), (vb, pb) = column(a), column(b)
    return Page(np.arange(len(a), dtype=np.int64), [va, vb], [pa, pb])


def digits(text: str) -> str:
    """A number's significant digits: ``-0.0250e-3`` -> ``25``."""
    return re.sub(r"[eE].*", "", text).replace("-", "").replace(".", "").strip("0")


values = st.floats(allow_nan=True, allow_infinity=True) | st.none()


@given(st.lists(st.tuples(values, values), min_size=1, max_size=50))
def test_csv_and_jsonl_give_back_every_value_exactly(rows: list[tuple[float | None, ...]]) -> None:
    a, b = [r[0] for r in rows], [r[1] for r in rows]
    text = b"".join(written("csv", COLUMNS, [page(a, b)])).decode()
    parsed = list(csv.reader(io.StringIO(text)))
    assert parsed[0] == ["step", "a", "b"]
    lines = b"".join(written("jsonl", COLUMNS, [page(a, b)])).splitlines()
    for i, (row, line) in enumerate(zip(parsed[1:], lines, strict=True)):
        assert row[0] == str(i)
        record = orjson.loads(line)
        for cell, want, name in zip(row[1:], (a[i], b[i]), "ab", strict=True):
            got = record[name]
            if want is None:
                assert cell == "" and got is None
            elif want != want:
                assert cell == "NaN" and got == "NaN"
            elif abs(want) == float("inf"):
                spelled = "Infinity" if want > 0 else "-Infinity"
                assert cell == spelled and got == spelled
            else:
                assert float(cell) == want and got == want
                # The shortest digits that read back as the value, as repr has them.
                assert digits(cell) == digits(repr(want))


def test_float32_values_print_as_their_own_shortest_decimal() -> None:
    narrow = np.array([0.1, 1 / 3, 2.5e-8], np.float32)
    readable = [float(str(v)) for v in narrow]  # what storage hands the export
    text = b"".join(written("csv", COLUMNS, [page(readable, [None] * 3)])).decode()
    assert text.splitlines()[1:] == ["0,0.1,", "1,0.33333334,", "2,2.5e-8,"]


def test_parquet_without_pyarrow_is_refused_before_a_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(Invalid, match="needs pyarrow on the server"):
        written("parquet", COLUMNS, [])
