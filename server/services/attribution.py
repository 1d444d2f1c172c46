"""Attribution: each parameter group's share of a total's squared norm over time.

A global norm is the root of its parts' summed squares, so ``Σ_parts part² / total² = 1``
at every step where everything is logged: the shares stack to one, and where they do not,
the parts logged are not the parts of that total (a layer missing from the logging, a
total over other parameters, a bug) and the step is flagged.

Shares are exact values at sampled steps, never ratios of downsampled values: each column
of the chart is represented by the first step in it that every part and the total logged.
The parts' candidates are their 64-point buckets' first points, from the chunks' outlines
(a bucket's first point is a stored point, and series logged together have the same
buckets), every series in one statement, so a 48-layer, million-step run costs what the
outlines weigh; where the total's buckets do not meet the parts', the total is read whole
(one series), so every step the parts share has its value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from ..analytics.hierarchy import outermost
from ..analytics.layers import bucket_edges, depth_group, depth_order, values_at
from ..errors import Invalid, UnknownMetrics
from ..models import Run
from ..storage import across, pyramid
from ..storage.chunks import Points
from ..storage.metric_ids import metric_names
from ..storage.points import series_keys
from ..storage.versions import data_version
from .kept import kept
from .layers import MAX_COLUMNS, MAX_LAYERS, cells, under_prefix
from .unknown_names import closest

TOLERANCE = 0.01
"""Largest ``|Σ shares - 1|`` that still counts as adding up (the opt-in float32 compaction
of the inputs moves a share by about 1e-7)."""


@dataclass(frozen=True)
class Attribution:
    prefix: str
    groups: list[str]
    steps: list[int]
    shares: list[list[float | None]]
    """Per group, per step: Σ of its parts² / total²."""
    sum: list[float | None]
    """Per step: Σ of every part² / total² (1 when the parts make up the total)."""
    mismatched: list[int]
    """Steps where ``|sum - 1| > tolerance``."""
    tolerance: float

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def attribution(
    session: Session,
    run: Run,
    prefix: str,
    *,
    start: int | None = None,
    end: int | None = None,
    points: int = 1000,
    by: str = "group",
) -> Attribution:
    """Shares of ``<prefix>/total``'s square by parameter group (``by="group"``:
    embedding, blocks, final norm, head, others by name) or by part (``by="part"``).
    `UnknownMetrics` (404) for a prefix under which the run logged nothing, or no
    ``<prefix>/total``."""
    if not 1 <= points <= MAX_COLUMNS:
        raise Invalid(f"points must be between 1 and {MAX_COLUMNS}, got {points}")
    if by not in ("group", "part"):
        raise Invalid(f"by must be 'group' or 'part', got {by!r}")
    if start is not None and end is not None and end < start:
        raise Invalid(f"end ({end}) must not be below start ({start})")
    # A finished run's page asks for the same shares on every load: kept (`.kept`).
    return kept(
        data_version(session, run.key),
        ("attribution", prefix, start, end, points, by),
        lambda: _shares(session, run, prefix, start, end, points, by),
        lambda got: 4096 + 32 * (len(got.groups) + 3) * (len(got.steps) + 4),
    )


def _shares(
    session: Session,
    run: Run,
    prefix: str,
    start: int | None,
    end: int | None,
    points: int,
    by: str,
) -> Attribution:
    """`attribution`, read."""
    stem = prefix.rstrip("/") + "/"
    # The outermost parts only (the hierarchy rule): a layer and its leaves would count
    # the layer twice, and the sum check would find the parts adding up to 150 %.
    stored = metric_names(session, run.key)
    under = under_prefix(stored, prefix)
    if stem + "total" not in under:
        named = stem + "total"
        raise UnknownMetrics([named], {named: closest(named, stored)})
    parts = depth_order(
        outermost(name[len(stem) :] for name in under if name[len(stem) :] != "total")
    )
    if len(parts) > MAX_LAYERS:
        raise Invalid(f"{len(parts)} metrics sit under {stem!r}, more than {MAX_LAYERS}")
    groups = list(dict.fromkeys(depth_group(p) if by == "group" else p for p in parts))
    names = [stem + "total", *(stem + p for p in parts)]
    lineage, ids = series_keys(session, run.key, names)
    if stem + "total" not in ids or not parts:
        return Attribution(stem.rstrip("/"), groups, [], [[] for _ in groups], [], [], TOLERANCE)
    total_id = ids[stem + "total"]
    span = pyramid.extent(session, run.key, total_id, lineage)
    if span is None:
        return Attribution(stem.rstrip("/"), groups, [], [[] for _ in groups], [], [], TOLERANCE)
    lo = start if start is not None else span[0]
    hi = end if end is not None else span[1]
    pixel = (hi - lo + 1) / points
    # Every series' bucket firsts, in one statement (`storage.across`): logged together,
    # parts and total share their buckets' first steps. Where the total's do not meet the
    # parts' (logged at other steps, or its chunks cut elsewhere), the total is read whole,
    # so that any step the parts share has its total. Values compacted as float32 (the
    # opt-in lossy precision, or chunks of the earlier default) are used merely widened:
    # their shortest-decimal form costs 0.2 µs a value and moves a share by less than 1e-7.
    present = [name for name in names if name in ids]
    firsts = across.read(
        session, run.key, [ids[n] for n in present], lineage, lo, hi, pixel, "first"
    )
    read = dict(zip(present, firsts.series, strict=True))
    steps = _sample_steps([read.get(name) for name in names], lo, hi, points)
    if not firsts.exact and len(steps) < len(
        _sample_steps([read.get(name) for name in names[1:]], lo, hi, points)
    ):
        whole = across.read(session, run.key, [total_id], lineage, lo, hi, 0.0, "first")
        read[names[0]] = whole.series[0]
        steps = _sample_steps([read.get(name) for name in names], lo, hi, points)
    total = values_at(read[stem + "total"].steps, read[stem + "total"].values, steps)
    squares = np.zeros((len(groups), len(steps)))
    for part in parts:
        got = read.get(stem + part)
        value = (
            np.full(len(steps), np.nan) if got is None else values_at(got.steps, got.values, steps)
        )
        row = groups.index(depth_group(part) if by == "group" else part)
        squares[row] += np.square(value)
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = squares / np.square(total)
    summed = shares.sum(axis=0)
    bad = ~(np.abs(summed - 1.0) <= TOLERANCE)
    return Attribution(
        stem.rstrip("/"),
        groups,
        steps.tolist(),
        [cells(row) for row in shares],
        cells(summed),
        steps[bad].tolist(),
        TOLERANCE,
    )


def _sample_steps(series: list[Points | None], lo: int, hi: int, points: int) -> np.ndarray:
    """One step a column: the first in it that every series has (none where they share
    none); every shared step when there are no more than ``points``."""
    # Ascending, unique steps: each series narrows the shortest by binary search, no sort.
    by_length = sorted(
        (np.empty(0, dtype=np.int64) if got is None else got.steps for got in series), key=len
    )
    common = by_length[0]
    for steps in by_length[1:]:
        at = np.searchsorted(steps, common)
        found = at < len(steps)
        found[found] = steps[at[found]] == common[found]
        common = common[found]
    if len(common) <= points:
        return common
    edges = bucket_edges(lo, hi, points)
    column = np.searchsorted(edges, common, side="right") - 1
    first = np.ones(len(common), dtype=bool)
    first[1:] = column[1:] != column[:-1]
    return common[first]
