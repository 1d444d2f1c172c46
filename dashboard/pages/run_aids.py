"""The run page's chart aids: what the overlay draws over its lines, read into a store.

- **Thresholds**: the enabled alert rules of the viewer's project that watch the run (their
  run selector matches it) and hold a value (``threshold`` and ``forecast`` conditions),
  each drawn on every charted metric its metric selector matches.
- **Fitted lines**: while the view is zoomed around a transition or an event (its
  ``focus``), each charted metric's least-squares lines on either side of that step, over
  the steps shown.
- **Forecast**: the left metric's trend over the last points drawn, ahead of the latest
  step, and when it reaches the nearest threshold (`normwatch.dashboard.forecast`).

Rules and fits come with the page and are read again when what they depend on changes
(`aids_key`: the run, or the view while it has a focus), and rules every `AIDS_EVERY` ticks
so that a new rule shows up, into the ``overlay-aids`` store; the chart's callback takes
them from there, so its one-second tick reads nothing more. The store comes back from the
browser, so :func:`aids_of` takes from it only what it could have written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import dash
from dash import Input, Output, State
from dash.exceptions import PreventUpdate

from normwatch.server.alerts.selectors import metric_matches, run_matches
from normwatch.server.analytics.derived import is_derived
from normwatch.server.analytics.transitions import Fit
from normwatch.server.auth import Principal
from normwatch.server.errors import GlobError
from normwatch.server.schemas import RunOut
from normwatch.server.schemas.alerts import AlertRuleOut

from ..figures import OverlayView
from ..forecast import forecast
from ..overlay_aids import Aids, FitLines, Threshold
from ..refusals import Refusal, RunNotFound
from ..session import viewer
from ..wiring import in_thread
from .run_view import RunView

__all__ = [
    "AIDS_EVERY",
    "AIDS_KEY_JS",
    "ATTRIBUTION_EVERY",
    "TRANSITIONS_EVERY",
    "AidReads",
    "RuleLine",
    "SectionTicks",
    "aids_key",
    "aids_of",
    "fit_window",
    "read_aids",
    "register",
    "rule_lines",
    "sections_due",
    "watches",
]

AIDS_EVERY = 10
"""The rules are read again every this many ticks."""
TRANSITIONS_EVERY = 20
"""A view of the latest steps looks for new transitions every this many ticks."""
ATTRIBUTION_EVERY = 10
"""A view of the latest steps redraws the attribution every this many ticks."""
VALUE_KINDS = ("threshold", "forecast")
"""Rule conditions that hold a value a line can be drawn at."""


class AidReads(Protocol):
    """What the aids read, each for the viewer (`RunNotFound` outside its project)."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...

    def rules(self, who: Principal) -> list[AlertRuleOut]: ...

    def transition_fits(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        at: int,
        start: int | None,
        end: int | None,
        window: int,
    ) -> dict[str, Fit]: ...


@dataclass(frozen=True)
class RuleLine:
    """An enabled rule with a value, that watches the run: ``selector`` is its metric (a
    name, a glob or an expression)."""

    rule: str
    selector: str
    value: float
    kind: str


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def rule_lines(rules: Sequence[AlertRuleOut], run: RunOut) -> list[RuleLine]:
    """The rules of ``rules`` that draw a line on ``run``'s chart: enabled, watching the
    run (its name and tags), with a ``threshold`` or ``forecast`` condition's value."""
    found = []
    for rule in rules:
        value = _finite(rule.condition.get("value"))
        if not rule.enabled or rule.condition.get("kind") not in VALUE_KINDS or value is None:
            continue
        if not _watches_run(rule, run):
            continue
        found.append(RuleLine(rule.name, rule.metric, value, str(rule.condition["kind"])))
    return found


def watches(selector: str, metric: str) -> bool:
    """Whether a rule whose metric is ``selector`` watches the charted ``metric``: the same
    text, or a name glob that matches a stored metric's name.

    >>> watches("grad/norm/*", "grad/norm/total"), watches("grad/norm/*", "rss(grad/norm/*)")
    (True, False)
    """
    if selector == metric:
        return True
    if is_derived(selector) or is_derived(metric):
        return False
    try:
        return metric_matches(selector, metric)
    except GlobError:  # a rule saved before globs were checked: it draws nothing
        return False


