"""One series summed up for a comparison table: its largest and final values and its slope.

>>> import numpy as np
>>> s = summarize(np.arange(0, 3000, 1000), np.array([1.0, 3.0, 5.0]))
>>> (s.max, s.final, s.final_step, s.slope_per_1k)
(5.0, 5.0, 2000, 2.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .fit import fit_line

__all__ = [
    "BASELINE_POINTS",
    "BASELINE_SPAN",
    "Summary",
    "config_diff",
    "level_before",
    "slope_per_1k",
    "summarize",
]

BASELINE_POINTS = 32
"""Logged values a level before a step (a layer's baseline, a moment's level before a
spike) is the median of."""
BASELINE_SPAN = 4096
"""Steps before that step searched for them."""


@dataclass(frozen=True, slots=True)
class Summary:
    points: int
    max: float | None
    """The largest finite value (None: no finite value)."""
    final: float | None
    """The value at the last logged step, NaN or infinite as logged (None: no point)."""
    final_step: int | None
    slope_per_1k: float | None
    """Least-squares slope of the finite points, per 1,000 steps (None: fewer than 2)."""


def slope_per_1k(steps: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> float | None:
    """The least-squares slope of the finite points (`.fit.fit_line`), per 1,000 steps;
    None with fewer than two distinct steps."""
    fit = fit_line(steps, values)
    return None if fit is None else 1000.0 * fit.slope


def level_before(values: npt.NDArray[np.float64]) -> float:
    """The level of a metric before a step, from its ``values`` logged in the `BASELINE_SPAN`
    steps before it, in step order: the median of the last `BASELINE_POINTS` finite ones;
    NaN without one.

    >>> level_before(np.array([9.0, 1.0, np.nan, 2.0]))
    2.0
    """
    finite = values[np.isfinite(values)][-BASELINE_POINTS:]
    return float(np.median(finite)) if len(finite) else math.nan


def summarize(steps: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> Summary:
    finite = values[np.isfinite(values)]
    return Summary(
        points=len(steps),
        max=float(finite.max()) if len(finite) else None,
        final=float(values[-1]) if len(values) else None,
        final_step=int(steps[-1]) if len(steps) else None,
        slope_per_1k=slope_per_1k(steps, values),
    )


def config_diff(configs: list[dict[str, object]]) -> dict[str, list[object]]:
    """The config keys (nested keys joined by ``.``) whose values differ between runs, each
    with every run's value (None where a run does not set it).

    >>> before = {"lr": 3e-4, "model": {"qk_norm": False}}
    >>> config_diff([before, {"lr": 3e-4, "model": {"qk_norm": True}}])
    {'model.qk_norm': [False, True]}
    """
    flat = [_flatten(c) for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    missing = object()
    out = {}
    for key in keys:
        values = [f.get(key, missing) for f in flat]
        if any(not _same(v, values[0]) for v in values[1:]):
            out[key] = [None if v is missing else v for v in values]
    return out


def _flatten(config: dict[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b
