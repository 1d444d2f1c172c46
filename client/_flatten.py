"""Logged values as the real scalars a run stores: nested dicts flattened, statistics
objects expanded, the rest dropped with a warning. Nothing here reads a device value."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from ._batch import _REJECTED_KINDS
from ._reporting import WarnOnce

STATISTICS = ("min", "max", "num", "nonzero_count", "sum", "sum_squares", "mean", "variance", "rms")
"""The scalars of Levanter's ``SummaryStats`` (and of the older ``Histogram``, a subset),
in the order W&B's Levanter backend logs them."""


def flatten_scalars(
    metrics: Mapping[str, Any], warn_once: WarnOnce, prefix: str = ""
) -> dict[str, object]:
    """``metrics`` as ``{name: real scalar}``.

    A nested mapping's names are joined with ``/`` (``{"eval": {"loss": x}}`` is
    ``eval/loss``); an object with a ``sum_squares`` (a Levanter ``Histogram`` or
    ``SummaryStats``) gives ``<name>/<statistic>`` for each of `STATISTICS` it holds as a
    scalar. Anything else that is not a real scalar is left out, with a warning the first
    time its name is seen.
    """
    out: dict[str, object] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if is_real_scalar(value):
            out[name] = value
        elif isinstance(value, Mapping):
            out.update(flatten_scalars(value, warn_once, f"{name}/"))
        elif hasattr(value, "sum_squares"):
            for statistic in STATISTICS:
                part = getattr(value, statistic, None)
                if is_real_scalar(part):
                    out[f"{name}/{statistic}"] = part
        else:
            warn_once(
                f"value:{name}",
                "dropped %s, a %s: normwatch stores real scalars only",
                name,
                _describe(value),
            )
    return out


def is_real_scalar(value: object) -> bool:
    """A real number, or an array (NumPy, JAX) holding one, judged by its shape and dtype
    alone, so that a device value is not waited for."""
    if type(value) in (float, int, bool) or isinstance(value, numbers.Real):
        return True
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if not isinstance(shape, tuple) or dtype is None:
        return False
    return math.prod(shape) == 1 and getattr(dtype, "kind", "O") not in _REJECTED_KINDS


def _describe(value: object) -> str:
    shape = getattr(value, "shape", None)
    kind = type(value).__name__
    return f"{kind} of shape {tuple(shape)}" if isinstance(shape, tuple) else kind
