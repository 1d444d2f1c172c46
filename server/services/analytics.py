"""Spikes and run comparisons, computed from every stored point of the series involved.

A metric here may be a stored name or a derived-series expression (`analytics.derived`).
Spikes are found over the whole run, so a spike's baseline is the same whatever range a
chart shows; a range only chooses which spikes are listed and the window of the second
fraction.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from ..analytics import derived
from ..analytics import spikes as spike_finder
from ..analytics.summary import BASELINE_SPAN, Summary, config_diff, level_before, summarize
from ..errors import Invalid, UnknownMetrics
from ..models import Run
from ..schemas.analytics import CompareOut
from ..storage.versions import DataVersion, data_version
from . import query
from .aliases import project_aliases
from .full_resolution import Budget, Reader
from .kept import kept
from .kept_spikes import FoundSpikes, found_spikes, spikes_of
from .unknown_names import closest, require_known, unknown_in, visible_names

StepArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAX_LAG = 1000
MAX_COMPARED_RUNS = 8


def full_series(reader: Reader, metric: str) -> tuple[StepArray, FloatArray]:
    """Every point of a stored metric, or of a derived series, in the reader's range; a
    name the run did not store reads its stored alias (the reader's ``aliases``)."""
    if derived.is_derived(metric):
        return query.compute(reader, query.parse_expression(metric))
    if reader.aliases:
        metric = reader.aliases.resolve(metric, set(reader.names())) or metric
    return reader.series([metric])[metric]


@dataclass(frozen=True)
class MoreAt:
    """How many more spikes a lower threshold finds: those at ``threshold`` that overlap
    no spike the answer lists, per metric and in all."""

    threshold: float
    count: int
    metrics: dict[str, int]


@dataclass(frozen=True)
class SpikeReport:
    spikes: list[dict[str, object]]
    fraction_in_spikes: dict[str, float]
    fraction_in_window: dict[str, float] | None
    lead_lag: list[spike_finder.LeadLag]
    threshold: float = spike_finder.THRESHOLD
    noise: dict[str, float] = field(default_factory=dict)
    more_at: MoreAt | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "spikes": self.spikes,
            "fraction_in_spikes": self.fraction_in_spikes,
            "fraction_in_window": self.fraction_in_window,
            "lead_lag": [asdict(pair) for pair in self.lead_lag],
            "threshold": self.threshold,
            "noise": self.noise,
            "more_at": None if self.more_at is None else asdict(self.more_at),
        }


def spike_report(
    session: Session,
    run: Run,
    metrics: list[str],
    *,
    start: int | None = None,
    end: int | None = None,
    max_lag: int = 50,
    threshold: float = spike_finder.THRESHOLD,
) -> SpikeReport:
    """Each metric's spikes (those overlapping ``[start, end]`` when given) at ``threshold``
    robust noise SDs, the share of its logged steps inside a spike over the whole run and
    over the range, and, for each ordered pair of metrics, how their spikes lead and
    follow; with the threshold used, each metric's typical noise SD, and how many more
    spikes the next lower threshold (`spikes.lower_threshold`) would list. A name the run
    never logged, or a glob matching none of its names, is refused (`UnknownMetrics`, 404)
    before anything is read."""
    if start is not None and end is not None and end < start:
        raise Invalid(f"end ({end}) must not be below start ({start})")
    if not 1 <= max_lag <= MAX_LAG:
        raise Invalid(f"max_lag must be between 1 and {MAX_LAG}, got {max_lag}")
    if not spike_finder.MIN_THRESHOLD <= threshold <= spike_finder.MAX_THRESHOLD:
        raise Invalid(
            f"threshold must be between {spike_finder.MIN_THRESHOLD:g} and "
            f"{spike_finder.MAX_THRESHOLD:g} noise SDs, got {threshold:g}"
        )
    reader = Reader(session, run, None, None, aliases=project_aliases(session, run.project_id))
    require_known(reader, metrics)
    version = data_version(session, run.key)
    ranged = start is not None or end is not None
    lower = spike_finder.lower_threshold(threshold)
    found: dict[str, list[spike_finder.Spike]] = {}
    listed: list[dict[str, object]] = []
    whole: dict[str, float] = {}
    window: dict[str, float] = {}
    noise: dict[str, float] = {}
    more: dict[str, int] = {}

    def shown(spike: spike_finder.Spike) -> bool:
        return (start is None or spike.end >= start) and (end is None or spike.start <= end)

    for metric in dict.fromkeys(metrics):
        below: list[spike_finder.Spike] = []
        if derived.is_derived(metric) or version is None:
            steps, values = full_series(reader, metric)
            found[metric] = spike_finder.find_spikes(steps, values, threshold=threshold)
            whole[metric] = spike_finder.fraction_in_spikes(steps, found[metric])
            noise[metric] = spike_finder.noise_sd(values)
            if lower is not None:
                below = spike_finder.find_spikes(steps, values, threshold=lower)
        else:
            # A stored metric's spikes over the whole run, kept while the run's data stays
            # the same: a zoom or another look at the page finds them at once.
            name = metric
            if reader.aliases:
                name = reader.aliases.resolve(metric, set(reader.names())) or metric
            kept = found_spikes(reader, name, version, threshold)
            found[metric], whole[metric], noise[metric] = kept.spikes, kept.fraction, kept.noise
            steps = kept.steps_between(start, end) if ranged else np.empty(0, np.int64)
            below = kept.below or []
        if ranged:
            window[metric] = spike_finder.fraction_in_spikes(steps, found[metric], start, end)
        listed += [
            {**asdict(spike), "metric": metric, "magnitude": query.encode_value(spike.magnitude)}
            for spike in found[metric]
            if shown(spike)
        ]
        more[metric] = _new_spikes([s for s in below if shown(s)], found[metric])
    listed.sort(key=lambda spike: (spike["start"], str(spike["metric"])))
    _add_moments(session, reader, version, listed)
    pairs = [
        spike_finder.lead_lag(a, found[a], b, found[b], max_lag=max_lag)
        for a, b in itertools.permutations(found, 2)
    ]
    more_at = None
    if lower is not None and sum(more.values()) > 0:
        more_at = MoreAt(lower, sum(more.values()), more)
    return SpikeReport(listed, whole, window if ranged else None, pairs, threshold, noise, more_at)


