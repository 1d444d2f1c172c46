"""The layer × step grid of a run: per-layer norms under one prefix, in depth order.

Each row is one metric ``<prefix>/<part>`` (``grad/norm/layers.12``), ordered from the
embedding to the head (`analytics.layers.depth_order`); the ``total`` is not a layer. Over a
range holding no more logged steps than the grid has columns, cells are the values at
those steps; otherwise each column is a bucket of steps and each cell the largest value
logged in it (so a one-step spike keeps its colour). Every layer is read in the same
statement (`storage.across`), from the chunks' outlines where a 64-point bucket is narrower
than a column, so a million steps cost what the chunks' outlines weigh, a few kilobytes a
layer and 4,096 steps, not what the run has points. A pinned step gives the depth profile
there, from the stored points themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from ..analytics.hierarchy import outermost
from ..analytics.layers import (
    FloatArray,
    StepArray,
    bucket_edges,
    bucket_max,
    depth_order,
    u_index,
    values_at,
)
from ..analytics.summary import BASELINE_SPAN, level_before
from ..errors import Invalid, UnknownMetrics
from ..models import Run
from ..storage import across, chunks
from ..storage.chunks import Points
from ..storage.metric_ids import metric_names
from ..storage.points import series_keys
from ..storage.runs import Lineage
from ..storage.versions import data_version
from .kept import kept
from .unknown_names import closest_prefixes

MAX_LAYERS = 2048
"""Rows a grid may have: every per-parameter norm of a large model under one prefix."""
MAX_COLUMNS = 4000
_INT64 = np.iinfo(np.int64)


@dataclass(frozen=True)
class Profile:
    """The depth profile nearest a pinned step: per layer, the logged step used and value."""

    step: int
    steps: list[int | None]
    values: list[float | None]
    u_index: float | None
    relative_to: str | None = None
    """``"baseline"`` when ``values`` are each layer's value over its baseline."""
    baselines: list[float | None] | None = None
    """Per layer, the median of its last `BASELINE_POINTS` logged values before the
    baseline's end (with ``relative_to="baseline"``)."""


@dataclass(frozen=True)
class LayerGrid:
    prefix: str
    layers: list[str]
    steps: list[int]
    values: list[list[float | None]]
    u_index: list[float | None]
    bucketed: bool
    """True when a column stands for a bucket of steps (its first step is given)."""
    profile: Profile | None

    def to_json(self) -> dict[str, object]:
        return {
            "prefix": self.prefix,
            "layers": self.layers,
            "steps": self.steps,
            "values": self.values,
            "u_index": self.u_index,
            "bucketed": self.bucketed,
            "profile": None if self.profile is None else self.profile.__dict__,
        }


def layer_grid(
    session: Session,
    run: Run,
    prefix: str,
    *,
    start: int | None = None,
    end: int | None = None,
    points: int = 1000,
    at: int | None = None,
    relative_to: str | None = None,
    baseline_end: int | None = None,
) -> LayerGrid:
    """The grid of ``prefix``'s layers over ``[start, end]`` with at most ``points`` columns,
    and the depth profile at ``at`` when given.

    With ``relative_to="baseline"`` the profile gives each layer's value over its own
    baseline: the median of its last `BASELINE_POINTS` logged values in the `BASELINE_SPAN`
    steps before ``baseline_end`` (default ``at``; a spike's start, so that the spike is
    not its own baseline). "Update-norm spikes are larger on the lower layers" then reads
    off the profile: ×3.0 at the embedding, ×1.6 at the last layer.

    A prefix under which the run logged nothing is refused (`UnknownMetrics`, 404, with
    the closest prefixes it has); one holding only a ``total`` has no layers."""
    if relative_to not in (None, "baseline"):
        raise Invalid(f"relative_to must be 'baseline', got {relative_to!r}")
    if relative_to is not None and at is None:
        raise Invalid("relative_to needs at: the step of the profile")
    if baseline_end is not None and at is not None and baseline_end > at:
        raise Invalid(f"baseline_end ({baseline_end}) must not be after at ({at})")
    if not 1 <= points <= MAX_COLUMNS:
        raise Invalid(f"points must be between 1 and {MAX_COLUMNS}, got {points}")
    if start is not None and end is not None and end < start:
        raise Invalid(f"end ({end}) must not be below start ({start})")
    # A finished run's page asks for the same grid on every load: kept (`.kept`).
    question = ("layer_grid", prefix, start, end, points, at, relative_to, baseline_end)
    return kept(
        data_version(session, run.key),
        question,
        lambda: _grid(session, run, prefix, start, end, points, at, relative_to, baseline_end),
        _grid_bytes,
    )


