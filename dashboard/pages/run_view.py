"""What the run page shows: :class:`RunView` and how zooms and clicks change it. Pure.

The view lives in the page's ``dcc.Store`` (id ``view``) as JSON, and in the URL as
``?left=&right=&start=&end=&log=1&series=&series=&axes=one&forecast=1&focus=``, with
``&smooth=0.9&x=tokens&norm=start&robust=1``, so that a link reproduces it; a parameter left
out takes its default, so older links still work.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from normwatch.server.analytics.derived import ExpressionError, parse

from ..transforms import DEFAULT_NORMALIZE, NORMALIZE_MODES

__all__ = [
    "DEFAULT_LEFT",
    "MAX_EXTRA",
    "MAX_METRIC",
    "MAX_SMOOTHING",
    "MAX_STEP",
    "URL_SYNC_JS",
    "X_AXES",
    "ZOOM_JS",
    "RunView",
    "default_metrics",
    "event_window",
    "expression_error",
    "extra_series",
    "is_step",
    "smoothing",
    "view_from_relayout",
]

DEFAULT_LEFT = "grad/norm/total"
MAX_STEP = 2**63 - 1
"""Steps are stored as 64-bit integers: a range past this could not be read."""
MAX_SMOOTHING = 0.99
"""The strongest smoothing the slider offers."""
MAX_EXTRA = 6
"""Series drawn on the left axis beside the left and right metrics, at most."""
MAX_METRIC = 512
"""The longest metric name or expression (the API's bound)."""
URL_SYNC_JS = """
function(view) {
    if (!view) { return window.dash_clientside.no_update; }
    const params = new URLSearchParams(window.location.search);
    for (const key of ["left", "right", "start", "end", "focus"]) {
        const v = view[key];
        if (v === null || v === undefined || v === "") {
            // An empty right axis is said (`right=`): left out, the link would draw the default.
            if (key === "right") { params.set(key, ""); } else { params.delete(key); }
        }
        else { params.set(key, String(v)); }
    }
    if (view.log) { params.set("log", "1"); } else { params.delete("log"); }
    params.delete("series");
    for (const name of view.extra || []) { params.append("series", name); }
    if (view.one_axis) { params.set("axes", "one"); } else { params.delete("axes"); }
    if (view.forecast) { params.set("forecast", "1"); } else { params.delete("forecast"); }
    if (view.smooth) { params.set("smooth", String(view.smooth)); }
    else { params.delete("smooth"); }
    if (view.x && view.x !== "step") { params.set("x", view.x); } else { params.delete("x"); }
    if (view.norm) { params.set("norm", view.norm); } else { params.delete("norm"); }
    if (view.robust) { params.set("robust", "1"); } else { params.delete("robust"); }
    const query = params.toString();
    const target = window.location.pathname + (query ? "?" + query : "");
    if (target !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", target);
    }
    return window.dash_clientside.no_update;
}
"""
"""The browser side of :meth:`RunView.from_query`: the page's address follows the view
(without a reload), so that it is always a deep link to what is shown."""
ZOOM_JS = """
function(relayout) {
    if (!relayout) { return window.dash_clientside.no_update; }
    const moved = Object.keys(relayout).some(
        key => key.startsWith("xaxis.range") || key === "xaxis.autorange");
    return moved ? relayout : window.dash_clientside.no_update;
}
"""
"""The browser side of :func:`view_from_relayout`: a chart's ``relayoutData`` goes on to the
server only when it moves the x axis. Plotly also reports resizes and y-only changes; sent
on, each was a server round trip for nothing, and one sent while the user's own change was
still on its way superseded it (Dash keeps only the newest call of a callback), so that an
expression typed as the chart resized was lost."""
RUN_ID = re.compile(r"^[0-9A-Za-z_-]{1,128}$")
_TRUE = ("1", "true", "yes")
X_AXES = ("step", "tokens", "time")
"""What the x axis counts: steps, tokens seen (a tokens metric of the run), or wall time."""


@dataclass(frozen=True)
class RunView:
    """One run's overlay chart: which metrics on which axis, which steps, which scale, and
    which aids.

    ``left`` and ``right`` name metrics (None or ``""``: nothing on that axis); ``start``
    and ``end`` bound the steps shown (None: from the first, to the last). ``extra`` are
    more series (names or derived expressions) drawn on the left axis; ``one_axis`` puts
    the right metric on the left axis too (same units); ``forecast`` projects the left
    metric ahead; ``focus`` is the step of the transition (or event) the view was zoomed
    around, whose fitted lines the chart draws while it is in view. ``smooth`` is the EMA
    weight the lines are smoothed with (0: raw; the raw lines are drawn faint behind);
    ``x`` what the x axis counts (`X_AXES`); ``norm`` divides every series by its median over
    the view or by its first value in it (one axis for all); ``robust`` fits the y
    axes to the lines without their most extreme points.
    """

    run: str
    left: str | None = None
    right: str | None = None
    start: int | None = None
    end: int | None = None
    log: bool = False
    extra: tuple[str, ...] = ()
    one_axis: bool = False
    forecast: bool = False
    focus: int | None = None
    smooth: float = 0.0
    x: str = "step"
    norm: str | None = None
    robust: bool = False

    @property
    def metrics(self) -> list[str]:
        """The metrics drawn, left axis first, then right, then the extra series (each once).

        >>> RunView("r", "a", "b", extra=("c", "a")).metrics
        ['a', 'b', 'c']
        """
        return list(dict.fromkeys(m for m in (self.left, self.right, *self.extra) if m))

    @property
    def x_range(self) -> tuple[int, int] | None:
        """The steps shown when both ends are set."""
        if self.start is None or self.end is None:
            return None
        return self.start, self.end

    @property
    def focused(self) -> int | None:
        """`focus` while the view shows it (both ends set, the step between them), else None.

        >>> RunView("r", start=100, end=300, focus=200).focused, RunView("r", focus=5).focused
        (200, None)
        """
        shown = self.x_range
        if self.focus is None or shown is None or not shown[0] <= self.focus <= shown[1]:
            return None
        return self.focus

    def to_store(self) -> dict[str, Any]:
        """The view as the page's store holds it (JSON), in a fixed key order.

        >>> store = RunView("r1", "grad/norm/total", None, 0, 10).to_store()
        >>> list(store)[:10]
        ['run', 'left', 'right', 'start', 'end', 'log', 'extra', 'one_axis', 'forecast', 'focus']
        >>> list(store)[10:]
        ['smooth', 'x', 'norm', 'robust']
        >>> store["left"], store["end"], store["extra"], store["focus"]
        ('grad/norm/total', 10, [], None)
        """
        return {
            "run": self.run,
            "left": self.left,
            "right": self.right,
            "start": self.start,
            "end": self.end,
            "log": self.log,
            "extra": list(self.extra),
            "one_axis": self.one_axis,
            "forecast": self.forecast,
            "focus": self.focus,
            "smooth": self.smooth,
            "x": self.x,
            "norm": self.norm,
            "robust": self.robust,
        }

    @classmethod
    def from_store(cls, data: object) -> RunView | None:
        """The view a store holds, or None for anything :meth:`to_store` cannot have written.

        The store comes back from the browser with each callback, so a crafted request can
        put anything in it: a run id that is no id, a step that is no step, a range that
        ends before it starts, more extra series than the chart draws. Missing keys take
        their defaults (a store written before a key existed still reads).

        >>> RunView.from_store({"run": "r1", "start": 5, "end": 9}) == RunView("r1", start=5, end=9)
        True
        >>> RunView.from_store({"run": "r1", "start": 9, "end": 5}) is None
        True
        """
        if not isinstance(data, dict):
            return None
        run = data.get("run")
        left, right = data.get("left"), data.get("right")
        start, end = data.get("start"), data.get("end")
        extra = data.get("extra", [])
        flags = [data.get(k, False) for k in ("log", "one_axis", "forecast", "robust")]
        focus = data.get("focus")
        smooth, x, norm = data.get("smooth", 0.0), data.get("x", "step"), data.get("norm")
        if not (isinstance(run, str) and RUN_ID.match(run)):
            return None
        if not all(m is None or _metric_text(m) for m in (left, right)):
            return None
        if not (isinstance(extra, list) and len(extra) <= MAX_EXTRA):
            return None
        if not all(_metric_text(m) and m for m in extra):
            return None
        if not all(s is None or is_step(s) for s in (start, end, focus)):
            return None
        if not all(isinstance(flag, bool) for flag in flags):
            return None
        if isinstance(start, int) and isinstance(end, int) and end < start:
            return None
        if smoothing(smooth) != smooth or x not in X_AXES or norm not in (None, *NORMALIZE_MODES):
            return None
        log, one_axis, forecast, robust = flags
        return cls(
            run,
            left,
            right,
            start,
            end,
            log,
            tuple(extra),
            one_axis,
            forecast,
            focus,
            float(smooth),
            str(x),
            norm if isinstance(norm, str) else None,
            robust,
        )

    @classmethod
    def from_query(
        cls,
        run_id: str,
        names: list[str],
        *,
        left: str | None = None,
        right: str | None = None,
        start: str | None = None,
        end: str | None = None,
        log: str | None = None,
        series: Sequence[str] = (),
        axes: str | None = None,
        forecast: str | None = None,
        focus: str | None = None,
        canonical: Mapping[str, str] | None = None,
        smooth: str | None = None,
        x: str | None = None,
        norm: str | None = None,
        robust: str | None = None,
    ) -> RunView:
        """The view of a page URL's query parameters; ``names`` are the run's metrics (and
        ``canonical`` the canonical names of its aliases), for the defaults of
        :func:`default_metrics`.

        ``start``, ``end`` and ``focus`` are steps (``1e3`` reads as 1000); one that is no
        step is left out, and a range that ends before it starts is dropped whole.
        ``right=`` (empty) keeps the right axis empty; ``log`` and ``forecast`` are on for
        ``1``, ``true`` or ``yes``; ``axes=one`` draws one y axis. ``series`` (the
        parameter repeated) are the extra series: malformed expressions, repeats and those
        past `MAX_EXTRA` are left out (:func:`extra_series`). ``smooth`` is a weight from 0
        to `MAX_SMOOTHING` (rounded to 0.01), ``x`` one of `X_AXES`, ``norm`` one of
        ``median`` and ``start`` (on like ``log``: the median, `DEFAULT_NORMALIZE`),
        ``robust`` on like ``log``; anything else takes the default.
        """
        default_left, default_right = default_metrics(names, canonical)
        first, last = _step_or_none(start), _step_or_none(end)
        if first is not None and last is not None and last < first:
            first = last = None
        picked_left = (left or "")[:MAX_METRIC] or default_left
        picked_right = right[:MAX_METRIC] if right is not None else default_right
        return cls(
            run=run_id,
            left=picked_left,
            right=picked_right,
            start=first,
            end=last,
            log=log in _TRUE,
            extra=extra_series(series, exclude=(picked_left, picked_right)),
            one_axis=axes == "one",
            forecast=forecast in _TRUE,
            focus=_step_or_none(focus),
            smooth=smoothing(_float(smooth) or 0.0),
            x=x if x in X_AXES else "step",
            norm=norm if norm in NORMALIZE_MODES else DEFAULT_NORMALIZE if norm in _TRUE else None,
            robust=robust in _TRUE,
        )


def smoothing(value: object) -> float:
    """A smoothing weight from a slider, a store or a URL: a number from 0 to
    `MAX_SMOOTHING`, rounded to 0.01 (anything else: 0, no smoothing).

    >>> smoothing(0.9), smoothing(1.5), smoothing("0.9"), smoothing(float("nan"))
    (0.9, 0.99, 0.0, 0.0)
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return round(min(max(float(value), 0.0), MAX_SMOOTHING), 2)


def _metric_text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_METRIC


def expression_error(text: str) -> str | None:
    """Why ``text`` cannot be drawn as a series (a malformed derived expression, or too
    long), or None when it can.

    >>> expression_error("ratio(grad/norm/total, params/norm/total)") is None
    True
    >>> expression_error("share(a)")
    "share takes 2 arguments, got 1 in 'share(a)'"
    """
    if len(text) > MAX_METRIC:
        return f"at most {MAX_METRIC} characters, got {len(text)}"
    try:
        parse(text)
    except ExpressionError as exc:
        return str(exc)
    return None


def extra_series(picked: object, exclude: Sequence[str | None] = ()) -> tuple[str, ...]:
    """The extra series a picker's value (or the URL's ``series``) asks for: the texts
    that can be drawn, each once, none of ``exclude`` (the left and right metrics), at most
    `MAX_EXTRA`. Anything that is no list of texts (a cleared picker: None) is none.

    >>> extra_series(["a", "a", "share(x)", "", 5, "b"], exclude=["b"])
    ('a',)
    """
    if not isinstance(picked, list | tuple):
        return ()
    kept = [
        name
        for name in dict.fromkeys(p for p in picked if isinstance(p, str))
        if name and name not in exclude and expression_error(name) is None
    ]
    return tuple(kept[:MAX_EXTRA])


def is_step(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a step: an integer (not a bool) from 0 to `MAX_STEP`."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP


def _step_or_none(value: str | None) -> int | None:
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    step = int(number)
    return step if 0 <= step <= MAX_STEP else None


def default_metrics(
    names: list[str], canonical: Mapping[str, str] | None = None
) -> tuple[str | None, str | None]:
    """Total grad norm on the left; the final norm's gain (else any parameter norm) right.

    Without ``grad/norm/total`` the left axis takes the first ``grad/norm…`` metric, else
    the first metric of all. ``canonical`` maps stored aliases to the canonical names they
    stand for (`MetricOut.canonical`): those names count as logged, and the chart reads
    them through the alias.

    >>> default_metrics(["train/loss", "params/norm/a", "params/norm/final_norm.scale"])
    ('train/loss', 'params/norm/final_norm.scale')
    >>> default_metrics(["optim/total grad norm"], {"optim/total grad norm": "grad/norm/total"})
    ('grad/norm/total', None)
    """
    seen = list(dict.fromkeys([*names, *(canonical or {}).values()]))
    left = (
        DEFAULT_LEFT
        if DEFAULT_LEFT in seen
        else next((n for n in seen if n.startswith("grad/norm")), names[0] if names else None)
    )
    params = [n for n in seen if n.startswith("params/norm/")]
    right = next((n for n in params if "final_norm" in n), params[0] if params else None)
    return left, right


def view_from_relayout(
    view: RunView, relayout: object, to_step: Callable[[float], float] | None = None
) -> RunView:
    """The view after a zoom, pan or autoscale on the chart (Plotly's ``relayoutData``).

    ``xaxis.autorange`` shows every step; ``xaxis.range[0]``/``[1]`` (or ``xaxis.range``)
    set the steps to the whole steps around the range, none below 0; ``to_step`` maps an
    x axis that counts something else (tokens, hours) back to steps. Anything else (a
    change of the y axes, a value that is no number) leaves the view as it was.

    >>> view_from_relayout(RunView("r"), {"xaxis.range[0]": 9.5, "xaxis.range[1]": 20.2}).x_range
    (9, 21)
    """
    if not isinstance(relayout, dict) or not relayout:
        return view
    if relayout.get("xaxis.autorange"):
        return replace(view, start=None, end=None)
    lo, hi = relayout.get("xaxis.range[0]"), relayout.get("xaxis.range[1]")
    whole = relayout.get("xaxis.range")
    if lo is None and isinstance(whole, list) and len(whole) == 2:
        lo, hi = whole
    first, second = _float(lo), _float(hi)
    if first is None or second is None:
        return view
    if to_step is not None:
        # An x axis of tokens or hours: its ends, as the steps they stand for.
        first, second = to_step(first), to_step(second)
        if not (math.isfinite(first) and math.isfinite(second)):
            return view
    # A reversed axis (or a crafted request) sends the ends in reverse order.
    low, high = min(first, second), max(first, second)
    start = min(MAX_STEP, max(0, math.floor(low)))
    end = min(MAX_STEP, max(0, math.ceil(high)))
    return replace(view, start=start, end=end)


def _float(value: object) -> float | None:
    """A finite number from a relayout value (plotly.js sends numbers, or dates as text)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def event_window(step: int, last_step: int | None) -> tuple[int, int]:
    """A zoom around an event: wide enough to see the slope before and after.

    Half a window is a 40th of the run (its last step, else the event's), at least 200.

    >>> event_window(1000, 2000), event_window(100_000, 400_000)
    ((800, 1200), (90000, 110000))
    """
    half = max(200, (last_step or step) // 40)
    return max(0, step - half), min(MAX_STEP, step + half)
