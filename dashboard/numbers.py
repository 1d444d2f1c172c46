"""How the dashboard writes a number in its tables and notes: one way everywhere. Pure.

Four significant digits (``15.37``, ``8.767``, ``0.001234``); from 1,000 up to a million the
whole number with thousands separators (``12,346``); beyond either end scientific with four
significant digits at most (``1.235e6``, ``1.2e-5``); and what is no number said plainly:
``NaN``, ``inf``, ``-inf``, and ``—`` for none. The API's JSON spells the non-finite values
``"NaN"``, ``"Infinity"`` and ``"-Infinity"``; they read the same.
"""

from __future__ import annotations

import math

__all__ = ["LARGE", "NONE", "SMALL", "number_text", "signed_text"]

NONE = "—"
"""What a missing number reads as."""
LARGE = 1e6
"""From this size on a number is written in scientific notation."""
SMALL = 1e-4
"""Below this size (and above 0) a number is written in scientific notation."""
_API = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def number_text(value: float | str | None) -> str:
    """``value`` as the dashboard writes numbers (see the module).

    >>> [number_text(v) for v in (15.37, 8.76701, 0.0012346, 999.96, 12345.6, 0, -2.5)]
    ['15.37', '8.767', '0.001235', '1,000', '12,346', '0', '-2.5']
    >>> [number_text(v) for v in (1234567.0, 0.000012, float("nan"), "-Infinity", None)]
    ['1.235e6', '1.2e-5', 'NaN', '-inf', '—']
    """
    if value is None:
        return NONE
    if isinstance(value, str):
        if value not in _API:
            return value
        value = _API[value]
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if abs(x) >= LARGE or abs(x) < SMALL:
        mantissa, exponent = f"{x:.3e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    rounded = float(f"{x:.4g}")
    if abs(rounded) >= 1000:
        return f"{round(x):,}"
    return f"{rounded:g}"


def signed_text(value: float | str | None) -> str:
    """`number_text` with a ``+`` before a positive number: a change or a slope.

    >>> signed_text(2.5), signed_text(-0.004), signed_text(0.0), signed_text("Infinity")
    ('+2.5', '-0.004', '0', '+inf')
    """
    text = number_text(value)
    if text[0].isdigit() and text != "0" or text == "inf":
        return "+" + text
    return text
