"""The export's writers on pages made by hand: every float64 round-trips bit for bit through
CSV (Python and pandas), JSON lines and Parquet (pyarrow and pandas), the text is the
shortest that does, a metric named ``step`` keeps a column of its own, formula-like names
are neutralised in the CSV header only, and Parquet without pyarrow is a clear 422."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys

import numpy as np
import orjson
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from normwatch.client._api import _unquoted_name
from normwatch.server.errors import Invalid
from normwatch.server.services.export import Column, Page
from normwatch.server.services.export_formats import column_keys, spreadsheet_safe, written

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


def bits(values: object) -> list[int]:
    """Each float64's bit pattern: equal only for the same float (``-0.0`` is not ``0.0``);
    every NaN as the one NaN (text formats spell it ``NaN``, without a payload)."""
    wide = np.asarray(values, np.float64)
    return np.where(np.isnan(wide), np.nan, wide).view(np.int64).tolist()


float64s = st.integers(0, 2**64 - 1).map(lambda b: float(np.uint64(b).view(np.float64)))
"""Every float64 bit pattern alike: subnormals, -0.0, 2**53 + 1 and the rest."""

TRICKY = [
    2.99993896484375,  # exact in float32; its float32 shortest digits are 2.999939
    float(np.float32(0.8963446)),  # 0.8963446021080017, the float64 of a float32
    16.017241,
    1 / 3,
    1e-50,
    5e-324,
    2.2250738585072014e-308,
    float(2**53 + 1),
    -0.0,
    1.7976931348623157e308,
]


@given(st.lists(float64s, min_size=1, max_size=40))
def test_every_float64_reads_back_bit_for_bit_from_csv_jsonl_and_parquet(
    drawn: list[float],
) -> None:
    logged = np.array(TRICKY + drawn, np.float64)
    n = len(logged)
    cols = [Column("x", "x")]
    whole = Page(np.arange(n, dtype=np.int64), [logged], [np.ones(n, np.bool_)])
    finite = np.isfinite(logged)

    text = b"".join(written("csv", cols, [whole])).decode()
    cells = [row[1] for row in csv.reader(io.StringIO(text))][1:]
    assert bits([float(c) for c in cells]) == bits(logged)
    frame = pd.read_csv(
        io.StringIO(text), dtype={"x": np.float64}, keep_default_na=False, na_values=["NaN"]
    )
    read = frame["x"].to_numpy()
    assert bits(read[finite]) == bits(logged[finite])
    assert np.array_equal(np.isnan(read), np.isnan(logged))

    lines = b"".join(written("jsonl", cols, [whole])).splitlines()
    for line, want in zip(lines, logged.tolist(), strict=True):
        for got in (orjson.loads(line)["x"], json.loads(line)["x"]):
            if math.isfinite(want):
                assert bits([got]) == bits([want])
            else:
                assert got == ("NaN" if want != want else "Infinity" if want > 0 else "-Infinity")

    parquet = b"".join(written("parquet", cols, [whole]))
    table = pq.read_table(io.BytesIO(parquet))
    assert str(table.schema.field("x").type) == "double"
    assert bits(table.column("x").to_numpy()) == bits(logged)
    assert bits(pd.read_parquet(io.BytesIO(parquet))["x"].to_numpy()) == bits(logged)


def test_float64_of_a_float32_prints_its_own_shortest_decimal_not_the_float32s() -> None:
    wide = np.array([np.float32(2.99993896484375), np.float32(0.8963446)]).astype(np.float64)
    text = b"".join(written("csv", COLUMNS, [page(wide.tolist(), [None, None])])).decode()
    assert text.splitlines()[1:] == ["0,2.99993896484375,", "1,0.8963446021080017,"]
    # A page handed float32 arrays prints them as the float64 they are, all the same.
    narrow = Page(
        np.arange(2, dtype=np.int64),
        [wide.astype(np.float32), np.zeros(2, np.float32)],
        [np.ones(2, np.bool_), np.zeros(2, np.bool_)],
    )
    again = b"".join(written("csv", COLUMNS, [narrow])).decode()
    assert again == text


NAMED_STEP = [Column("step", "step"), Column("step (metric)", "step (metric)"), Column("a", "a")]


def test_a_metric_named_step_keeps_its_own_column_in_every_format() -> None:
    steps = np.array([10, 20], np.int64)
    values = [np.array([1.5, 2.5]), np.array([7.0, 8.0]), np.array([0.25, np.nan])]
    present = [np.ones(2, np.bool_), np.ones(2, np.bool_), np.array([True, False])]
    one = Page(steps, values, present)
    keys = ["step", "step (metric)", "step (metric) (metric)", "a"]

    text = b"".join(written("csv", NAMED_STEP, [one])).decode()
    assert list(csv.reader(io.StringIO(text))) == [
        keys,
        ["10", "1.5", "7.0", "0.25"],
        ["20", "2.5", "8.0", ""],
    ]
    frame = pd.read_csv(io.StringIO(text))
    assert list(frame.columns) == keys and frame["step"].tolist() == [10, 20]

    rows = [
        orjson.loads(line) for line in b"".join(written("jsonl", NAMED_STEP, [one])).splitlines()
    ]
    assert rows == [
        {"step": 10, "step (metric)": 1.5, "step (metric) (metric)": 7.0, "a": 0.25},
        {"step": 20, "step (metric)": 2.5, "step (metric) (metric)": 8.0, "a": None},
    ]

    parquet = b"".join(written("parquet", NAMED_STEP, [one]))
    table = pq.read_table(io.BytesIO(parquet))
    assert table.column_names == keys
    assert table.to_pydict()["step"] == [10, 20]
    assert table.to_pydict()["step (metric)"] == [1.5, 2.5]
    read = pd.read_parquet(io.BytesIO(parquet))
    assert list(read.columns) == keys and read["step (metric) (metric)"].tolist() == [7.0, 8.0]


@given(st.lists(st.sampled_from(["step", "a", "(metric)", " (metric)"]), max_size=6))
def test_column_names_never_repeat_whatever_the_metrics_are_named(parts: list[str]) -> None:
    names = {"step", "step (metric)", "step (metric) (metric)", "x", "".join(parts)}
    keys = column_keys([Column(name, name) for name in sorted(names)])
    assert keys[0] == "step" and len(set(keys)) == len(keys)
    for name, key in zip(sorted(names), keys[1:], strict=True):
        assert key == name or (key == name + " (metric)" and name.startswith("step"))


FORMULAS = {
    '=HYPERLINK("http://evil.example","x")': '\'=HYPERLINK("http://evil.example","x")',
    "+SUM(1+1)": "'+SUM(1+1)",
    "-2+3": "'-2+3",
    "@SUM(1,1)": "'@SUM(1,1)",
    "\tcmd": "'\tcmd",
    "\r=1": "'\r=1",
    "'=1": "''=1",
    "'plain": "''plain",
    "grad/norm/total": "grad/norm/total",
    "a=b": "a=b",
    "line\nbreak": "line\nbreak",
}


def test_formula_like_names_are_neutralised_in_csv_and_exact_in_jsonl_and_parquet() -> None:
    cols = [Column(name, name) for name in FORMULAS]
    n = len(cols)
    one = Page(
        np.array([0], np.int64),
        [np.array([float(i)]) for i in range(n)],
        [np.ones(1, np.bool_)] * n,
    )
    text = b"".join(written("csv", cols, [one])).decode()
    header, row = list(csv.reader(io.StringIO(text, newline="")))
    assert header == ["step", *FORMULAS.values()]
    assert row == ["0", *(f"{float(i)}" for i in range(n))]
    # No header cell a spreadsheet would evaluate, and the cells still tell the names apart.
    assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in header)
    assert [spreadsheet_safe(name) for name in FORMULAS] == list(FORMULAS.values())

    [line] = b"".join(written("jsonl", cols, [one])).splitlines()
    assert list(orjson.loads(line)) == ["step", *FORMULAS]
    table = pq.read_table(io.BytesIO(b"".join(written("parquet", cols, [one]))))
    assert table.column_names == ["step", *FORMULAS]


@given(st.text(min_size=1, max_size=12))
def test_history_reads_every_name_back_from_its_spreadsheet_safe_cell(name: str) -> None:
    cell = spreadsheet_safe(name)
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert _unquoted_name(cell) == name
