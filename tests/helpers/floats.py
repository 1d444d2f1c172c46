"""Float comparisons that tell NaN, the infinities and the signed zeros apart."""

from __future__ import annotations

import math


def same_float(a: float | None, b: float | None) -> bool:
    """Equal bit for bit in meaning: NaN equals NaN, and -0.0 differs from 0.0."""
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
