"""The run chart's "download CSV": the series it draws, over the range it shows, as a file.

One row a step, a column a series (``step,<left>,<right>,<extra>...``), empty where a
series has no point at that step; NaN and infinities written as such. The points are those
the series API answers for the range at its finest (`CSV_POINTS` buckets a series, M4):
every stored point for a range of up to that many steps, and each bucket's first, last,
minimum and maximum beyond it. The file's name says which run and which steps.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping
from typing import Any, Protocol

import dash
from dash import Input, Output, State
from dash.exceptions import PreventUpdate
from normwatch.server.auth import Principal

from ..data import MetricRefused, RunNotFound
from ..figures import Line
from ..session import viewer
from ..wiring import in_thread
from .run_view import RunView

__all__ = ["CSV_POINTS", "csv_text", "download", "register"]

CSV_POINTS = 20_000
"""Buckets a series the file asks for: the finest the series API answers."""
_UNSAFE = re.compile(r"[^0-9A-Za-z._-]+")


def csv_text(metrics: list[str], lines: Mapping[str, Line]) -> str:
    """``lines`` as CSV, one row a step (ascending) and a column each of ``metrics``.

    >>> print(csv_text(["a", "b"], {"a": Line("a", [1, 2], [0.5, float("nan")]),
    ...                             "b": Line("b", [2], [1e-7])}), end="")
    step,a,b
    1,0.5,
    2,NaN,1e-07
    """
    by_step: dict[int, dict[str, float]] = {}
    for name in metrics:
        line = lines.get(name)
        if line is None:
            continue
        for step, value in zip(line.steps, line.values, strict=True):
            by_step.setdefault(step, {})[name] = value
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["step", *metrics])
    for step in sorted(by_step):
        row = by_step[step]
        writer.writerow([step, *(_cell(row.get(name)) for name in metrics)])
    return out.getvalue()


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


class DownloadReads(Protocol):
    """What the download reads (the run page's data)."""

    def run(self, who: Principal, run_id: str) -> Any: ...

    def lines(
        self,
        who: Principal,
        run_id: str,
        metrics: list[str],
        *,
        start: int | None,
        end: int | None,
        points: int,
    ) -> dict[str, Line]: ...


def download(data: DownloadReads, who: Principal, view: RunView | None) -> dict[str, Any]:
    """The file ``dcc.Download`` sends for ``view``: its series over its range, named
    ``<run name>_<first step>-<last step>.csv``. Nothing for no view, a run of another
    project, or series the service will not read (`PreventUpdate`)."""
    if view is None or not view.metrics:
        raise PreventUpdate
    try:
        run = data.run(who, view.run)
        lines = data.lines(
            who, view.run, view.metrics, start=view.start, end=view.end, points=CSV_POINTS
        )
    except (RunNotFound, MetricRefused):
        raise PreventUpdate from None
    steps = [
        s for line in lines.values() if len(line.steps) for s in (line.steps[0], line.steps[-1])
    ]
    span = f"{min(steps)}-{max(steps)}" if steps else "empty"
    name = _UNSAFE.sub("_", str(run.name)).strip("_") or view.run
    return {
        "content": csv_text(view.metrics, lines),
        "filename": f"{name}_{span}.csv",
        "type": "text/csv",
    }


def register(app: dash.Dash, data: DownloadReads) -> None:
    @app.callback(
        Output("csv-file", "data"),
        Input("download-csv", "n_clicks"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_download(clicks: object, store: object) -> dict[str, Any]:
        if not clicks:
            raise PreventUpdate
        return await in_thread(download, data, viewer(), RunView.from_store(store))
