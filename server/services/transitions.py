"""Transitions of a run's metrics: every event and every detected change point, with the
least-squares slopes before and after it for every metric asked about, ranked by how much a
slope changed.

Each metric is read at full resolution over the range (a derived expression is computed
first). Its events are the run's within the range; a change point is detected in each metric
separately, and detections in different metrics within a quarter window of each other are one
transition (at the strongest one's step), fitted for every metric: "the slope of
``final_norm.weight`` steepened at 81k, and so did the grad norm's".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from ..analytics import transitions as fitting
from ..analytics.derived import is_derived
from ..errors import Invalid
from ..models import Run
from ..storage.runs import events_of
from ..storage.versions import data_version
from .aliases import project_aliases
from .analytics import FloatArray, StepArray, full_series
from .full_resolution import Reader
from .kept import kept
from .unknown_names import require_known

MAX_METRICS = 16
MIN_DETECT_POINTS = 20
"""Logged points a fit's window needs on a side for change points to be looked for: over
fewer, a spike and its recovery fit as a steep fall (a zoom of 100 steps on a spike has a
window of 5)."""


@dataclass(frozen=True)
class Transition:
    """One event (``source`` "event") or detected change point ("detected", in the metric
    ``detected_in``, with the detector's ``score``) at ``step``, and each metric's lines
    fitted either side of it (a metric with fewer than two points on a side has none)."""

    step: int
    source: str
    label: str
    fits: dict[str, fitting.Fit] = field(default_factory=dict)
    detected_in: str | None = None
    score: float | None = None

    @property
    def slope_change(self) -> float | None:
        """The largest of its metrics' slope changes (`analytics.transitions.Fit`), None
        without a fit."""
        if not self.fits:
            return None
        return max(0.0, max(fit.slope_change for fit in self.fits.values()))

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "source": self.source,
            "label": self.label,
            "detected_in": self.detected_in,
            "score": self.score,
            "slope_change": self.slope_change,
            "metrics": {metric: _fields(fit) for metric, fit in self.fits.items()},
        }


@dataclass(frozen=True)
class Transitions:
    """What `run_transitions` finds: the ``window`` each side of a step the lines were
    fitted on, and the ``transitions``, largest slope change first."""

    window: int
    transitions: list[Transition]
    detecting: bool = True
    """Whether change points were looked for: not where the window holds fewer than
    `MIN_DETECT_POINTS` logged points a side for every metric (a zoom on a spike)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "detecting": self.detecting,
            "transitions": [t.to_json() for t in self.transitions],
        }


def run_transitions(
    session: Session,
    run: Run,
    metrics: list[str],
    *,
    start: int | None = None,
    end: int | None = None,
    window: int | None = None,
) -> Transitions:
    """One transition per event in the range and per detected change point, each with every
    metric's fit (a metric with fewer than two points on a side has none), largest slope
    change first.

    ``window`` is at most the analysed range (`analysed_span`); a wider one is clamped to
    it, and the answer's ``window`` is the one used. Every line a wider window fits is the
    same, and the detector's work stays bounded by the points read, not by the window.
    A name the run never logged, or a glob matching none of its names, is refused
    (`UnknownMetrics`, 404)."""
    if not 1 <= len(metrics) <= MAX_METRICS:
        raise Invalid(f"name 1 to {MAX_METRICS} metrics, got {len(metrics)}")
    if start is not None and end is not None and end < start:
        raise Invalid(f"end ({end}) must not be below start ({start})")
    if window is not None and window < 1:
        raise Invalid(f"window must be at least 1 step, got {window}")
    reader = Reader(session, run, start, end, aliases=project_aliases(session, run.project_id))
    require_known(reader, metrics)
    if any(is_derived(metric) for metric in metrics):
        return _transitions(session, run, reader, metrics, start, end, window)
    # A finished run's page asks for the same transitions on every load: kept (`.kept`), by
    # the stored series the names read (a project's aliases may change what they read).
    stored = set(reader.names())
    sources = tuple(
        (m, reader.aliases.resolve(m, stored) if reader.aliases else m) for m in metrics
    )
    return kept(
        data_version(session, run.key),
        ("transitions", sources, start, end, window),
        lambda: _transitions(session, run, reader, metrics, start, end, window),
        lambda found: 4096 + 512 * len(found.transitions) * (1 + len(metrics)),
    )


def _transitions(
    session: Session,
    run: Run,
    reader: Reader,
    metrics: list[str],
    start: int | None,
    end: int | None,
    window: int | None,
) -> Transitions:
    """`run_transitions`, read."""
    series = {metric: full_series(reader, metric) for metric in dict.fromkeys(metrics)}
    if window is None:
        spans = [int(s[-1] - s[0]) for s, _ in series.values() if len(s) > 1]
        window = max(1, max(spans, default=0) // 20)
    events = [
        (int(e.step), e.text)
        for e in events_of(session, run.key)
        if (start is None or e.step >= start) and (end is None or e.step <= end)
    ]
    window = min(window, analysed_span(series.values(), [step for step, _ in events]))
    by_event = {step: Transition(step, "event", label) for step, label in events}
    found = list(by_event.values())
    detected: list[tuple[float, int, str]] = []
    detecting = False
    for metric, (steps, values) in series.items():
        # Too few points a side to tell a change of trend from a spike or noise: the
        # metric's events are fitted, and nothing is detected in it.
        detect = window >= MIN_DETECT_POINTS * _spacing(steps)
        detecting = detecting or detect
        for one in fitting.transitions(steps, values, events, window, detect=detect):
            if one.source == "event":
                if one.fit is not None:
                    by_event[one.step].fits[metric] = one.fit
            elif one.score is not None:
                detected.append((one.score, one.step, metric))
    merge = max(1, window // 4)
    taken: list[int] = []
    for score, step, metric in sorted(detected, reverse=True):
        if any(abs(step - other) <= merge for other in taken):
            continue
        taken.append(step)
        fits = {
            name: fit
            for name, (steps, values) in series.items()
            if (fit := fitting.fit_transition(steps, values, step, window)) is not None
        }
        found.append(
            Transition(
                step, "detected", f"change in {metric}", fits, detected_in=metric, score=score
            )
        )
    # Largest slope change first; transitions without a fit last, by step.
    ranked = sorted(found, key=lambda t: (-_change_or(t, -1.0), t.step))
    return Transitions(window, ranked, detecting)


def _spacing(steps: StepArray) -> float:
    """The mean steps between two logged points (1 for fewer than two).

    >>> _spacing(np.array([0, 10, 20, 30])), _spacing(np.array([5]))
    (10.0, 1.0)
    """
    return float(steps[-1] - steps[0]) / (len(steps) - 1) if len(steps) > 1 else 1.0


def _change_or(transition: Transition, default: float) -> float:
    change = transition.slope_change
    return default if change is None else change


def analysed_span(series: Iterable[tuple[StepArray, FloatArray]], events: Iterable[int]) -> int:
    """Steps from the first point or event analysed to the last, at least 1.

    A window this wide reaches every point from any of those steps, on both sides: a wider
    one fits the very same lines.

    >>> analysed_span([(np.array([10, 20, 30]), np.zeros(3))], [5])
    25
    """
    ends = [int(steps[i]) for steps, _ in series if len(steps) for i in (0, -1)]
    ends += [int(step) for step in events]
    return max(1, max(ends) - min(ends)) if ends else 1


def _fields(fit: fitting.Fit) -> dict[str, Any]:
    out = fit.to_dict()
    for key, value in out.items():
        if isinstance(value, float) and not np.isfinite(value):
            out[key] = None
    return out
