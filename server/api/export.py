"""Export: every stored point of a run's metrics, streamed as CSV, JSON lines or Parquet."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from ..schemas import INT64_MAX, MetricName
from ..services import export as exporter
from ..services.access import owned_run
from ..services.aliases import project_aliases
from ..services.export_formats import FORMATS, Format, media_type, written
from .context import ContextDep
from .deps import Reader, SnapshotDep
from .errors import API, documented

router = APIRouter(prefix="/api/v1/runs/{run_id}", tags=["export"], responses=documented(*API, 404))

MAX_METRICS = 256
"""Names, globs and expressions one export may list (globs may expand further, up to
`services.export.MAX_COLUMNS` columns)."""

Step = Annotated[int | None, Query(ge=-INT64_MAX - 1, le=INT64_MAX)]


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {kind: {} for kind, _ in FORMATS.values()},
            "description": "Every stored point of the columns, a row a step.",
        }
    },
)
def export(
    run_id: str,
    session: SnapshotDep,
    who: Reader,
    context: ContextDep,
    metric: Annotated[list[MetricName], Query(min_length=1, max_length=MAX_METRICS)],
    start: Step = None,
    end: Step = None,
    format: Format = "csv",  # noqa: A002 - the query parameter's name
    segment: Annotated[
        int | None,
        Query(
            ge=1,
            le=32767,
            description="Read the history as it was while this segment was the latest "
            "(before a restart from further back replaced some of its steps); default: the "
            "latest history.",
        ),
    ] = None,
) -> StreamingResponse:
    """Every stored point of the latest lineage in ``[start, end]``, streamed a page of
    steps at a time: a row a step where any column is logged. A name is a column, a glob a
    column for each metric it matches, an expression (``rss(grad/norm/layers.*)``) one
    column computed from every stored point. A name the run never logged, or a glob that
    matches none of its names, is a 404 naming it (``unknown``) with the closest names the
    run has (``suggestions``), before any byte is sent.

    ``format=csv`` (the default): header ``step,A,B``, an empty cell where a column has
    no point, each value as the shortest decimal a float64 parser reads back to the stored
    value, ``NaN``/``Infinity``/``-Infinity``; a header cell that would start with ``=``,
    ``+``, ``-``, ``@`` (or ``'``, a tab, a carriage return) gets a leading ``'`` so that
    no spreadsheet evaluates it. ``jsonl``: an object a row, ``null`` where absent, names
    exact. ``parquet``: float64 columns, names exact; needs pyarrow on the server. In every
    format the first column is ``step``; a metric itself named ``step`` is the column
    ``step (metric)``."""
    run, _ = owned_run(session, who, run_id)
    aliases = project_aliases(session, run.project_id)
    columns = exporter.columns(session, run, metric, aliases)
    exporter.lineage_upto(session, run, segment)  # a segment the run never had: 422 now
    pages = exporter.streamed(
        context.snapshot_sessions, run.key, columns, aliases, start, end, segment
    )
    body = written(format, columns, pages)  # Invalid (422) here, before any byte
    filename = exporter.file_stem(run.name, run_id, start, end, segment)
    return StreamingResponse(
        body,
        media_type=media_type(format),
        headers={
            "Content-Disposition": f'attachment; filename="{filename}.{FORMATS[format][1]}"',
            "Cache-Control": "no-store",
        },
    )
