"""What the compare chart's legend says: what its colours mean, how many runs a mean is
taken over (and where fewer), and which runs fold into one line when they are grouped by
a config key. Pure.

The colours keep one meaning on every page: on a run's page red is the left axis and blue
the right one, so the compare chart gives runs (or groups of runs) colours from a palette
without that red and blue (`.figures.RUN_COLORS`), and its legend title says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Group",
    "count_segments",
    "group_runs",
    "legend_title",
    "mean_name",
    "value_text",
]

MOST_PARTS = 3
"""Where fewer runs count, named at most this many stretches of steps; past that the
legend sends the reader to the hover, which gives the count at every step."""


@dataclass(frozen=True)
class Group:
    """Runs drawn as one line (their mean with a min–max band): ``name`` says what they
    share (``"lr = 0.0003"``; empty for the mean of every run), ``runs`` are their indices
    in the comparison's order."""

    name: str
    runs: tuple[int, ...]


def legend_title(*, mean: bool = False, group_by: str | None = None) -> str:
    """The chart's colour rule, said where the names are.

    >>> legend_title()
    'colour: one a run (red and blue stay the run page’s axes) ·'
    >>> legend_title(group_by="lr")
    'colour: one a value of lr; line: mean, band: min–max ·'
    """
    if group_by is not None:
        return f"colour: one a value of {group_by}; line: mean, band: min–max ·"
    if mean:
        return "grey: mean of the runs, band: min–max · faint: each run in its colour ·"
    return "colour: one a run (red and blue stay the run page’s axes) ·"


def value_text(value: object) -> str:
    """A config value as the legend names it: text as it is, anything else as JSON.

    >>> value_text(3e-4), value_text("adamw"), value_text(True), value_text(None)
    ('0.0003', 'adamw', 'true', 'not set')
    """
    if value is None:
        return "not set"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def group_runs(key: str, values: Sequence[object]) -> list[Group]:
    """The runs grouped by their value of the config key ``key`` (``values``: each run's,
    None where it does not set it), in the order of each value's first run.

    >>> [(g.name, g.runs) for g in group_runs("lr", [1e-3, 3e-4, 1e-3, None])]
    [('lr = 0.001', (0, 2)), ('lr = 0.0003', (1,)), ('lr not set', (3,))]
    """
    found: dict[str, list[int]] = {}
    for index, value in enumerate(values):
        found.setdefault(value_text(value), []).append(index)
    return [
        Group(f"{key} not set" if text == "not set" else f"{key} = {text}", tuple(runs))
        for text, runs in found.items()
    ]


def count_segments(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """How many of the ``spans`` (each line's first and last step) cover each step, as
    stretches ``(count, first step, last step)`` of one count each, in step order, from the
    first span's start to the last one's end.

    >>> count_segments([(0, 30_000), (0, 19_500)])
    [(2, 0, 19500), (1, 19501, 30000)]
    """
    if not spans:
        return []
    edges = sorted({a for a, _ in spans} | {b + 1 for _, b in spans})
    out: list[tuple[int, int, int]] = []
    for lo, after in zip(edges, edges[1:], strict=False):
        count = sum(1 for a, b in spans if a <= lo and after - 1 <= b)
        if out and out[-1][0] == count:
            out[-1] = (count, out[-1][1], after - 1)
        else:
            out.append((count, lo, after - 1))
    return out


def mean_name(spans: Sequence[tuple[int, int]]) -> str:
    """The mean's name in the legend: over how many runs (those with a point in the
    range: ``spans`` are their first and last step there), and, where fewer count, how
    many and where, so that no count it gives is false anywhere on the chart.

    >>> mean_name([(0, 30_000), (0, 19_500)])
    'mean of 2 runs (1 after step 19,500)'
    >>> mean_name([(0, 100), (50, 100), (0, 100)])
    'mean of 3 runs (2 before step 50)'
    >>> mean_name([(0, 9)])
    'mean of 1 run'
    """
    runs = len(spans)
    name = f"mean of {runs} run{'' if runs == 1 else 's'}"
    segments = count_segments(spans)
    parts = []
    for index, (count, lo, hi) in enumerate(segments):
        if count in (0, runs):
            continue
        first, last = index == 0, index == len(segments) - 1
        if first and last:
            parts.append(f"{count} at a time")
        elif first:
            parts.append(f"{count} before step {segments[1][1]:,}")
        elif last:
            parts.append(f"{count} after step {segments[-2][2]:,}")
        else:
            parts.append(f"{count} at steps {lo:,}–{hi:,}")
    if not parts:
        return name
    if len(parts) > MOST_PARTS:
        return f"{name} (fewer at some steps: the hover gives the count)"
    return f"{name} ({'; '.join(parts)})"
