"""The run page's series controls: more series than the left and right metrics, drawn on
the left axis, and typed derived expressions (``ratio(A, B)``, ``share(A, B)``,
``rss(GLOB)``) added as series; and the chart's toggles (one axis, forecast).

The "add series" picker's value is the view's extra series (its change goes through the
page's controls callback like the other pickers'); the expression field adds its text to
that picker, once the text parses (`.run_view.expression_error`), so a malformed
expression is refused with its reason before anything is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from normwatch.server.alerts.selectors import metric_matches
from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut
from normwatch.server.services.unknown_names import closest, patterns_of

from ..refusals import RunNotFound, UnknownMetrics, said
from ..session import viewer
from ..wiring import in_thread, triggered_id
from .run_view import MAX_EXTRA, RunView, expression_error, extra_series

__all__ = [
    "CHART_OPTIONS",
    "EXPRESSION_HINT",
    "AXES",
    "ExpressionAdded",
    "ExpressionPlaced",
    "add_expression",
    "chart_options",
    "controls",
    "options_with",
    "place_expression",
    "register",
    "unknown_metrics",
]

EXPRESSION_HINT = "ratio(grad/norm/total, params/norm/total)"

ExpressionAdded = tuple[Any, Any, Any, Any]
"""The picker's value and options, the message beside the field, the field's text."""
ExpressionPlaced = tuple[Any, Any, Any, Any, Any, Any]
"""`ExpressionAdded`, then the right axis picker's value and options."""

AXES = [
    {"label": " to the left axis", "value": "left"},
    {"label": " to the right axis", "value": "right"},
]
"""Where a typed metric or expression goes: beside the left metric, or in place of the
right one (a ratio near 3e-4 drawn flat at 0 beside a grad norm of 5 reads on its own axis)."""

CHART_OPTIONS = [
    {"label": " one axis", "value": "one-axis"},
    {"label": " forecast", "value": "forecast"},
    {"label": " ignore outliers", "value": "robust"},
]
"""The chart's toggles: both metrics on one y axis (same units); the left metric's trend
projected ahead; y axes fitted to the lines without their most extreme 2 % of points."""


def chart_options(view: RunView) -> list[str]:
    """The chart toggles ``view`` has on.

    >>> chart_options(RunView("r", one_axis=True, forecast=True, robust=True))
    ['one-axis', 'forecast', 'robust']
    """
    flags = (("one-axis", view.one_axis), ("forecast", view.forecast), ("robust", view.robust))
    return [v for v, on in flags if on]


def options_with(names: Sequence[str], view: RunView) -> list[dict[str, str]]:
    """The run's metric names, then the view's expressions (and names the run has not
    logged) that are none of them, so that a picker shows what is drawn.

    >>> [o["value"] for o in options_with(["a", "b"], RunView("r", "a", "rss(b*)", extra=("c",)))]
    ['a', 'b', 'rss(b*)', 'c']
    """
    known = list(dict.fromkeys([*names, *view.metrics]))
    return [{"label": n, "value": n} for n in known]


def controls(names: Sequence[str], view: RunView) -> html.Div:
    """The picker of extra series and the expression field."""
    return html.Div(
        [
            html.Label(
                [
                    f"add series (left axis, up to {MAX_EXTRA})",
                    dcc.Dropdown(
                        id="add-series",
                        options=options_with(names, view),
                        value=list(view.extra),
                        multi=True,
                        placeholder="pick metrics to draw beside these",
                    ),
                ],
                className="picker",
            ),
            html.Label(
                [
                    "metric or expression (Enter adds it)",
                    dcc.Input(
                        id="expression",
                        type="text",
                        value="",
                        placeholder=EXPRESSION_HINT,
                        className="expression",
                        debounce=False,
                    ),
                ],
                className="picker",
            ),
            dcc.RadioItems(
                id="expression-axis",
                options=AXES,
                value="left",
                inline=True,
                className="toggle",
            ),
            html.Button("add", id="add-expression", n_clicks=0),
            html.Span(id="expression-info", className="message"),
        ],
        className="controls series-controls",
    )


def unknown_metrics(expression: str, names: Sequence[str]) -> str | None:
    """Why ``expression`` would draw nothing on a run that can be read by ``names`` (its
    stored names and the canonical names its aliases stand for): each name it has not
    logged, or glob that matches none of them, with the closest names it has, as the
    service refuses them (`UnknownMetrics`); None when every one is there.

    >>> unknown_metrics("ratio(grad/norm/totl, params/*)", ["grad/norm/total", "params/a"])
    "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total')"
    >>> unknown_metrics("rss(grad/norm/layer.*)", ["grad/norm/layers.0"])
    "'grad/norm/layer.*' matches no metric of this run (closest: 'grad/norm/layers.0')"
    """
    unknown = [
        pattern
        for pattern in patterns_of([expression])
        if not any(metric_matches(pattern, name) for name in names)
    ]
    if not unknown:
        return None
    return said(UnknownMetrics(unknown, {p: closest(p, names) for p in unknown}))