def _new_spikes(lower: list[spike_finder.Spike], found: list[spike_finder.Spike]) -> int:
    """How many of ``lower`` (spikes at a lower threshold) overlap none of ``found``."""
    starts = np.array([s.start for s in found], dtype=np.int64)
    ends = np.array([s.end for s in found], dtype=np.int64)
    new = 0
    for spike in lower:
        # The found spikes are disjoint and in step order: the one that could overlap is
        # the last to start at or before this one's end.
        at = int(np.searchsorted(starts, spike.end, side="right")) - 1
        new += at < 0 or int(ends[at]) < spike.start
    return new


def _unknown_everywhere(readers: list[Reader], missing: list[list[str]]) -> UnknownMetrics:
    """The refusal of a comparison none of whose runs logged all its metric names: each
    name some run lacks, the runs that lack it, and the closest names any of them has."""
    unknown = list(dict.fromkeys(name for lacking in missing for name in lacking))
    names = list(dict.fromkeys(n for whole in readers for n in visible_names(whole)))
    return UnknownMetrics(
        unknown,
        {name: closest(name, names) for name in unknown},
        missing_in={
            name: [w.run.id for w, lacking in zip(readers, missing, strict=True) if name in lacking]
            for name in unknown
        },
    )


def _compared(
    session: Session, whole: Reader, metric: str, start: int | None, end: int | None
) -> tuple[Summary, list[spike_finder.Spike], float]:
    """One run's summary of ``metric`` over ``[start, end]``, its spikes over the whole run
    and the share of its steps in them. A stored metric's answers are kept under the run's
    data version (`.kept`), as a run page's spikes are: comparing finished runs again, or
    another metric and back, reads nothing; its reads still count against the budget."""
    version = data_version(session, whole.run.key)
    name = metric
    if whole.aliases:
        name = whole.aliases.resolve(metric, set(whole.names())) or metric
    if derived.is_derived(metric) or version is None or name not in whole.names():
        steps, values = full_series(whole, metric)
        found = spike_finder.find_spikes(steps, values)
        return (
            _summary_between(steps, values, start, end),
            found,
            spike_finder.fraction_in_spikes(steps, found),
        )
    read: list[tuple[Summary, FoundSpikes]] = []

    def from_points() -> tuple[Summary, FoundSpikes]:
        steps, values = whole.series([name])[name]  # one read for both, counted once

        def find() -> FoundSpikes:
            return spikes_of(steps, values, spike_finder.THRESHOLD)

        # The same key as `found_spikes` at the default threshold: a run page's spikes serve.
        spikes = kept(version, ("spikes", name, spike_finder.THRESHOLD), find, FoundSpikes.nbytes)
        read.append((_summary_between(steps, values, start, end), spikes))
        return read[0]

    summary, spikes = kept(
        version, ("compared", name, start, end), from_points, lambda got: 256 + got[1].nbytes()
    )
    if not read:
        whole.budget.reading(whole.run.key, [name])
        whole.budget.charge(spikes.points)
    return summary, spikes.spikes, spikes.fraction


def _summary_between(
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    start: int | None,
    end: int | None,
) -> Summary:
    inside = (steps >= (start if start is not None else -(2**63))) & (
        steps <= (end if end is not None else 2**63 - 1)
    )
    return summarize(steps[inside], values[inside])


