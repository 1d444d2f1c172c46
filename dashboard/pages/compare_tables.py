"""The compare page's texts and tables: run labels, the range text, the summary per run and
the config keys that differ. Pure: a comparison in, components out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dash import dcc, html

from normwatch.server.schemas import RunOut
from normwatch.server.schemas.analytics import ComparedRunOut, CompareOut

from .. import numbers
from ..figures import DOWNSAMPLED, Line, run_color
from ..numbers import signed_text

__all__ = [
    "NO_DIFFERENCES",
    "SUMMARY_COLUMNS",
    "config_text",
    "diff_table",
    "line_of",
    "number_text",
    "range_text",
    "run_labels",
    "summary_table",
    "swatch",
]

NO_DIFFERENCES = "No differences: the runs' configs are the same."
SUMMARY_COLUMNS = ("run", "max", "final", "slope / 1k steps", "spikes", "steps in spikes")


def run_labels(runs: Sequence[RunOut | ComparedRunOut]) -> list[str]:
    """Each run's name; a name that two of the runs share gets the start of the id after it."""
    names = [r.name for r in runs]
    ids = [r.id if isinstance(r, RunOut) else r.run for r in runs]
    return [
        name if names.count(name) == 1 else f"{name} ({run_id[:8]})"
        for name, run_id in zip(names, ids, strict=True)
    ]


def swatch(index: int) -> html.Span:
    """A square of the ``index``-th run's line colour."""
    return html.Span(className="swatch", style={"background": run_color(index)})


def line_of(run: ComparedRunOut) -> Line:
    """The run's series as the chart draws it ("NaN", "Infinity" back to floats)."""
    series = run.series
    values = [float(v) for v in series.values]
    return Line(series.metric, series.steps, values, series.downsampled, series.total_points)


def range_text(
    lines: Sequence[tuple[str, Line]], missing: Sequence[Sequence[str]] | None = None
) -> str:
    """'a: 2,000 points, steps 0–1,999 · b (downsampled, spikes kept): 1,000 of 20,000
    points, steps 0–19,999';
    a run that never logged the metric (``missing``: per run, the names it lacks) says so.

    >>> range_text([("a", Line("m", [], [])), ("b", Line("m", [], []))], [["m"], []])
    "a: never logged 'm' · b: no points"
    """
    parts = []
    for i, (label, line) in enumerate(lines):
        lacking = missing[i] if missing is not None and i < len(missing) else []
        if lacking:
            parts.append(f"{label}: never logged " + ", ".join(repr(m) for m in lacking))
            continue
        if not line.steps:
            parts.append(f"{label}: no points")
            continue
        name = label + (DOWNSAMPLED if line.downsampled else "")
        count = f"{len(line.steps):,}" + (f" of {line.total_points:,}" if line.downsampled else "")
        parts.append(f"{name}: {count} points, steps {line.steps[0]:,}–{line.steps[-1]:,}")
    return " · ".join(parts)


def number_text(value: float | str | None, *, signed: bool = False) -> str:
    """A summary's number as the dashboard writes numbers everywhere (`.numbers`): four
    significant digits, '—' for none, the API's "NaN" and "Infinity" plainly; ``signed``
    puts a ``+`` before a rise (a slope).

    >>> number_text(0.000123456789), number_text(None), number_text("NaN"), number_text(8.76701)
    ('0.0001235', '—', 'NaN', '8.767')
    >>> number_text(2.5, signed=True), number_text("Infinity")
    ('+2.5', 'inf')
    """
    return signed_text(value) if signed else numbers.number_text(value)


def summary_table(compared: CompareOut, labels: Sequence[str]) -> html.Table:
    """A row a run: its largest and final value and slope over the range, its spikes and
    the share of its steps in them over the whole run."""
    header = html.Tr([html.Th(h) for h in SUMMARY_COLUMNS])
    rows = [
        html.Tr(
            [
                html.Td([swatch(i), dcc.Link(label, href=f"/runs/{r.run}")]),
                html.Td(number_text(r.summary.max)),
                html.Td(number_text(r.summary.final)),
                html.Td(number_text(r.summary.slope_per_1k, signed=True)),
                html.Td(str(r.summary.spike_count)),
                html.Td(f"{100 * r.summary.fraction_in_spikes:.2f} %"),
            ]
        )
        for i, (label, r) in enumerate(zip(labels, compared.runs, strict=True))
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs compare-summary")


def config_text(value: object) -> str:
    """A config value as JSON writes it, text as it is, '—' where a run does not set it.

    >>> config_text(False), config_text("adamw"), config_text(None), config_text([1, 2])
    ('false', 'adamw', '—', '[1, 2]')
    """
    if value is None:
        return "—"
    return value if isinstance(value, str) else json.dumps(value)


def diff_table(compared: CompareOut, labels: Sequence[str]) -> Any:
    """A row a config key whose values differ, a column a run; a line saying so when none
    does."""
    if not compared.config_diff:
        return html.P(NO_DIFFERENCES, className="empty")
    header = html.Tr([html.Th("key"), *(html.Th(label) for label in labels)])
    rows = [
        html.Tr([html.Td(key, className="metric"), *(html.Td(config_text(v)) for v in values)])
        for key, values in compared.config_diff.items()
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], className="runs compare-diff")
