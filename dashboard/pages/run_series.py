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
from typing import Any

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from ..wiring import triggered_id
from .run_view import MAX_EXTRA, RunView, expression_error, extra_series

__all__ = [
    "CHART_OPTIONS",
    "EXPRESSION_HINT",
    "ExpressionAdded",
    "add_expression",
    "chart_options",
    "controls",
    "options_with",
    "register",
]

EXPRESSION_HINT = "ratio(grad/norm/total, params/norm/total)"

ExpressionAdded = tuple[Any, Any, Any, Any]
"""The picker's value and options, the message beside the field, the field's text."""

CHART_OPTIONS = [
    {"label": " one axis", "value": "one-axis"},
    {"label": " forecast", "value": "forecast"},
]
"""The chart's toggles: both metrics on one y axis (same units); the left metric's trend
projected ahead."""


def chart_options(view: RunView) -> list[str]:
    """The chart toggles ``view`` has on.

    >>> chart_options(RunView("r", one_axis=True, forecast=True))
    ['one-axis', 'forecast']
    """
    return [v for v, on in (("one-axis", view.one_axis), ("forecast", view.forecast)) if on]


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
                    "expression (Enter adds it)",
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
            html.Button("add", id="add-expression", n_clicks=0),
            html.Span(id="expression-info", className="message"),
        ],
        className="controls series-controls",
    )


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


def register(app: dash.Dash) -> None:
    @app.callback(
        Output("add-series", "value"),
        Output("add-series", "options"),
        Output("expression-info", "children"),
        Output("expression", "value"),
        Input("add-expression", "n_clicks"),
        Input("expression", "n_submit"),
        State("expression", "value"),
        State("add-series", "value"),
        State("add-series", "options"),
        prevent_initial_call=True,
    )
    def on_add(
        _clicks: object, _submit: object, text: object, picked: object, options: object
    ) -> Any:
        if triggered_id() not in ("add-expression", "expression"):
            raise PreventUpdate
        return add_expression(text, picked, options)