MOMENTS = ("optim/mu/norm/total", "optim/nu/norm/total")
"""Adam's first and second moment norms, as `normwatch.client.jax.stability_metrics` logs
them: a spike from momentum moves the first and leaves the second flat."""


def _add_moments(
    session: Session, reader: Reader, version: DataVersion | None, listed: list[dict[str, object]]
) -> None:
    """Give each listed spike its ``moments``: for each of `MOMENTS` the run logs, its
    largest value over the spike over its level before it (None without a level). One read
    a moment, over the listed spikes' steps and the baselines before them; kept under the
    run's data version."""
    names = set(reader.names())
    present = [name for name in MOMENTS if name in names]
    moments: list[dict[str, float | None]] = [{} for _ in listed]
    for spike, own in zip(listed, moments, strict=True):
        spike["moments"] = own
    if not listed or not present:
        return
    bounds = tuple((int(str(s["start"])), int(str(s["end"]))) for s in listed)
    lo = max(0, min(start for start, _ in bounds) - BASELINE_SPAN)
    hi = max(end for _, end in bounds)
    for name in present:

        def ratios(name: str = name) -> list[float | None]:
            window = Reader(session, reader.run, lo, hi, reader.budget, aliases=reader.aliases)
            steps, values = window.series([name])[name]
            return [_moment_ratio(steps, values, start, end) for start, end in bounds]

        question = ("moments", name, bounds)
        got = ratios() if version is None else kept(version, question, ratios, _ratios_bytes)
        for own, ratio in zip(moments, got, strict=True):
            own[name] = ratio


def _ratios_bytes(ratios: list[float | None]) -> int:
    return 64 + 16 * len(ratios)


def _moment_ratio(
    steps: StepArray, values: npt.NDArray[np.float64], start: int, end: int
) -> float | None:
    """The largest finite value in ``[start, end]`` over the level before ``start``
    (`analytics.summary.level_before`, as a layer's baseline); None without either, or over
    a level of 0 or below.

    >>> steps = np.arange(10); values = np.array([1.0] * 5 + [3.0, 2.0] + [1.0] * 3)
    >>> _moment_ratio(steps, values, 5, 7)
    3.0
    """
    level = level_before(values[(steps < start) & (steps >= start - BASELINE_SPAN)])
    during = values[(steps >= start) & (steps <= end)]
    during = during[np.isfinite(during)]
    if not len(during) or not level > 0:
        return None
    return float(during.max()) / level


def compare_runs(
    session: Session,
    runs: list[Run],
    metric: str,
    *,
    start: int | None = None,
    end: int | None = None,
    points: int = 1000,
) -> CompareOut:
    """One metric of each run, aligned by step (each series M4-downsampled over the same
    range), with a summary per run over that range: largest and final value, slope,
    spikes found over the whole run and the share of the run's steps in them; and the
    config keys whose values differ between the runs.

    A run that never logged the metric (or a name or glob of the expression) is compared
    with an empty series, and its ``missing`` names what it lacks; when every run lacks
    something, the comparison is refused (`UnknownMetrics`, 404: each name, the runs
    that lack it, and the closest names they have)."""
    if not 1 <= len(runs) <= MAX_COMPARED_RUNS:
        raise Invalid(f"compare 1 to {MAX_COMPARED_RUNS} runs, got {len(runs)}")
    out = []
    budget = Budget()  # one for the whole comparison, every run's reads together
    readers = [
        Reader(session, run, None, None, budget, aliases=project_aliases(session, run.project_id))
        for run in runs
    ]
    missing = [unknown_in(whole, [metric]) for whole in readers]
    if all(missing):
        raise _unknown_everywhere(readers, missing)
    for whole, lacking in zip(readers, missing, strict=True):
        run = whole.run
        if lacking:
            empty = np.empty(0, np.int64)
            series = query.Series(metric, empty, np.empty(0, np.float64), False, 0)
            found: list[spike_finder.Spike] = []
            summary, fraction = summarize(empty, np.empty(0)), 0.0
        else:
            [series] = query.read_series(
                session,
                run,
                [metric],
                start=start,
                end=end,
                points=points,
                aliases=whole.aliases,
                budget=budget,
            )
            summary, found, fraction = _compared(session, whole, metric, start, end)
        out.append(
            {
                "run": run.id,
                "name": run.name,
                "series": series.to_json(),
                "summary": {
                    "points": summary.points,
                    "max": summary.max,
                    "final": None if summary.final is None else query.encode_value(summary.final),
                    "final_step": summary.final_step,
                    "slope_per_1k": summary.slope_per_1k,
                    "spike_count": len(found),
                    "fraction_in_spikes": fraction,
                },
                "missing": lacking,
            }
        )
    return CompareOut.model_validate(
        {
            "metric": metric,
            "runs": out,
            "config_diff": config_diff([dict(run.config or {}) for run in runs]),
        }
    )