def _watches_run(rule: AlertRuleOut, run: RunOut) -> bool:
    try:
        return run_matches(rule.runs.name, rule.runs.tags, run.name, run.tags)
    except GlobError:
        return False


def fit_window(view: RunView) -> int | None:
    """The fits' window for a view zoomed around its focus: far enough either side to
    reach both ends of the steps shown; None when the view shows no focus.

    >>> fit_window(RunView("r", start=78_625, end=83_375, focus=81_000))
    2375
    """
    at, shown = view.focused, view.x_range
    if at is None or shown is None:
        return None
    return max(1, at - shown[0], shown[1] - at)


def read_aids(data: AidReads, who: Principal, view: RunView | None) -> dict[str, Any] | None:
    """The ``overlay-aids`` store for ``view``: the rule lines for its run and, when it is
    zoomed around a focus, each charted metric's fitted lines there; None for a view of no
    run of the viewer's project."""
    if view is None:
        return None
    try:
        run = data.run(who, view.run)
        lines = rule_lines(data.rules(who), run)
        window = fit_window(view)
        fits: dict[str, Fit] = {}
        if window is not None and view.focused is not None and view.metrics:
            try:
                fits = data.transition_fits(
                    who,
                    view.run,
                    view.metrics,
                    at=view.focused,
                    start=view.start,
                    end=view.end,
                    window=window,
                )
            except Refusal:
                fits = {}  # the chart says why; the rules' lines still draw
    except RunNotFound:
        return None
    return {
        "run": view.run,
        "thresholds": [
            {"rule": r.rule, "metric": r.selector, "value": r.value, "kind": r.kind} for r in lines
        ],
        "fit": None
        if window is None
        else {
            "at": view.focused,
            "start": view.start,
            "end": view.end,
            "metrics": {m: _fit_json(f) for m, f in fits.items()},
        },
    }


def _fit_json(fit: Fit) -> dict[str, Any]:
    return {
        "slope_before": fit.slope_before,
        "slope_after": fit.slope_after,
        "ratio": fit.ratio,
        "before": [list(p) for p in fit.before_segment],
        "after": [list(p) for p in fit.after_segment],
        "level_change": fit.level_after - fit.level_before,
    }


# --- from the store to the chart ----------------------------------------------------------


def aids_of(store: object, view: RunView, overlay: OverlayView | None) -> Aids:
    """What the chart of ``view`` (``overlay``: its lines) draws over its lines: the
    store's thresholds on the metrics they watch, its fits when they are for the view's
    focus and range, and the forecast when the view asks for it. Anything in ``store``
    that :func:`read_aids` could not have written is left out."""
    if overlay is None or not isinstance(store, Mapping) or store.get("run") != view.run:
        return Aids()
    # Rules at the same value on the same metric share one line, named after them all.
    shared: dict[tuple[str, float], list[RuleLine]] = {}
    for line in _rule_lines(store.get("thresholds")):
        for metric in view.metrics:
            if watches(line.selector, metric):
                shared.setdefault((metric, line.value), []).append(line)
    thresholds = [
        Threshold(metric, value, " · ".join(r.rule for r in rules), rules[0].kind)
        for (metric, value), rules in shared.items()
    ]
    fits = _fits(store.get("fit"), view)
    found = None
    if view.forecast and overlay.left is not None:
        left = overlay.left
        found = forecast(
            left.metric,
            left.steps,
            left.values,
            span=view.x_range,
            thresholds=[t.value for t in thresholds if t.metric == left.metric],
        )
    return Aids(tuple(thresholds), tuple(fits), found)


def _rule_lines(stored: object) -> list[RuleLine]:
    if not isinstance(stored, list):
        return []
    found = []
    for item in stored:
        if not isinstance(item, Mapping):
            continue
        rule, selector, kind = item.get("rule"), item.get("metric"), item.get("kind")
        value = _finite(item.get("value"))
        if isinstance(rule, str) and isinstance(selector, str) and value is not None:
            found.append(RuleLine(rule, selector, value, kind if isinstance(kind, str) else ""))
    return found


