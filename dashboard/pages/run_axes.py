"""The run chart's x axis by tokens or by wall time. Pure.

The chart is built in steps, as everything the page reads is indexed by step; an `XAxis`
then moves every x of the figure (the lines, the flags and alert marks on its top edge, the
event lines, the fitted lines and forecast of its aids, the range) onto tokens seen or the
wall time since the run's first batch (in s, min or h by its span), through a reference:
the run's tokens metric, or its clock (the marks its batches left,
`normwatch.server.storage.clock`). Between the reference's
points the mapping is linear; past its ends it goes on at the reference's mean rate, so that
a forecast or a step logged after the last mark still lands. Wall time never goes below
0: a step before the first mark is at the run's start. A zoom on the chart comes back
in the same units and goes back to steps with `XAxis.to_step`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..figures import Figure, plot_text

__all__ = [
    "CLOCK_UNITS",
    "TOKEN_NAMES",
    "XAxis",
    "clock_axis",
    "clock_unit",
    "tokens_axis",
    "tokens_metric",
]

TOKEN_NAMES = ("total_tokens", "tokens", "tokens_seen", "num_tokens", "consumed_tokens")
"""The last part of a metric name that counts the tokens trained on so far (Levanter logs
``throughput/total_tokens``; others ``tokens`` or ``train/tokens_seen``)."""


def tokens_metric(names: Sequence[str]) -> str | None:
    """The run's metric that counts tokens seen: the first whose last part (after ``/`` or
    ``.``) is one of `TOKEN_NAMES`, in that order of preference; None without one.

    >>> tokens_metric(["train/loss", "train/tokens", "throughput/total_tokens"])
    'throughput/total_tokens'
    >>> tokens_metric(["grad/norm/total"]) is None
    True
    """
    last = {name: name.replace(".", "/").rsplit("/", 1)[-1] for name in names}
    for wanted in TOKEN_NAMES:
        found = next((name for name in names if last[name] == wanted), None)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class XAxis:
    """An x axis in other units than steps: ``steps`` ascending and the ``x`` they are at
    (non-decreasing), with the axis's title and the hover's unit; ``floor``, when set, is
    the least x (a step before the reference's first point is drawn there); ``hover`` the
    d3 format the hover writes an x in (SI prefixes for tokens: ``1.2G``)."""

    steps: npt.NDArray[np.float64]
    x: npt.NDArray[np.float64]
    title: str
    unit: str
    floor: float | None = None
    hover: str = ".4~s"

    def to_x(self, steps: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Steps on this axis: linear between the reference's points, at its mean rate
        past its ends.

        >>> axis = XAxis(np.array([10.0, 20.0]), np.array([100.0, 300.0]), "t", "")
        >>> axis.to_x([0, 15, 30]).tolist()
        [-100.0, 200.0, 500.0]
        """
        mapped = _mapped(np.asarray(steps, dtype=np.float64), self.steps, self.x)
        return mapped if self.floor is None else np.fmax(mapped, self.floor)

    def to_step(self, x: float) -> float:
        """The step at ``x`` on this axis (the inverse of `to_x`).

        >>> XAxis(np.array([10.0, 20.0]), np.array([100.0, 300.0]), "t", "").to_step(500.0)
        30.0
        """
        return float(_mapped(np.array([x], dtype=np.float64), self.x, self.steps)[0])

    def apply(self, fig: Figure) -> Figure:
        """``fig``, built in steps, with every x on this axis instead; hovers say the step.

        Traces keep their steps in ``customdata`` for the hover; shapes and annotations
        placed on the x axis move; the axis's range, when set, moves too.
        """
        for trace in fig["data"]:
            xs = trace.get("x")
            if not isinstance(xs, list) or not xs:
                continue
            steps = np.asarray(xs, dtype=np.float64)
            trace["x"] = _listed(self.to_x(steps))
            if trace.get("hoverinfo") == "skip":
                continue
            trace["customdata"] = xs
            template = trace.get("hovertemplate")
            if isinstance(template, str):
                trace["hovertemplate"] = template.replace(
                    "step %{x}", f"%{{x:{self.hover}}}{self.unit} · step %{{customdata}}"
                )
        layout = fig["layout"]
        for shape in layout.get("shapes", []):
            if shape.get("xref") == "x":
                for key in ("x0", "x1"):
                    if isinstance(shape.get(key), int | float):
                        shape[key] = float(self.to_x([shape[key]])[0])
        for note in layout.get("annotations", []):
            if note.get("xref") == "x" and isinstance(note.get("x"), int | float):
                note["x"] = float(self.to_x([note["x"]])[0])
        xaxis = layout.setdefault("xaxis", {})
        shown = xaxis.get("range")
        if isinstance(shown, list) and len(shown) == 2:
            xaxis["range"] = _listed(self.to_x(shown))
        xaxis["title"] = {"text": plot_text(self.title)}
        return fig


def tokens_axis(metric: str, steps: Sequence[int], tokens: Sequence[float]) -> XAxis | None:
    """The x axis by tokens seen, from the run's tokens ``metric`` as read (its non-finite
    points left out, a counter that went back held at its maximum); None with fewer than
    two points to draw it through."""
    s, x = _reference(steps, tokens)
    return XAxis(s, x, f"tokens ({metric})", " tokens") if len(s) >= 2 else None


CLOCK_UNITS = ((120.0, "s", 1.0), (7200.0, "min", 60.0), (float("inf"), "h", 3600.0))
"""The wall time's unit by the clock's span in seconds: seconds under two minutes, minutes
under two hours, hours beyond; the span then reads in numbers from 1 to about 120."""


def clock_unit(span_s: float) -> tuple[str, float]:
    """The unit a wall time axis spanning ``span_s`` seconds is drawn in, and its seconds.

    >>> clock_unit(90.0), clock_unit(3000.0), clock_unit(36_000.0)
    (('s', 1.0), ('min', 60.0), ('h', 3600.0))
    """
    return next((name, size) for below, name, size in CLOCK_UNITS if span_s < below)


def clock_axis(steps: Sequence[int], at: Sequence[float]) -> XAxis | None:
    """The x axis by wall time since the run's first mark (0 there, never less), from its
    clock, in the unit its span reads best in (`clock_unit`); None with fewer than two
    marks."""
    s, x = _reference(steps, at)
    if len(s) < 2:
        return None
    name, size = clock_unit(float(x[-1] - x[0]))
    title = f"wall time since the run's start ({name})"
    # Plain digits: SI prefixes would write half an hour as "500m h".
    return XAxis(s, (x - x[0]) / size, title, f" {name}", floor=0.0, hover=".4~g")


def _reference(
    steps: Sequence[int], values: Sequence[float]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    s = np.asarray(steps, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(v) & np.isfinite(s)
    s, v = s[keep], v[keep]
    order = np.argsort(s, kind="stable")
    s, v = s[order], np.maximum.accumulate(v[order]) if len(v) else v
    # One x a step: where a step repeats, its last value.
    last = np.append(s[1:] != s[:-1], True) if len(s) else np.empty(0, dtype=bool)
    return s[last], v[last]


def _mapped(
    points: npt.NDArray[np.float64],
    ref_from: npt.NDArray[np.float64],
    ref_to: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    out = np.interp(points, ref_from, ref_to)
    span = ref_from[-1] - ref_from[0]
    rate = (ref_to[-1] - ref_to[0]) / span if span > 0 else 0.0
    before, after = points < ref_from[0], points > ref_from[-1]
    out[before] = ref_to[0] + (points[before] - ref_from[0]) * rate
    out[after] = ref_to[-1] + (points[after] - ref_from[-1]) * rate
    return out


def _listed(values: npt.NDArray[np.float64]) -> list[Any]:
    return [float(v) if np.isfinite(v) else None for v in values.tolist()]
