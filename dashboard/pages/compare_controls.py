"""The compare page's controls: what is compared (the metric picker, a typed expression,
further metrics a panel each, the step range) and how the chart draws it (log scale,
outliers ignored, the runs' mean, runs grouped by a config key, smoothing). Each is set
from a :class:`~.compare_view.CompareView`; what a change does to the view is
:func:`~.compare_view.update_view`'s."""

from __future__ import annotations

from collections.abc import Sequence

from dash import dcc, html

from .compare_view import (
    CHART_OPTIONS,
    MAX_PANELS,
    MAX_SMOOTHING,
    CompareView,
    chart_options,
    metric_options,
)

__all__ = ["EXPRESSION_HINT", "controls"]

EXPRESSION_HINT = "share(grad/norm/lm_head*, grad/norm/total)"


def controls(
    names: Sequence[Sequence[str]], view: CompareView, keys: Sequence[str] = ()
) -> list[html.Div]:
    """Two rows: the metric (picked among ``names``, each run's metrics, or typed), further
    metrics and the range; then the chart's toggles, the config key to group the runs by
    (among ``keys``, those whose values differ between them) and the smoothing slider."""
    logged = set().union(*names)
    group_keys = [*keys, *([view.group_by] if view.group_by and view.group_by not in keys else [])]
    what = [
        html.Label(
            [
                "metric",
                dcc.Dropdown(
                    id="compare-metric",
                    options=metric_options(names, view.metric),
                    value=view.metric,
                    clearable=False,
                ),
            ],
            className="picker",
        ),
        html.Label(
            [
                "or an expression (Enter draws it)",
                dcc.Input(
                    id="compare-expression",
                    type="text",
                    value=view.metric if view.metric and view.metric not in logged else "",
                    placeholder=EXPRESSION_HINT,
                    className="expression",
                ),
            ],
            className="picker",
        ),
        html.Button("draw", id="compare-apply", n_clicks=0),
        html.Label(
            [
                f"more metrics, a panel each (up to {MAX_PANELS - 1})",
                dcc.Dropdown(
                    id="compare-more",
                    options=metric_options(names, None),
                    value=list(view.more_metrics),
                    multi=True,
                    placeholder="pick metrics to draw below",
                ),
            ],
            className="picker",
        ),
        html.Button("full range", id="compare-reset", n_clicks=0),
    ]
    how = [
        dcc.Checklist(
            id="compare-options",
            options=CHART_OPTIONS,
            value=chart_options(view),
            inline=True,
            className="toggle",
        ),
        html.Label(
            [
                "group runs by",
                dcc.Dropdown(
                    id="compare-group-by",
                    options=[{"label": key, "value": key} for key in group_keys],
                    value=view.group_by,
                    placeholder="a config key" if group_keys else "no config key differs",
                    clearable=True,
                ),
            ],
            className="picker",
        ),
        html.Label(
            [
                "smoothing",
                dcc.Slider(
                    id="compare-smoothing",
                    min=0,
                    max=MAX_SMOOTHING,
                    step=0.01,
                    value=view.smooth,
                    marks={0: "off", 0.6: "0.6", 0.9: "0.9", MAX_SMOOTHING: "0.99"},
                    # Each move redraws from the database: on release, not while dragging.
                    updatemode="mouseup",
                    tooltip={"placement": "bottom"},
                ),
            ],
            className="picker smoothing",
        ),
    ]
    return [html.Div(what, className="controls"), html.Div(how, className="controls shaping")]
