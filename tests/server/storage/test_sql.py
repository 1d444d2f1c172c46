"""SQL helpers: rows padded to a few statement shapes."""

from __future__ import annotations

import pytest

from normwatch.server.storage.sql import padded


@pytest.mark.parametrize("count", [1, 2, 3, 5, 100, 511, 512, 513])
def test_padded_rows_repeat_the_last_up_to_a_power_of_two(count: int) -> None:
    rows = [(i,) for i in range(count)]
    out = padded(rows)
    size = len(out)
    assert size >= count and size & (size - 1) == 0 and size < 2 * count + 1
    assert list(out[:count]) == rows and set(out[count:]) <= {rows[-1]}