def _option_values(options: object) -> list[str]:
    listed = options if isinstance(options, list) else []
    return [o["value"] for o in listed if isinstance(o, dict) and isinstance(o.get("value"), str)]


def place_expression(
    text: object,
    axis: object,
    picked: object,
    options: object,
    right_options: object,
    names: Sequence[str] | None = None,
) -> ExpressionPlaced:
    """`add_expression` on the left axis; on the right (``axis == "right"``) ``text`` becomes
    the right picker's value, joining its options, and the field empties. Either way a text
    that cannot be drawn, or that names what the run has not logged (``names``: the run's
    metrics, by default the pickers' options), is refused with the reason."""
    skip = dash.no_update
    if not isinstance(text, str) or not text.strip():
        raise PreventUpdate
    expression = text.strip()
    problem = expression_error(expression)
    if problem is None:
        known = list(names) if names is not None else _option_values(options)
        problem = unknown_metrics(expression, known)
    if problem is not None:
        message = html.Span(f"Cannot draw {expression}: {problem}", className="error")
        return skip, skip, message, skip, skip, skip
    if axis != "right":
        return (*add_expression(expression, picked, options), skip, skip)
    listed = (
        [o for o in right_options if isinstance(o, dict)] if isinstance(right_options, list) else []
    )
    if not any(o.get("value") == expression for o in listed):
        listed.append({"label": expression, "value": expression})
    return skip, skip, "", "", expression, listed


def add_expression(text: object, picked: object, options: object) -> ExpressionAdded:
    """The picker's value and options with ``text`` added (its options keep what they had),
    an empty message and an empty field; for a text that cannot be added, everything as it
    was and a message saying why. Blank text changes nothing (`PreventUpdate`)."""
    if not isinstance(text, str) or not text.strip():
        raise PreventUpdate
    expression = text.strip()
    value = list(extra_series(picked))
    known = [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []
    problem = expression_error(expression)
    if problem is not None:
        message = html.Span(f"Cannot draw {expression}: {problem}", className="error")
        return dash.no_update, dash.no_update, message, dash.no_update
    if expression in value:
        return dash.no_update, dash.no_update, f"{expression} is drawn already.", ""
    if len(value) >= MAX_EXTRA:
        message = html.Span(f"At most {MAX_EXTRA} added series: remove one.", className="error")
        return dash.no_update, dash.no_update, message, dash.no_update
    if not any(o.get("value") == expression for o in known):
        known.append({"label": expression, "value": expression})
    return [*value, expression], known, "", ""


class SeriesReads(Protocol):
    """What the controls read: the run's metrics, to say when a typed name is none of them
    (`RunNotFound` outside the viewer's project)."""

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]: ...


def run_names(data: SeriesReads, who: Principal, view: RunView | None) -> list[str]:
    """The names the view's run can be read by: those it logged, and the canonical names
    its aliases stand for; none for no view, or a run of another project."""
    if view is None:
        return []
    try:
        metrics = data.metrics(who, view.run)
    except RunNotFound:
        return []
    return [m.name for m in metrics] + [m.canonical for m in metrics if m.canonical]


def register(app: dash.Dash, data: SeriesReads) -> None:
    @app.callback(
        Output("add-series", "value"),
        Output("add-series", "options"),
        Output("expression-info", "children"),
        Output("expression", "value"),
        # The tick sets these too (the defaults, the options): hence allow_duplicate.
        Output("right-metric", "value", allow_duplicate=True),
        Output("right-metric", "options", allow_duplicate=True),
        Input("add-expression", "n_clicks"),
        Input("expression", "n_submit"),
        State("expression", "value"),
        State("expression-axis", "value"),
        State("add-series", "value"),
        State("add-series", "options"),
        State("right-metric", "options"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_add(
        _clicks: object,
        _submit: object,
        text: object,
        axis: object,
        picked: object,
        options: object,
        right_options: object,
        store: object,
    ) -> Any:
        if triggered_id() not in ("add-expression", "expression"):
            raise PreventUpdate
        # The run's own names, not the page's options: those may be stale, or crafted.
        names = await in_thread(run_names, data, viewer(), RunView.from_store(store))
        return place_expression(text, axis, picked, options, right_options, names)