def _segment(stored: object) -> tuple[tuple[float, float], tuple[float, float]] | None:
    if not (isinstance(stored, list) and len(stored) == 2):
        return None
    points = []
    for point in stored:
        if not (isinstance(point, list) and len(point) == 2):
            return None
        step, value = _finite(point[0]), _finite(point[1])
        if step is None or value is None:
            return None
        points.append((step, value))
    return points[0], points[1]


def _fits(stored: object, view: RunView) -> list[FitLines]:
    if not isinstance(stored, Mapping) or view.focused is None:
        return []
    if (stored.get("at"), stored.get("start"), stored.get("end")) != (
        view.focused,
        view.start,
        view.end,
    ):
        return []
    metrics = stored.get("metrics")
    if not isinstance(metrics, Mapping):
        return []
    found = []
    for metric in view.metrics:
        fit = metrics.get(metric)
        if not isinstance(fit, Mapping):
            continue
        before, after = _segment(fit.get("before")), _segment(fit.get("after"))
        slope_before, slope_after = (
            _finite(fit.get("slope_before")),
            _finite(fit.get("slope_after")),
        )
        if before is None or after is None or slope_before is None or slope_after is None:
            continue
        ratio, level_change = _finite(fit.get("ratio")), _finite(fit.get("level_change"))
        found.append(
            FitLines(
                metric, view.focused, before, after, slope_before, slope_after, ratio, level_change
            )
        )
    return found


# --- ticks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SectionTicks:
    """Which of the page's tick-driven reads a tick asks for."""

    aids: bool
    transitions: bool
    attribution: bool


def sections_due(view: RunView | None, n_intervals: object) -> SectionTicks:
    """The rules every `AIDS_EVERY` ticks; for a view of the latest steps (no end), the
    transitions every `TRANSITIONS_EVERY` and the attribution every `ATTRIBUTION_EVERY`.

    >>> sections_due(RunView("r"), 20)
    SectionTicks(aids=True, transitions=True, attribution=True)
    >>> sections_due(RunView("r", end=9), 30)
    SectionTicks(aids=True, transitions=False, attribution=False)
    """
    if view is None or not isinstance(n_intervals, int) or isinstance(n_intervals, bool):
        return SectionTicks(False, False, False)
    live = view.end is None
    return SectionTicks(
        aids=n_intervals % AIDS_EVERY == 0,
        transitions=live and n_intervals % TRANSITIONS_EVERY == 0,
        attribution=live and n_intervals % ATTRIBUTION_EVERY == 0,
    )


# --- wiring -------------------------------------------------------------------------------


def aids_key(view: RunView | None) -> dict[str, Any] | None:
    """What the aids of ``view`` depend on: its run, and the whole view while it has a focus
    (the fits follow its range and metrics). `AIDS_KEY_JS` works it out in the browser.

    >>> aids_key(RunView("r", "a", start=5, end=9))
    {'run': 'r'}
    >>> aids_key(RunView("r", "a", start=5, end=9, focus=7))["focus"]
    7
    """
    if view is None:
        return None
    return {"run": view.run} if view.focus is None else view.to_store()


AIDS_KEY_JS = """
function(view, held) {
    if (!view) { return window.dash_clientside.no_update; }
    const key = (view.focus === null || view.focus === undefined) ? {run: view.run} : view;
    return JSON.stringify(key) === JSON.stringify(held) ? window.dash_clientside.no_update : key;
}
"""
"""`aids_key` of the view, into the ``aids-key`` store only when it changes: a zoom or a
change of metric without a focus leaves the aids as they are, and the chart's callback, which
Dash holds while the aids' callback is due, no longer waits a round trip for them."""


def register(app: dash.Dash, data: AidReads) -> None:
    app.clientside_callback(
        AIDS_KEY_JS,
        Output("aids-key", "data"),
        Input("view", "data"),
        State("aids-key", "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("overlay-aids", "data"),
        Input("aids-key", "data"),
        Input("aids-tick", "data"),
        State("view", "data"),
        State("overlay-aids", "data"),
        # The page comes with the aids of its first view (`.run.layout`).
        prevent_initial_call=True,
    )
    async def on_aids(
        _key: object, _n: object, store: object, held: object
    ) -> dict[str, Any] | None:
        found = await in_thread(read_aids, data, viewer(), RunView.from_store(store))
        # The same aids again would only redraw the chart for nothing.
        if found == held:
            raise PreventUpdate
        return found
