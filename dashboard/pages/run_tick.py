"""The run page's one refresh tick: what it sets off from one read of the run's metrics.

The pickers' options, the chart's redraw and each section's refresh, each only when due
(`.run_live.Pace`) and, for what reads the run's points, only when the run logged something
since it last did (`data_version`); and the header's status, segment, config and note, from a read
of the run only when it may have changed (`.run_header.header_due`), sent only when they did.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any, Protocol

import dash

from normwatch.server.auth import Principal
from normwatch.server.schemas import MetricOut, RunOut

from ..refusals import RunNotFound
from . import run_aids, run_layers, run_live, run_series, run_shaping, run_spikes
from .run_header import header_due, header_key, header_parts
from .run_live import Pace, Poke
from .run_view import RunView, default_metrics

OPTIONS_EVERY = 5
"""The metric pickers' options are read again every this many beats (`.run_live`)."""
DRAW_EVERY = 3
"""The chart is redrawn every this many beats even when the run logged nothing new: events
and alerts come without new points."""


class MetricReads(Protocol):
    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]: ...


class TickReads(MetricReads, Protocol):
    """What the tick reads: the run's metrics each time, the run itself when its header
    may have changed."""

    def run(self, who: Principal, run_id: str) -> RunOut: ...


def refresh_options(
    data: MetricReads, who: Principal, view: RunView | None, n_intervals: object
) -> tuple[Any, Any, str, Any, Any]:
    """The pickers' options (every `OPTIONS_EVERY` ticks, else ``no_update``), the run's
    last step, and the pickers' values: the default metrics once a view that charts none
    (a page opened before the run's first metric) finds some, else ``no_update``. Empty
    for a view of no run of the viewer's project."""
    if view is None:
        return [], [], "", dash.no_update, dash.no_update
    try:
        metrics = data.metrics(who, view.run)
    except RunNotFound:
        return [], [], "", dash.no_update, dash.no_update
    due = not isinstance(n_intervals, int) or n_intervals % OPTIONS_EVERY == 0
    return options_of(view, metrics, due=due)


def options_of(
    view: RunView, metrics: list[MetricOut], *, due: bool
) -> tuple[Any, Any, str, Any, Any]:
    """`refresh_options` for the run's ``metrics``, as read; the options only when ``due``."""
    last = max((m.last_step for m in metrics if m.last_step is not None), default=None)
    label = "" if last is None else f"last step {last:,}"
    names = [m.name for m in metrics]
    waiting = view.left is None and view.right is None and not view.extra
    if waiting and names:
        # The chart waited for the run's first metrics: it takes the defaults now, as the
        # page would have had it been opened later.
        left, right = default_metrics(names, {m.name: m.canonical for m in metrics if m.canonical})
        picked = replace(view, left=left, right=right)
        options = run_series.options_with(names, picked)
        return options, options, label, left or dash.no_update, right or dash.no_update
    if not due and not waiting:
        return dash.no_update, dash.no_update, label, dash.no_update, dash.no_update
    options = run_series.options_with(names, view)
    return options, options, label, dash.no_update, dash.no_update


def data_version(metrics: list[MetricOut]) -> int:
    """A number that changes when the run logs anything: a metric, a later step, another
    last value (a restart logging a step again). CRC-32, the same on every worker."""
    text = "\n".join(f"{m.name}\t{m.last_step}\t{m.last_value}" for m in metrics)
    return zlib.crc32(text.encode())


TICK_PARTS = ("draw", "transitions", "attribution", "grid", "profile", "spikes")
"""What `tick` sets off only when the run changed since it last did."""
TICK_OUTPUTS = 18
"""What `tick` answers: the pickers' options, the last step, the pickers' values, the chart's
draw tick, the versions seen, the sections' six ticks, the interval of the next tick, the x
axis choices (tokens offered once the run logs a tokens metric), and the header's status
and segment, its config section and its note (`.run_header`)."""


def first_seen(metrics: list[MetricOut], run: RunOut | None = None) -> dict[str, Any]:
    """The ``ticks-seen`` store of a page just built from ``metrics`` and ``run``: every
    part has seen them, so that the first tick sets off only what the run logs after, and
    the header is sent again only once what it shows changed."""
    version = data_version(metrics)
    seen: dict[str, Any] = {**dict.fromkeys(TICK_PARTS, version), "pace": Pace().to_store()}
    if run is not None:
        seen |= {"header": version, "header-key": header_key(run)}
    return seen


