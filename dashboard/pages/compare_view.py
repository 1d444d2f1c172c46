"""What the compare page shows: :class:`CompareView` and how its controls change it. Pure.

The view lives in the page's ``dcc.Store`` (id ``compare-view``) as JSON, and in the URL as
``?run=&run=&metric=&start=&end=&log=1&smooth=0.9&robust=1&group=mean``, so that a link
reproduces it; a parameter left out or malformed takes its default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from normwatch.server.services.analytics import MAX_COMPARED_RUNS

from ..wiring import TriggerId
from .run_view import (
    DEFAULT_LEFT,
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
    "MAX_METRIC",
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
URL_SYNC_JS = """
function(view) {
    if (!view) { return window.dash_clientside.no_update; }
    const params = new URLSearchParams();
    for (const run of view.runs) { params.append("run", run); }
    for (const key of ["metric", "start", "end"]) {
        const v = view[key];
        if (v !== null && v !== undefined && v !== "") { params.set(key, String(v)); }
    }
    if (view.log) { params.set("log", "1"); }
    if (view.smooth) { params.set("smooth", String(view.smooth)); }
    if (view.robust) { params.set("robust", "1"); }
    if (view.group) { params.set("group", view.group); }
    const target = window.location.pathname + "?" + params.toString();
    if (target !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", target);
    }
    return window.dash_clientside.no_update;
}
"""
"""The browser side of :meth:`CompareView.from_query`: the page's address follows the view
(without a reload), so that it is always a deep link to what is shown."""


@dataclass(frozen=True)
class CompareView:
    """Which runs (1 to `MAX_COMPARED_RUNS`, each once), which metric (a name or a derived
    expression; None: the runs share none to start with), which steps (None: all), and how
    the chart draws them: ``log`` y axis, ``smooth`` (the EMA weight, 0 to `MAX_SMOOTHING`;
    0: raw), ``robust`` (a y range that ignores the extremes), ``group`` (one of `GROUPS`:
    the runs drawn as one; None: a line a run)."""

    runs: tuple[str, ...]
    metric: str | None = None
    start: int | None = None
    end: int | None = None
    log: bool = False
    smooth: float = 0.0
    robust: bool = False
    group: str | None = None

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
        return cls(tuple(runs), metric, start, end, log, float(smooth), robust, group)

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
    ) -> CompareView:
        """The view of a page URL's query; ``names`` are each run's metrics, for the
        default of :func:`default_metric`. ``start``, ``end``, ``log``, ``smooth`` and
        ``robust`` read as on the run page (:meth:`RunView.from_query`): a step that is no
        step is left out, a range that ends before it starts is dropped whole, ``log`` and
        ``robust`` are on for ``1``, ``true`` or ``yes``, ``smooth`` is a weight from 0 to
        `MAX_SMOOTHING`. ``group`` is one of `GROUPS`. Anything else takes the default."""
        read = RunView.from_query("", [], start=start, end=end, smooth=smooth)
        picked = (metric or "")[:MAX_METRIC] or default_metric(names)
        return cls(
            tuple(runs),
            picked,
            read.start,
            read.end,
            log=log in _TRUE,
            smooth=read.smooth,
            robust=robust in _TRUE,
            group=group if group in GROUPS else None,
        )


def compare_href(run_ids: Sequence[str], metric: str | None = None) -> str:
    """The page comparing ``run_ids`` on ``metric``.

    >>> compare_href(["a", "b"], "grad/norm/total")
    '/compare?run=a&run=b&metric=grad%2Fnorm%2Ftotal'
    """
    params = [("run", run_id) for run_id in run_ids] + ([("metric", metric)] if metric else [])
    return "/compare?" + urlencode(params)


def default_metric(names: Sequence[Sequence[str]]) -> str | None:
    """`DEFAULT_LEFT` when every run logs it, else the first (in the first run's order) that
    every run logs; None when they share none.

    >>> default_metric([["a", "b", "c"], ["c", "b"]]), default_metric([["a"], ["b"]])
    ('b', None)
    """
    if not names:
        return None
    common = set(names[0]).intersection(*names[1:])
    if DEFAULT_LEFT in common:
        return DEFAULT_LEFT
    return next((name for name in names[0] if name in common), None)


def metric_options(names: Sequence[Sequence[str]], metric: str | None) -> list[dict[str, str]]:
    """Every metric any of the runs logs, sorted, then ``metric`` when it is none of them
    (an expression, or a name no run logs), so that the picker shows what is drawn.

    >>> [o["value"] for o in metric_options([["b", "a"], ["c", "a"]], "rss(a*)")]
    ['a', 'b', 'c', 'rss(a*)']
    """
    union = sorted(set().union(*names)) if names else []
    if metric and metric not in union:
        union.append(metric)
    return [{"label": name, "value": name} for name in union]


def update_view(
    view: CompareView | None,
    *,
    picked: object,
    expression: object,
    relayout: object,
    trigger: TriggerId,
    flags: object = None,
    smooth: object = None,
) -> CompareView | None:
    """The view after a change of the page's controls; None when it stays as it is.

    ``trigger`` says what moved: the metric picker (its value ``picked``), the expression field
    (Enter in it, or its ``draw`` button: ``expression``; a blank one changes nothing), the
    chart (``"compare-zoom"``, with ``relayout`` a zoom or pan, read as on the run page by
    :func:`view_from_relayout`), the "full range" button, the chart's toggles
    (``"compare-options"``, ``flags`` the values of `CHART_OPTIONS` ticked) or the smoothing
    slider (``smooth``, read by :func:`.run_view.smoothing`). ``view`` None (a store that
    holds no view) changes nothing.
    """
    if view is None:
        return None
    new = view
    if trigger == "compare-metric" and isinstance(picked, str) and picked:
        new = replace(view, metric=picked[:MAX_METRIC])
    elif trigger in ("compare-expression", "compare-apply") and isinstance(expression, str):
        text = expression.strip()[:MAX_METRIC]
        new = replace(view, metric=text) if text else view
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