def _grid(
    session: Session,
    run: Run,
    prefix: str,
    start: int | None,
    end: int | None,
    points: int,
    at: int | None,
    relative_to: str | None,
    baseline_end: int | None,
) -> LayerGrid:
    """`layer_grid`, read."""
    stem, layers, lineage, keys = _layer_series(session, run, prefix)
    span = across.extent(session, run.key, keys, lineage)
    if span is None:
        return LayerGrid(stem.rstrip("/"), layers, [], [[] for _ in layers], [], False, None)
    lo = start if start is not None else span[0]
    hi = end if end is not None else span[1]
    pixel = (hi - lo + 1) / points
    got = across.read(session, run.key, keys, lineage, lo, hi, pixel, "max")
    rows = got.series
    # One row with more steps than columns settles it without merging every row's steps.
    bucketed = not got.exact or any(len(row.steps) > points for row in rows)
    logged = np.empty(0, dtype=np.int64)
    if not bucketed:
        logged = np.unique(np.concatenate([row.steps for row in rows]))
        bucketed = len(logged) > points
    if bucketed:
        edges = bucket_edges(lo, hi, points)
        grid = np.vstack(
            [_column_max(row, narrow, edges) for row, narrow in zip(rows, got.narrow, strict=True)]
        )
        columns = edges[:-1]
    else:
        grid = np.vstack(
            [
                values_at(row.steps, _readable(row.values, narrow), logged)
                for row, narrow in zip(rows, got.narrow, strict=True)
            ]
        )
        columns = logged
    profile = None
    if at is not None:
        profile = _profile(session, run, keys, lineage, at, max(1, math.ceil(pixel)))
        if relative_to == "baseline":
            profile = _relative(session, run, keys, lineage, profile, baseline_end)
    return LayerGrid(
        stem.rstrip("/"),
        layers,
        columns.tolist(),
        [cells(row) for row in grid],
        cells(u_index(grid)),
        bucketed,
        profile,
    )


def layer_profile(
    session: Session,
    run: Run,
    prefix: str,
    *,
    at: int,
    radius: int,
    relative_to: str | None = None,
    baseline_end: int | None = None,
) -> LayerGrid:
    """``prefix``'s layers with their depth profile at ``at`` alone (no columns): each
    layer's value at its logged step nearest ``at`` within ``radius`` steps, as
    `layer_grid` gives it with ``at``, without reading a grid; no profile where the layers
    have no point at all. ``relative_to`` and ``baseline_end`` as for `layer_grid`: each
    layer over its own baseline before ``baseline_end`` (default ``at``)."""
    if radius < 0:
        raise Invalid(f"radius must not be negative, got {radius}")
    if relative_to not in (None, "baseline"):
        raise Invalid(f"relative_to must be 'baseline', got {relative_to!r}")
    if baseline_end is not None and baseline_end > at:
        raise Invalid(f"baseline_end ({baseline_end}) must not be after at ({at})")

    def read() -> LayerGrid:
        stem, layers, lineage, keys = _layer_series(session, run, prefix)
        profile = None
        if across.extent(session, run.key, keys, lineage) is not None:
            profile = _profile(session, run, keys, lineage, at, radius)
            if relative_to == "baseline":
                profile = _relative(session, run, keys, lineage, profile, baseline_end)
        return LayerGrid(stem.rstrip("/"), layers, [], [[] for _ in layers], [], False, profile)

    question = ("layer_profile", prefix, at, radius, relative_to, baseline_end)
    return kept(data_version(session, run.key), question, read, _grid_bytes)


def _grid_bytes(grid: LayerGrid) -> int:
    """About what a grid takes in memory: Python floats in lists, 32 bytes a cell."""
    return 4096 + 32 * (len(grid.layers) + 2) * (len(grid.steps) + 4)


def under_prefix(names: list[str], prefix: str) -> list[str]:
    """The ``names`` under ``prefix`` (``grad/norm`` or ``grad/norm/``); `UnknownMetrics`
    (404) naming the prefix, with the closest directories the names have, for none."""
    stem = prefix.rstrip("/") + "/"
    under = [name for name in names if name.startswith(stem)]
    if not under:
        suggestions = {prefix: closest_prefixes(prefix, names)}
        raise UnknownMetrics([prefix], suggestions, what="prefix")
    return under


