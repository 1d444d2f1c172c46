"""Response bodies of the analytics endpoints (see docs/analytics.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from . import SeriesOut


class LayerProfileOut(BaseModel):
    step: int
    """The pinned step."""
    steps: list[int | None]
    """Per layer, the logged step nearest the pinned one (None: none within a column)."""
    values: list[float | None]
    """Per layer, its value; with ``relative_to`` its value over its baseline."""
    u_index: float | None
    relative_to: str | None = None
    """``"baseline"``: ``values`` are ratios to ``baselines``."""
    baselines: list[float | None] | None = None
    """Per layer, the median of its last 32 logged values before the baseline's end."""


class LayersOut(BaseModel):
    prefix: str
    layers: list[str]
    """Parts under the prefix in depth order: embedding first, numbered blocks in numeric
    order, final norm, head last."""
    steps: list[int]
    """Each column's step (its first step when ``bucketed``)."""
    values: list[list[float | None]]
    """Per layer, per column: the value, the largest in the column's bucket when
    ``bucketed``; None where nothing finite was logged."""
    u_index: list[float | None]
    """Per column: the mean of the two ends over the median of the middle layers."""
    bucketed: bool
    profile: LayerProfileOut | None


class SpikeOut(BaseModel):
    metric: str
    start: int
    """The first abnormal step."""
    peak: int
    peak_value: float
    end: int
    """The step the metric had recovered by (the last logged step when ``recovered`` is
    false)."""
    magnitude: float | str
    """``peak_value / baseline``; ``"Infinity"`` over a baseline of 0 or below."""
    baseline: float
    recovered: bool
    noise: float
    """The noise SD the spike was judged on (at its start): ``peak_value - baseline`` over
    it is the spike's height in SDs."""
    moments: dict[str, float | None] = {}
    """For Adam's moment norms the run logs (``optim/mu/norm/total``,
    ``optim/nu/norm/total``): the largest value over the spike divided by the moment's level
    before it (the median of its last 32 values in the 4,096 steps before ``start``), None
    without a level. Momentum's spikes raise the first and leave the second flat."""


class LeadLagOut(BaseModel):
    leader: str
    follower: str
    lag_steps: float | None
    """Median steps from a leader spike's start to the next follower spike's start (within
    ``max_lag``); None when no leader spike was followed."""
    matched: int
    unmatched_leader: int


class MoreAtOut(BaseModel):
    threshold: float
    """A lower threshold, in noise SDs."""
    count: int
    """How many spikes it finds (among those the range lists) that overlap none listed."""
    metrics: dict[str, int]
    """The same count per metric."""


class SpikesOut(BaseModel):
    spikes: list[SpikeOut]
    fraction_in_spikes: dict[str, float]
    """Per metric, the share of its logged steps inside a spike or its recovery."""
    fraction_in_window: dict[str, float] | None
    """The same share over ``[start, end]``, when a range was given."""
    lead_lag: list[LeadLagOut]
    threshold: float
    """The threshold the spikes were found at, in noise SDs (the default, 5.25, unless asked)."""
    noise: dict[str, float]
    """Per metric, its typical noise SD over the run (robust to its trend)."""
    more_at: MoreAtOut | None
    """Where the next lower threshold (4, 3 or 2) finds more spikes: how many; else null."""


class CompareSummaryOut(BaseModel):
    points: int
    max: float | None
    final: float | str | None
    final_step: int | None
    slope_per_1k: float | None
    spike_count: int
    fraction_in_spikes: float


class ComparedRunOut(BaseModel):
    run: str
    name: str
    series: SeriesOut
    summary: CompareSummaryOut
    missing: list[str] = []
    """The names and globs of the metric (an expression's arguments) this run never
    logged: its series is then empty and its summary has no points. Empty when it has
    them all."""


class CompareOut(BaseModel):
    metric: str
    runs: list[ComparedRunOut]
    config_diff: dict[str, list[Any]]
    """Config keys (nested ones joined by ``.``) whose values differ, with each run's."""


class AttributionOut(BaseModel):
    prefix: str
    groups: list[str]
    """Parameter groups in depth order (``by=group``: embedding, blocks, final norm, head,
    other parts by name; ``by=part``: every part)."""
    steps: list[int]
    """Sampled steps: every step all parts and the total share, or the first such step of
    each column."""
    shares: list[list[float | None]]
    """Per group, per step: the group's Σ part² over total²."""
    sum: list[float | None]
    """Per step: Σ of every part² over total², 1 when the parts make up the total."""
    mismatched: list[int]
    """Steps where the parts do not add up to the total (``|sum - 1| > tolerance``)."""
    tolerance: float


class FitOut(BaseModel):
    """Least-squares lines on each side of a transition; slopes per 1,000 steps."""

    slope_before: float
    slope_after: float
    ratio: float | None
    """``slope_after / slope_before``; None where the slope before is within its noise of 0."""
    level_before: float
    """The metric's level just before the step: a robust (Theil–Sen) line through the
    points nearest it, at the step."""
    level_after: float
    """Its level from the step on, likewise: the jump is the difference (≈ 0 where the
    curve only bends)."""
    slope_change: float
    """How much the slope changed, in noise units: ``≈ |ln(ratio)|`` for clear slopes."""
    slope_before_stderr: float
    slope_after_stderr: float
    n_before: int
    n_after: int
    before_segment: list[list[float]]
    """The fitted line before: ``[[step, value], [step, value]]`` from the first point it
    was fitted on to the last, for drawing (``after_segment`` likewise)."""
    after_segment: list[list[float]]


class TransitionOut(BaseModel):
    step: int
    source: Literal["event", "detected"]
    label: str
    """The event's text, or which metric the change was detected in."""
    detected_in: str | None
    score: float | None
    """A detection's strength in noise variances (None for an event)."""
    slope_change: float | None
    """The largest of the metrics' slope changes: the ranking key."""
    metrics: dict[str, FitOut]


class TransitionsOut(BaseModel):
    window: int
    """Steps fitted on each side of a transition."""
    detecting: bool
    """Whether change points were looked for: not when the window holds fewer than 20
    logged points a side for every metric (a short zoom); events are fitted regardless."""
    transitions: list[TransitionOut]
