"""What the compare page shows: :class:`CompareView` and how its controls change it. Pure.

The view lives in the page's ``dcc.Store`` (id ``compare-view``) as JSON, and in the URL as
``?run=&run=&metric=&metric=&start=&end=&log=1&smooth=0.9&robust=1&group=mean&group_by=lr``
(``metric`` repeated: a panel each), so that a link reproduces it; a parameter left out or
malformed takes its default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from normwatch.server.services.analytics import MAX_COMPARED_RUNS

from ..wiring import TriggerId
from .compare_js import URL_SYNC_JS
from .compare_links import compare_href, default_metric, metric_options
from .run_view import (
    MAX_SMOOTHING,
    RUN_ID,
    RunView,
    is_step,
    smoothing,
    view_from_relayout,
)

__all__ = [
    "CHART_OPTIONS",
    "GROUPS",
    "MAX_KEY",
    "MAX_METRIC",
    "MAX_PANELS",
    "MAX_SMOOTHING",
    "URL_SYNC_JS",
    "CompareView",
    "chart_options",
    "compare_href",
    "default_metric",
    "metric_options",
    "picker_state",
    "update_view",
]

MAX_METRIC = 512
"""The longest metric name or expression (the API's bound)."""
GROUPS = ("mean",)
"""How the runs can be drawn as one: their mean, with a band from their minimum to maximum."""
CHART_OPTIONS = [
    {"label": " log scale", "value": "log"},
    {"label": " ignore outliers", "value": "robust"},
    {"label": " mean of the runs ± min–max", "value": "mean"},
]
"""The chart's toggles: a log y axis; a y axis fitted to the lines without their most
extreme 2 % of points; the runs' mean with a band from their minimum to their maximum."""
_TRUE = ("1", "true", "yes")
MAX_PANELS = 4
"""Metrics drawn at once, a panel each: each is a read of every run."""
MAX_KEY = 200
"""The longest config key the runs can be grouped by."""


@dataclass(frozen=True)
class CompareView:
    """Which runs (1 to `MAX_COMPARED_RUNS`, each once), which metric (a name or a derived
    expression; None: the runs share none to start with), which steps (None: all), and how
    the chart draws them: ``log`` y axis, ``smooth`` (the EMA weight, 0 to `MAX_SMOOTHING`;
    0: raw), ``robust`` (a y range that ignores the extremes), ``group`` (one of `GROUPS`:
    the runs drawn as one; None: a line a run), ``more_metrics`` (further metrics, each in
    a panel of its own below the first, up to `MAX_PANELS` in all) and ``group_by`` (a
    config key: the runs that share its value drawn as one line each; it takes the place
    of ``group``)."""

    runs: tuple[str, ...]
    metric: str | None = None
    start: int | None = None
    end: int | None = None
    log: bool = False
    smooth: float = 0.0
    robust: bool = False
    group: str | None = None
    more_metrics: tuple[str, ...] = ()
    group_by: str | None = None

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every metric drawn, a panel each, in order.

        >>> CompareView(("a",), "m", more_metrics=("n",)).metrics
        ('m', 'n')
        """
        return () if self.metric is None else (self.metric, *self.more_metrics)

    @property
    def x_range(self) -> tuple[int, int] | None:
        """The steps shown when both ends are set."""
        return None if self.start is None or self.end is None else (self.start, self.end)

    def to_store(self) -> dict[str, Any]:
        """The view as the page's store holds it (JSON).

        >>> store = CompareView(("a", "b"), "m", None, 10, smooth=0.9).to_store()
        >>> store["runs"], store["start"], store["end"], store["smooth"], store["group"]
        (['a', 'b'], None, 10, 0.9, None)
        """
        return {
            "runs": list(self.runs),
            "metric": self.metric,
            "start": self.start,
            "end": self.end,
            "log": self.log,
            "smooth": self.smooth,
            "robust": self.robust,
            "group": self.group,
            "more_metrics": list(self.more_metrics),
            "group_by": self.group_by,
        }

    @classmethod
    def from_store(cls, data: object) -> CompareView | None:
        """The view a store holds, or None for anything :meth:`to_store` cannot have written
        (the store comes back from the browser, so a crafted request can put anything in
        it: run ids that are no ids, a run twice, a range that ends before it starts). A
        key left out takes its default.

        >>> view = CompareView.from_store({"runs": ["a", "b"], "metric": "m", "log": True})
        >>> view == CompareView(("a", "b"), "m", log=True)
        True
        >>> CompareView.from_store({"runs": ["a", "a"]}) is None
        True
        """
        if not isinstance(data, dict):
            return None
        runs, metric = data.get("runs"), data.get("metric")
        start, end = data.get("start"), data.get("end")
        if not (isinstance(runs, list) and 1 <= len(runs) <= MAX_COMPARED_RUNS):
            return None
        if not all(isinstance(r, str) and RUN_ID.match(r) for r in runs):
            return None
        if len(set(runs)) < len(runs):
            return None
        if not (metric is None or (isinstance(metric, str) and 0 < len(metric) <= MAX_METRIC)):
            return None
        if not all(s is None or is_step(s) for s in (start, end)):
            return None
        if isinstance(start, int) and isinstance(end, int) and end < start:
            return None
        log, robust = data.get("log", False), data.get("robust", False)
        smooth, group = data.get("smooth", 0.0), data.get("group")
        if not (isinstance(log, bool) and isinstance(robust, bool)):
            return None
        if smoothing(smooth) != smooth or isinstance(smooth, bool):
            return None
        if not (group is None or group in GROUPS):
            return None
        more, group_by = data.get("more_metrics", []), data.get("group_by")
        if not (isinstance(more, list) and len(more) < MAX_PANELS):
            return None
        if not all(isinstance(m, str) and 0 < len(m) <= MAX_METRIC for m in more):
            return None
        if len(set(more)) < len(more) or (more and (metric is None or metric in more)):
            return None
        if not (group_by is None or (isinstance(group_by, str) and 0 < len(group_by) <= MAX_KEY)):
            return None
        return cls(
            tuple(runs),
            metric,
            start,
            end,
            log,
            float(smooth),
            robust,
            group,
            tuple(more),
            group_by,
        )

    @classmethod
    def from_query(
        cls,
        runs: Sequence[str],
        names: Sequence[Sequence[str]],
        *,
        metric: str | None = None,
        start: str | None = None,
        end: str | None = None,
        log: str | None = None,
        smooth: str | None = None,
        robust: str | None = None,
        group: str | None = None,
        more: Sequence[str] = (),
        group_by: str | None = None,
    ) -> CompareView:
        """The view of a page URL's query; ``names`` are each run's metrics, for the
        default of :func:`default_metric`. ``start``, ``end``, ``log``, ``smooth`` and
        ``robust`` read as on the run page (:meth:`RunView.from_query`): a step that is no
        step is left out, a range that ends before it starts is dropped whole, ``log`` and
        ``robust`` are on for ``1``, ``true`` or ``yes``, ``smooth`` is a weight from 0 to
        `MAX_SMOOTHING`. ``group`` is one of `GROUPS`. ``more`` are the further values of a
        repeated ``metric`` (a repeat and the first's own name are dropped, and those past
        `MAX_PANELS`); ``group_by`` a config key. Anything else takes the default."""
        read = RunView.from_query("", [], start=start, end=end, smooth=smooth)
        picked = (metric or "")[:MAX_METRIC] or default_metric(names)
        extra = tuple(m for m in dict.fromkeys(m[:MAX_METRIC] for m in more) if m and m != picked)
        return cls(
            tuple(runs),
            picked,
            read.start,
            read.end,
            log=log in _TRUE,
            smooth=read.smooth,
            robust=robust in _TRUE,
            group=group if group in GROUPS else None,
            more_metrics=extra[: MAX_PANELS - 1] if picked else (),
            group_by=group_by if group_by and len(group_by) <= MAX_KEY else None,
        )


def update_view(
    view: CompareView | None,
    *,
    picked: object,
    expression: object,
    relayout: object,
    trigger: TriggerId,
    flags: object = None,
    smooth: object = None,
    more: object = None,
    group_by: object = None,
) -> CompareView | None:
    """The view after a change of the page's controls; None when it stays as it is.

    ``trigger`` says what moved: the metric picker (its value ``picked``), the expression field
    (Enter in it, or its ``draw`` button: ``expression``; a blank one changes nothing), the
    chart (``"compare-zoom"``, with ``relayout`` a zoom or pan, read as on the run page by
    :func:`view_from_relayout`), the "full range" button, the chart's toggles
    (``"compare-options"``, ``flags`` the values of `CHART_OPTIONS` ticked) or the smoothing
    slider (``smooth``, read by :func:`.run_view.smoothing`), the picker of further metrics
    (``"compare-more"``, ``more`` the metrics picked: a panel each, the first metric and
    those past `MAX_PANELS` left out) or the group-by picker (``"compare-group-by"``,
    ``group_by`` a config key or None). ``view`` None (a store that holds no view) changes
    nothing.
    """
    if view is None:
        return None
    new = view
    if trigger == "compare-metric" and isinstance(picked, str) and picked:
        metric = picked[:MAX_METRIC]
        others = tuple(m for m in view.more_metrics if m != metric)
        new = replace(view, metric=metric, more_metrics=others)
    elif trigger in ("compare-expression", "compare-apply") and isinstance(expression, str):
        text = expression.strip()[:MAX_METRIC]
        others = tuple(m for m in view.more_metrics if m != text)
        new = replace(view, metric=text, more_metrics=others) if text else view
    elif trigger == "compare-zoom":
        moved = view_from_relayout(RunView("", start=view.start, end=view.end), relayout)
        new = replace(view, start=moved.start, end=moved.end)
    elif trigger == "compare-reset":
        new = replace(view, start=None, end=None)
    elif trigger == "compare-options" and isinstance(flags, list):
        ticked = {f for f in flags if isinstance(f, str)}
        group = next((g for g in GROUPS if g in ticked), None)
        new = replace(view, log="log" in ticked, robust="robust" in ticked, group=group)
    elif trigger == "compare-smoothing":
        new = replace(view, smooth=smoothing(smooth))
    elif trigger == "compare-more" and isinstance(more, list) and view.metric is not None:
        picked_more = (m[:MAX_METRIC] for m in more if isinstance(m, str) and m)
        others = tuple(m for m in dict.fromkeys(picked_more) if m != view.metric)
        new = replace(view, more_metrics=others[: MAX_PANELS - 1])
    elif trigger == "compare-group-by" and (group_by is None or isinstance(group_by, str)):
        new = replace(view, group_by=group_by[:MAX_KEY] if group_by else None)
    return None if new == view else new


def chart_options(view: CompareView) -> list[str]:
    """The chart's toggles ticked for ``view`` (values of `CHART_OPTIONS`).

    >>> chart_options(CompareView(("a",), log=True, group="mean"))
    ['log', 'mean']
    """
    ticked = [("log", view.log), ("robust", view.robust), ("mean", view.group == "mean")]
    return [value for value, on in ticked if on]


def picker_state(view: CompareView, options: object) -> tuple[list[Any], str | None]:
    """The metric picker's ``options`` (the view's metric added when it is new to them, as
    a typed expression is) and its value, the view's metric.

    >>> view = CompareView(("a",), "rss(x*)")
    >>> options, value = picker_state(view, [{"label": "x", "value": "x"}])
    >>> [o["value"] for o in options], value
    (['x', 'rss(x*)'], 'rss(x*)')
    """
    known = list(options) if isinstance(options, list) else []
    metric = view.metric
    if metric and not any(isinstance(o, dict) and o.get("value") == metric for o in known):
        known.append({"label": metric, "value": metric})
    return known, metric