def _layer_series(
    session: Session, run: Run, prefix: str
) -> tuple[str, list[str], Lineage, list[int]]:
    """``prefix`` as a stem (``grad/norm/``), its layers in depth order, the run's lineage
    and the layers' metric ids."""
    stem = prefix.rstrip("/") + "/"
    under = under_prefix(metric_names(session, run.key), prefix)
    # Layers, never their leaves: a layer's norm already holds its leaves' (the hierarchy
    # rule), and a row a leaf would count each layer twice in the U-index.
    parts = outermost(name[len(stem) :] for name in under if name[len(stem) :] != "total")
    if len(parts) > MAX_LAYERS:
        raise Invalid(
            f"{len(parts)} metrics sit under {stem!r}, more than the {MAX_LAYERS} a grid "
            "may have: name a longer prefix"
        )
    layers = depth_order(parts)
    lineage, ids = series_keys(session, run.key, [stem + part for part in layers])
    return stem, layers, lineage, [ids[stem + part] for part in layers]


def _profile(
    session: Session,
    run: Run,
    keys: list[int],
    lineage: Lineage,
    at: int,
    radius: int,
) -> Profile:
    """Each layer's value at the logged step nearest ``at`` within ``radius`` steps (a
    layer logged every few steps still has a profile between its steps)."""
    steps: list[int | None] = []
    values: list[float] = []
    # `across.read` keeps the range within int64: ``at ± radius`` may pass its ends.
    got = across.read(session, run.key, keys, lineage, at - radius, at + radius, 0.0, "max")
    for row, narrow in zip(got.series, got.narrow, strict=True):
        if not len(row.steps):
            steps.append(None)
            values.append(math.nan)
            continue
        nearest = _nearest(row.steps, at)
        steps.append(int(row.steps[nearest]))
        value = row.values[nearest : nearest + 1]
        if narrow is not None and narrow[nearest]:
            value = chunks.readable(value.astype(np.float32))
        values.append(float(value[0]))
    profile = np.array(values, dtype=np.float64)
    return Profile(at, steps, cells(profile), cells(u_index(profile[:, np.newaxis]))[0])


def _relative(
    session: Session,
    run: Run,
    keys: list[int],
    lineage: Lineage,
    profile: Profile,
    baseline_end: int | None,
) -> Profile:
    """``profile`` with each layer's value over its baseline (`layer_grid`); None where a
    layer has no baseline or a baseline of 0."""
    end = profile.step if baseline_end is None else baseline_end
    lo = max(_INT64.min, end - BASELINE_SPAN)
    got = across.read(session, run.key, keys, lineage, lo, end - 1, 0.0, "max")
    baselines: list[float] = []
    for row, narrow in zip(got.series, got.narrow, strict=True):
        values = _readable(row.values, narrow)
        baselines.append(level_before(values))
    base = np.array(baselines, dtype=np.float64)
    at = np.array([math.nan if v is None else v for v in profile.values], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(base != 0, at / base, math.nan)
    return replace(
        profile,
        values=cells(ratio),
        u_index=cells(u_index(ratio[:, np.newaxis]))[0],
        relative_to="baseline",
        baselines=cells(base),
    )


def _nearest(steps: StepArray, at: int) -> int:
    """Index of the ascending ``steps``' step nearest ``at``, the earlier of two as near.

    In Python integers: ``steps - at`` in int64 wraps around for an ``at`` far from them.
    """
    i = int(np.searchsorted(steps, min(max(at, _INT64.min), _INT64.max)))
    around = [j for j in (i - 1, i) if 0 <= j < len(steps)]
    return min(around, key=lambda j: abs(int(steps[j]) - at))


def _readable(values: FloatArray, narrow: npt.NDArray[np.bool_] | None) -> FloatArray:
    """``values`` with the float32 ones (``narrow``) in their shortest-decimal form."""
    if narrow is None or not narrow.any():
        return values
    out = values.copy()
    out[narrow] = chunks.readable(values[narrow].astype(np.float32))
    return out


def _column_max(row: Points, narrow: npt.NDArray[np.bool_] | None, edges: StepArray) -> FloatArray:
    """`bucket_max` of one row; a cell whose largest value is a float32 one gets that
    value's shortest-decimal form (converting only the winners, not every candidate)."""
    out = bucket_max(row.steps, row.values, edges)
    if narrow is None or not narrow.any():
        return out
    column = np.searchsorted(edges, row.steps, side="right") - 1
    inside = (column >= 0) & (column < len(out))
    won = np.zeros(len(row.steps), dtype=np.bool_)
    won[inside] = narrow[inside] & (row.values[inside] == out[column[inside]])
    cells = np.unique(column[won])
    out[cells] = chunks.readable(out[cells].astype(np.float32))
    return out


def cells(values: np.ndarray) -> list[float | None]:
    """Finite values as they are; no value (or a non-finite one) as None."""
    return [v if math.isfinite(v) else None for v in values.tolist()]