def refresh_header(
    data: TickReads, who: Principal, run_id: str, given: dict[str, Any], version: int
) -> tuple[Any, Any, Any]:
    """The header's parts (`.run_header.header_parts`) read afresh, or ``no_update`` for
    both when what they show is what ``given`` (the ``ticks-seen`` store, updated here) says
    the page shows, or when the run is gone from the viewer's project."""
    skip = dash.no_update
    given["header"] = version
    try:
        run = data.run(who, run_id)
    except RunNotFound:
        return skip, skip, skip
    key = header_key(run)
    if given.get("header-key") == key:
        return skip, skip, skip
    given["header-key"] = key
    return header_parts(run)


def tick(
    data: TickReads,
    who: Principal,
    view: RunView | None,
    n_intervals: object,
    pinned: int | None,
    seen: object,
    poke: object = None,
) -> tuple[Any, ...]:
    """What one refresh tick of the page sets off, from one read of the run's metrics.

    One callback a tick, where the chart and each section had one of their own: the
    pickers (`refresh_options`); the chart, when the run logged anything since it was
    drawn, and every `DRAW_EVERY` beats regardless (events and alerts come without new
    points); the sections each at its own pace in beats (`run_aids.sections_due`,
    `run_layers.refreshes_due`, `run_spikes.spikes_due`, given each beat that passed since
    the last tick, `.run_live.Pace`), and those that read the run's points only when it
    logged something since they last did; and the interval to the next tick
    (`.run_live.interval_for`). ``seen`` is the store of the versions (`data_version`) each
    of them was last given, and of the pace; the new ones go back into it. ``poke`` is the
    store the page's live channel pokes (`.run_live.Poke`): a poke that says the run changed
    redraws the chart (events come without new points); in a hidden tab the callback reads
    nothing, and when it shows again the chart is redrawn and every section reads what it
    missed. A page left open on a quiet run then reads its metrics every few seconds,
    redraws its chart as often, and nothing else. The header (status, segment, config,
    note) is read with the run when `.run_header.header_due` says so and sent only when it
    changed (`refresh_header`); its three parts come last.
    """
    skip = dash.no_update
    if view is None:
        return ([], [], "", skip, skip, *[skip] * (TICK_OUTPUTS - 5))
    given = dict(seen) if isinstance(seen, dict) else {}
    told = Poke.from_store(poke)
    turn = Pace.from_store(given.get("pace")).advance(n_intervals, poke=told)
    interval = run_live.interval_for(told)
    given["pace"] = replace(turn.pace, every=interval).to_store()
    new_interval = skip if interval == turn.pace.every else interval
    if told.hidden:  # the tab rests until it shows
        return (*[skip] * 6, given, *[skip] * 6, new_interval, *[skip] * 4)
    try:
        metrics = data.metrics(who, view.run)
    except RunNotFound:
        return ([], [], "", skip, skip, *[skip] * (TICK_OUTPUTS - 5))
    version = data_version(metrics)
    beats, shown = turn.beats, turn.shown
    pickers = options_of(view, metrics, due=shown or any(b % OPTIONS_EVERY == 0 for b in beats))

    def fresh(part: str, due: bool, *, every: bool = False) -> Any:
        """A new value for a part that is due and has not seen this version (or ``every``)."""
        if not (due or shown) or (given.get(part) == version and not every):
            return skip
        given[part] = version
        return turn.pace.seq

    sections = [run_aids.sections_due(view, b) for b in beats]
    layers = [run_layers.refreshes_due(view, pinned, b) for b in beats]
    outputs = (
        fresh("draw", True, every=turn.redraw or any(b % DRAW_EVERY == 0 for b in beats)),
        # the rules' lines: no points read
        fresh("aids", any(s.aids for s in sections), every=True),
        fresh("transitions", any(s.transitions for s in sections)),
        fresh("attribution", any(s.attribution for s in sections)),
        fresh("grid", any(r.grid for r in layers)),
        fresh("profile", any(r.profile for r in layers)),
        fresh("spikes", any(run_spikes.spikes_due(view, b) for b in beats)),
    )
    # The x axis choices change with the metrics, so they come with the pickers' options.
    x_choices = skip if pickers[0] is skip else run_shaping.x_options([m.name for m in metrics])
    header: tuple[Any, Any, Any] = (skip, skip, skip)
    if header_due(
        told=turn.redraw or shown,
        version_seen=given.get("header") == version,
        channel_open=told.open,
        beats=beats,
    ):
        header = refresh_header(data, who, view.run, given, version)
    return (*pickers, outputs[0], given, *outputs[1:], new_interval, x_choices, *header)
