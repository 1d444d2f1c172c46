"""Float comparisons that tell NaN, the infinities and the signed zeros apart, and the values
that catch a reader that rounds or reprints."""

from __future__ import annotations

import math

import numpy as np

TRICKY_FLOATS = [
    2.99993896484375,  # exact in float32, whose shortest digits (2.999939) are another float64
    16.017241,
    1 / 3,
    1e-50,
    5e-324,
    float(2**53 + 1),
    -0.0,
    0.1,
]
"""Finite float64s that float32 storage, a float32 reprint or a decimal rounding changes."""


def bits(values: object) -> list[int]:
    """Each float64's bit pattern (``-0.0`` is not ``0.0``)."""
    return np.asarray(values, np.float64).view(np.int64).tolist()


def same_float(a: float | None, b: float | None) -> bool:
    """Equal bit for bit in meaning: NaN equals NaN, and -0.0 differs from 0.0."""
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
