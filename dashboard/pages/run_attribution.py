"""The run page's attribution section: which parameter groups make up a global norm over
the view's steps, and whether the parts logged add up to the total.

For a family with a ``<family>/total`` (``grad/norm``, ``updates/norm``, ``params/norm``),
each group's share of the total's square, stacked (by group: embedding, blocks, final
norm, head...; or, with "per part", every part), read from the server
(`normwatch.server.services.attribution`) when the view, the family or the toggle changes,
and for a view of the latest steps every `.run_aids.ATTRIBUTION_EVERY` ticks.
"""

from __future__ import annotations

from typing import Any, Protocol

import dash
from dash import Input, Output, dcc, html

from normwatch.server.auth import Principal
from normwatch.server.services.attribution import Attribution

from ..attribution import attribution_families, attribution_figure, sum_check_text
from ..figures import Figure
from ..graph_config import GRAPH_CONFIG
from ..layers import small_empty
from ..refusals import Refusal, RunNotFound, said
from ..session import viewer
from ..wiring import in_thread
from .run_view import RunView

__all__ = [
    "COLUMNS",
    "HEIGHT",
    "NO_TOTAL",
    "AttributionReads",
    "draw_attribution",
    "register",
    "section",
]

COLUMNS = 600
"""Steps sampled over the view's range: about the chart's width in pixels."""
HEIGHT = 340
NO_TOTAL = (
    "No family with a total and its parts: log grad/norm/total beside grad/norm/{part} "
    "(normwatch.client.jax.stability_metrics does)."
)

DrawnAttribution = tuple[Figure, str]
"""The chart and the sum-check line under it."""


class AttributionReads(Protocol):
    """What the section reads (`RunNotFound` outside the viewer's project)."""

    def metric_names(self, who: Principal, run_id: str) -> list[str]: ...

    def attribution(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
        by: str = "group",
    ) -> Attribution: ...


def section(names: list[str]) -> html.Div:
    """The section for a run with metrics ``names``."""
    families = attribution_families(names)
    controls = [
        dcc.Dropdown(
            id="attribution-family",
            options=[{"label": f, "value": f} for f in families],
            value=families[0] if families else None,
            clearable=False,
            className="picker",
        ),
        dcc.Checklist(
            id="attribution-by",
            options=[{"label": " per part", "value": "part"}],
            value=[],
            className="toggle",
        ),
    ]
    return html.Div(
        [
            html.H3("Attribution"),
            html.P(
                "Each group's share of the total's square: a global norm is the root of its "
                "parts' summed squares, so the shares stack to 100 % where the parts logged "
                "make up the total.",
                className="muted",
            ),
            html.Div(controls, className="controls"),
            dcc.Graph(
                id="attribution-chart",
                config=GRAPH_CONFIG,
                figure=small_empty("loading…", HEIGHT),
            ),
            html.Div(id="attribution-info", className="muted"),
            dcc.Store(id="attribution-tick"),
        ],
        className="attribution-section",
    )


def draw_attribution(
    data: AttributionReads, who: Principal, view: RunView | None, family: object, by: object
) -> DrawnAttribution:
    """The stacked shares of the picked ``family`` (the first with a total when it is none
    of them) over the view's steps, by group or (``by`` holding ``"part"``) by part, and
    the sum check."""
    if view is None:
        return small_empty(NO_TOTAL, HEIGHT), ""
    try:
        families = attribution_families(data.metric_names(who, view.run))
        picked = family if isinstance(family, str) and family in families else None
        picked = picked or (families[0] if families else None)
        if picked is None:
            return small_empty(NO_TOTAL, HEIGHT), ""
        split = "part" if isinstance(by, list) and "part" in by else "group"
        shares = data.attribution(
            who, view.run, picked, start=view.start, end=view.end, points=COLUMNS, by=split
        )
    except RunNotFound:
        return small_empty(NO_TOTAL, HEIGHT), ""
    except Refusal as exc:
        return small_empty(said(exc), HEIGHT), ""
    if not shares.steps:
        return small_empty(f"No step logs {picked}/total and its parts here.", HEIGHT), ""
    fig = attribution_figure(
        shares.prefix,
        shares.groups,
        shares.steps,
        shares.shares,
        shares.sum,
        shares.mismatched,
        x_range=view.x_range,
        uirevision=f"{view.run}|{picked}|{split}",
        height=HEIGHT,
    )
    return fig, sum_check_text(shares.steps, shares.mismatched, shares.tolerance)


def register(app: dash.Dash, data: AttributionReads) -> None:
    @app.callback(
        Output("attribution-chart", "figure"),
        Output("attribution-info", "children"),
        Input("view-drawn", "data"),
        Input("attribution-family", "value"),
        Input("attribution-by", "value"),
        Input("attribution-tick", "data"),
    )
    async def on_attribution(store: object, family: object, by: object, _n: object) -> Any:
        view = RunView.from_store(store)
        return await in_thread(draw_attribution, data, viewer(), view, family, by)
