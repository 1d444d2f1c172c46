"""The one way the dashboard writes numbers in its tables and notes."""

from __future__ import annotations

import doctest
import math

import pytest

from normwatch.dashboard import numbers
from normwatch.dashboard.numbers import number_text, signed_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (15.37, "15.37"),
        (8.76701, "8.767"),  # four significant digits, where the table said 8.76701
        (2.0, "2"),
        (0.5, "0.5"),
        (-0.0045, "-0.0045"),
        (0.0003, "0.0003"),
        (0.000123456, "0.0001235"),
        (0.0000123456, "1.235e-5"),
        (999.94, "999.9"),
        (999.96, "1,000"),
        (1234.5, "1,234"),  # round half to even, as Python rounds
        (98_765.4, "98,765"),
        (999_999.0, "999,999"),
        (1_000_000.0, "1e6"),
        (-3.25e9, "-3.25e9"),
        (0, "0"),
        (-0.0, "0"),
        (7, "7"),
        (12_000, "12,000"),
        (math.nan, "NaN"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        ("NaN", "NaN"),
        ("Infinity", "inf"),
        ("-Infinity", "-inf"),
        (None, "—"),
    ],
)
def test_number_text(value: float | str | None, text: str) -> None:
    assert number_text(value) == text


def test_signed_text_marks_a_rise() -> None:
    assert [signed_text(v) for v in (0.02, -0.5, 0.0, 1e7, math.inf, -math.inf, None)] == [
        "+0.02",
        "-0.5",
        "0",
        "+1e7",
        "+inf",
        "-inf",
        "—",
    ]


def test_doctests() -> None:
    failed, tried = doctest.testmod(numbers)
    assert (failed, tried > 0) == (0, True)
