"""Argument checks of the spike finder (:mod:`.spikes`): clear errors for what a caller
passes, before any arithmetic."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def checked_steps(steps: npt.ArrayLike) -> IntArray:
    step_arr = np.asarray(steps)
    if step_arr.ndim != 1:
        raise ValueError(f"steps must be one-dimensional, got shape {step_arr.shape}")
    if len(step_arr) == 0:
        return np.empty(0, dtype=np.int64)
    if not np.issubdtype(step_arr.dtype, np.integer):
        raise ValueError(f"steps must be integers, got {step_arr.dtype}; pass them as int64")
    checked = step_arr.astype(np.int64, copy=False)
    if np.any(checked[1:] <= checked[:-1]):
        raise ValueError(
            "steps must be strictly ascending: sort the points by step and keep one value per"
            " step (analyse each segment of a restarted run on its own)"
        )
    return checked


def checked_series(steps: npt.ArrayLike, values: npt.ArrayLike) -> tuple[IntArray, FloatArray]:
    step_arr = checked_steps(steps)
    value_arr = np.asarray(values, dtype=np.float64)
    if value_arr.ndim != 1 or len(value_arr) != len(step_arr):
        raise ValueError(
            f"values must be one-dimensional with one value per step: got {len(step_arr)}"
            f" steps and values of shape {value_arr.shape}"
        )
    return step_arr, value_arr


def check_number(name: str, number: float, *, least: float, strict: bool) -> None:
    above = number > least if strict else number >= least
    if not (above and np.isfinite(number)):
        relation = ">" if strict else ">="
        raise ValueError(f"{name} must be a finite number {relation} {least}, got {number}")


def check_count(name: str, count: int, *, least: int) -> int:
    if isinstance(count, bool) or int(count) != count or count < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {count}")
    return int(count)
