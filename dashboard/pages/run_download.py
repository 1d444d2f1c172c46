"""The run chart's "download CSV": every stored point of the series it draws, over the
range it shows, as a file.

The link points at ``/runs/<id>/export.csv?metric=...&start=...&end=...``, a route of the
dashboard (its session cookie is the viewer's login) that streams the server's export
(`normwatch.server.services.export`): one row a step where any series is logged, a column
a series (``step,<left>,<right>,<extra>...``, an expression as one column), empty where a
series has no point at that step, values exactly as stored, NaN and infinities written as
such. The browser saves it as it arrives, so a million-step range is no larger a page than
a hundred steps; the file's name says which run and which steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Protocol
from urllib.parse import urlencode

import dash
from dash import Input, Output
from fastapi import FastAPI, Query
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from normwatch.server.auth import Principal
from normwatch.server.services.export import file_stem

from ..refusals import NO_SUCH_RUN, Refusal, RunNotFound, UnknownMetrics, said
from ..session import viewer
from .run_view import RunView

__all__ = ["EXPORT_PATH", "export_href", "install_export", "register"]

EXPORT_PATH = "/runs/{run_id}/export.csv"
MAX_SERIES = 256
"""Series one download may name (the chart draws far fewer)."""


class ExportReads(Protocol):
    """What the download streams (the dashboard's data)."""

    def export_csv(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        start: int | None,
        end: int | None,
    ) -> tuple[str, Iterator[bytes]]: ...


def export_href(view: RunView | None) -> str | None:
    """The download link of ``view``: its run, its series and its range (None: nothing
    charted).

    >>> export_href(RunView("r1", "grad/norm/total", "train/loss", 10, 99))
    '/runs/r1/export.csv?metric=grad%2Fnorm%2Ftotal&metric=train%2Floss&start=10&end=99'
    """
    if view is None or not view.metrics:
        return None
    params: list[tuple[str, str | int]] = [("metric", m) for m in view.metrics]
    params += [(k, v) for k, v in (("start", view.start), ("end", view.end)) if v is not None]
    return EXPORT_PATH.format(run_id=view.run) + "?" + urlencode(params)


def install_export(server: FastAPI, data: ExportReads) -> None:
    """Add the download's route to ``server`` (whose session middleware guards it)."""

    def export(
        run_id: str,
        metric: Annotated[list[str], Query(min_length=1, max_length=MAX_SERIES)],
        start: Annotated[int | None, Query(ge=-(2**63), le=2**63 - 1)] = None,
        end: Annotated[int | None, Query(ge=-(2**63), le=2**63 - 1)] = None,
    ) -> Response:
        try:
            name, body = data.export_csv(viewer(), run_id, metric, start=start, end=end)
        except RunNotFound:
            return PlainTextResponse(NO_SUCH_RUN, 404)
        except UnknownMetrics as exc:  # named, with the closest names the run has
            return PlainTextResponse(said(exc), 404)
        except Refusal as exc:
            return PlainTextResponse(said(exc), 422)
        stem = file_stem(name, run_id, start, end)
        return StreamingResponse(
            body,
            media_type="text/csv; charset=utf-8",
            headers={
                "Content-Disposition": f'attachment; filename="{stem}.csv"',
                "Cache-Control": "no-store",
            },
        )

    server.add_api_route(EXPORT_PATH, export, methods=["GET"], include_in_schema=False)


def register(app: dash.Dash) -> None:
    @app.callback(Output("download-csv", "href"), Input("view", "data"))
    async def link(store: object) -> str | None:
        return export_href(RunView.from_store(store))
