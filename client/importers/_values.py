"""Reading metric values and names the same way in every text format."""

from __future__ import annotations

import math

NON_FINITE = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}
"""Spellings of non-finite values, lower-cased: JSON writers, W&B and C's printf use these."""

STEP_KEYS = ("step", "_step", "global_step")
"""Where a JSON record keeps its step when ``step_key`` is not given, in order of preference."""


def non_finite(text: str) -> float | None:
    """``"NaN"``, ``"Infinity"``, ``"-inf"`` (any case) → the float; anything else → None."""
    return NON_FINITE.get(text.strip().lower())


def is_wandb_internal(name: str) -> bool:
    """W&B's own bookkeeping (wall-clock time, its runtime record), not a training metric."""
    return name in ("_runtime", "_timestamp") or name.startswith("_wandb")


def metric_name(prefix: str, name: str) -> str:
    """``name`` under ``prefix`` (``"train"`` + ``"loss"`` → ``"train/loss"``)."""
    prefix = prefix.strip("/")
    return f"{prefix}/{name}" if prefix else name


def as_step(value: object) -> int | None:
    """A step read from a file: a non-negative integer, or an integral float (``100.0``).

    Returns None for anything else (negative, fractional, text, bool), for the caller to
    report with the place it came from.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None
