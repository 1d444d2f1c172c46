"""The compare chart's traces, as plotly.js takes them: a run's line, its raw points faint
behind, a mean with its band, and where a line is not finite. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .figures import RAW_OPACITY, Line, plot_text
from .transforms import Band

__all__ = ["band_fill", "band_traces", "faint_trace", "gaps", "non_finite", "run_trace"]


def band_fill(color: str, opacity: float = 0.15) -> str:
    """A band's fill: its line's ``#rrggbb`` colour at 15 % opacity (its edges: 50 %).

    >>> band_fill("#333333"), band_fill("#333333", 0.5)
    ('rgba(51, 51, 51, 0.15)', 'rgba(51, 51, 51, 0.5)')
    """
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {opacity})"


def gaps(values: npt.NDArray[np.float64]) -> list[float | None]:
    """Plotly draws None as a gap: non-finite values become gaps on the line."""
    return [float(v) if np.isfinite(v) else None for v in values]


def run_trace(
    label: str, steps: Sequence[int], values: npt.NDArray[np.float64], color: str
) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": list(steps),
        "y": gaps(values),
        "name": plot_text(label),
        "meta": plot_text(label),
        "legendgroup": plot_text(label),
        "mode": "lines",
        "line": {"color": color, "width": 1.5},
        "connectgaps": False,
        "hovertemplate": "step %{x}<br>%{y:.6g}<extra>%{meta}</extra>",
    }


def faint_trace(
    label: str, steps: Sequence[int], values: npt.NDArray[np.float64], color: str
) -> dict[str, Any]:
    """A run's raw points, faint behind what is drawn of them."""
    return {
        "type": "scatter",
        "x": list(steps),
        "y": gaps(values),
        "name": plot_text(label) + " (raw)",
        "mode": "lines",
        "line": {"color": color, "width": 1},
        "opacity": RAW_OPACITY,
        "connectgaps": False,
        "showlegend": False,
        "hoverinfo": "skip",
    }


def band_traces(
    name: str, key: str, color: str, band: Band, average: npt.NDArray[np.float64]
) -> list[dict[str, Any]]:
    """The band's lower edge, its upper edge filled down to it, then the mean over it; one
    legend entry (the mean's) shows and hides all three. Each holds its bucket's value
    from the bucket's first step to the next bucket's (``hv``), and the last bucket's to
    the grid's last step, so the band's edge at any step is its bucket's low or high."""
    xs = [*band.steps.tolist(), band.last]

    def held(values: npt.NDArray[np.float64]) -> list[float | None]:
        shown = gaps(values)
        return [*shown, shown[-1]] if shown else []

    edge = {
        "type": "scatter",
        "x": xs,
        "mode": "lines",
        # An edge a pixel wide: a spike whose bucket is a pixel wide shows as the band's
        # edge rising to it, where a fill alone would be too thin and faint to see.
        "line": {"width": 1, "color": band_fill(color, 0.5), "shape": "hv"},
        "connectgaps": False,
        "showlegend": False,
        "hoverinfo": "skip",
        "legendgroup": key,
    }
    low, high = held(band.low), held(band.high)
    counts = [*band.count.tolist(), int(band.count[-1]) if len(band.count) else 0]
    return [
        {**edge, "y": low, "name": "min"},
        {**edge, "y": high, "name": "max", "fill": "tonexty", "fillcolor": band_fill(color)},
        {
            "type": "scatter",
            "x": xs,
            "y": held(average),
            "name": name,
            "mode": "lines",
            "line": {"color": color, "width": 2, "shape": "hv"},
            "connectgaps": False,
            "legendgroup": key,
            "customdata": [[n, lo, hi] for n, lo, hi in zip(counts, low, high, strict=True)],
            "hovertemplate": "step %{x}<br>mean %{y:.6g} of %{customdata[0]} runs"
            "<br>min %{customdata[1]:.6g} · max %{customdata[2]:.6g}<extra></extra>",
        },
    ]


def non_finite(line: Line) -> list[tuple[int, str]]:
    return [
        (s, "NaN" if np.isnan(v) else ("+Inf" if v > 0 else "-Inf"))
        for s, v in zip(line.steps, line.values, strict=True)
        if not np.isfinite(v)
    ]
