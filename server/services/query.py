"""Reads for charts and listings: metric lists, M4-downsampled series, events."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from ..aliases import AliasMap
from ..analytics import derived
from ..errors import Invalid
from ..models import Run
from ..schemas import EventOut, MetricOut
from ..storage import pyramid
from ..storage.clock import clock_of
from ..storage.m4 import m4_select
from ..storage.points import latest_values, series_keys
from ..storage.runs import Lineage, events_of
from .aliases import project_aliases
from .full_resolution import Budget, Reader
from .unknown_names import refuse_unknown, unknown_in

MAX_POINTS = 20_000


@dataclass(frozen=True)
class Series:
    metric: str
    steps: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    downsampled: bool
    total_points: int
    source: str | None = None
    """The stored alias read for ``metric``, when the run did not store ``metric`` itself."""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "metric": self.metric,
            "steps": self.steps.tolist(),
            "values": self.values.tolist()
            if bool(np.isfinite(self.values).all())
            else [encode_value(v) for v in self.values.tolist()],
            "downsampled": self.downsampled,
            "total_points": self.total_points,
        }
        if self.source is not None:
            out["source"] = self.source
        return out


def encode_value(v: float) -> float | str:
    """JSON has no NaN or Infinity: spell them as the strings the API accepts."""
    if math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"


def list_metrics(session: Session, run: Run, aliases: AliasMap | None = None) -> list[MetricOut]:
    """Every stored metric; a stored alias that stands for a canonical name the run did
    not store carries that name as ``canonical``."""
    aliases = project_aliases(session, run.project_id) if aliases is None else aliases
    stored = latest_values(session, run.key)
    canonical = {
        source: name
        for name, source in aliases.visible(n for n, _, _ in stored).items()
        if name != source
    }
    return [
        MetricOut(
            name=name,
            last_step=step,
            last_value=None if step is None or value is None else encode_value(value),
            canonical=canonical.get(name),
        )
        for name, step, value in stored
    ]


def read_series(
    session: Session,
    run: Run,
    metrics: list[str],
    *,
    start: int | None = None,
    end: int | None = None,
    points: int = 1000,
    aliases: AliasMap | None = None,
    budget: Budget | None = None,
) -> list[Series]:
    """Each metric's points in ``[start, end]`` of the latest lineage, M4-downsampled.

    At most ``4 · points`` points a metric come back (plus one per bucket holding a NaN),
    each a real stored (step, value); a range holding no more than that comes back whole
    (a metric without a point in the range, empty). A name the run never logged, or a
    glob that matches none of its names (an expression's too), is refused before anything
    is read (`UnknownMetrics`, 404, with the closest names it has). A derived-series expression
    (`analytics.derived`) is computed from every stored point of its inputs in the range,
    then downsampled the same way, and comes back under the expression's text.

    A name the run did not store reads its stored alias under the project's ``aliases``
    (read from the database when not given), and comes back under the name asked for,
    with the alias as its ``source``; a stored name always wins over an alias.

    Expressions read within ``budget`` (`full_resolution.Budget`; the request's own when
    not given).
    """
    if points < 1 or points > MAX_POINTS:
        raise Invalid(f"points must be between 1 and {MAX_POINTS}, got {points}")
    if start is not None and end is not None and end < start:
        raise Invalid(f"end ({end}) must not be below start ({start})")
    expressions = {name: parse_expression(name) for name in metrics if derived.is_derived(name)}
    aliases = project_aliases(session, run.project_id) if aliases is None else aliases
    plain = [m for m in metrics if m not in expressions]
    # The aliases of every name asked for are looked up in the same round trip.
    lookup = list(
        dict.fromkeys([*plain, *(a for m in plain for a in aliases.aliases_of.get(m, ()))])
    )
    lineage, ids = series_keys(session, run.key, lookup)
    sources = {
        name: source
        for name in plain
        if (source := aliases.resolve(name, ids)) is not None and source != name
    }
    reader = Reader(session, run, start, end, budget or Budget(), aliases=aliases)
    unknown = [name for name in plain if aliases.resolve(name, ids) is None]
    refuse_unknown(reader, [*unknown, *unknown_in(reader, expressions)])
    out = []
    for name in metrics:
        if name in expressions:
            out.append(derived_series(reader, name, expressions[name], points))
            continue
        source = sources.get(name)
        mid = ids.get(name) if source is None else ids.get(source)
        span = None if mid is None else _span(session, run.key, mid, lineage, start, end)
        if mid is None or span is None:
            empty = np.empty(0, dtype=np.int64)
            out.append(Series(name, empty, np.empty(0, dtype=np.float64), False, 0))
            continue
        pixel = (span[1] - span[0] + 1) / points
        got = pyramid.gather(session, run.key, mid, lineage, start, end, pixel)
        if got.summarized and got.total <= 4 * points:
            # Summaries stood for a range that holds few points: show every one of them.
            got = pyramid.gather(session, run.key, mid, lineage, start, end, 0.0)
        steps, values = got.points.steps, got.points.values
        if len(steps) <= 4 * points:
            done = got.finish()
            out.append(Series(name, done.steps, done.values, got.summarized, got.total, source))
            continue
        lo = start if start is not None else int(steps[0])
        hi = end if end is not None else int(steps[-1])
        done = got.finish(m4_select(steps, values, points, lo, hi))
        out.append(Series(name, done.steps, done.values, True, got.total, source))
    return out


def parse_expression(text: str) -> derived.Expression:
    try:
        return derived.parse(text)
    except derived.ExpressionError as e:
        raise Invalid(str(e)) from None


def derived_series(
    reader: Reader, text: str, expression: derived.Expression, points: int
) -> Series:
    """A derived series over the reader's range, M4-downsampled like a stored one."""
    steps, values = compute(reader, expression)
    if len(steps) <= 4 * points:
        return Series(text, steps, values, False, len(steps))
    lo = reader.start if reader.start is not None else int(steps[0])
    hi = reader.end if reader.end is not None else int(steps[-1])
    keep = m4_select(steps, values, points, lo, hi)
    return Series(text, steps[keep], values[keep], True, len(steps))


def compute(
    reader: Reader, expression: derived.Expression
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """An expression's value at full resolution over the reader's range."""
    # A glob counts each norm once (the hierarchy rule): rss(grad/norm/layers.*) over
    # layers and their leaves would count each layer twice, and rss(grad/norm/*) over the
    # total and its parts would read √2 × the total.
    matched = {
        pattern: reader.counted(derived.Name(pattern)) for pattern in derived.patterns(expression)
    }
    read = reader.series(sorted({name for names in matched.values() for name in names}))
    inputs = {pattern: [read[name] for name in names] for pattern, names in matched.items()}
    return derived.evaluate(expression, inputs)


def _span(
    session: Session,
    run_key: int,
    metric_id: int,
    lineage: Lineage,
    start: int | None,
    end: int | None,
) -> tuple[int, int] | None:
    """The step range a chart covers: the request's, completed by the stored extent."""
    if start is not None and end is not None:
        return start, end
    stored = pyramid.extent(session, run_key, metric_id, lineage)
    if stored is None:
        return None
    return (start if start is not None else stored[0], end if end is not None else stored[1])


def list_events(session: Session, run: Run) -> list[EventOut]:
    return [EventOut.model_validate(e) for e in events_of(session, run.key)]


def run_clock(session: Session, run: Run) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """When the run reached its steps along its latest history: steps ascending and the unix
    times they were logged at (`.storage.clock`), for an x axis by wall time."""
    return clock_of(session, run.key)
