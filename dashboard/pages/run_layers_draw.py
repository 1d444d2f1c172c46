"""The drawing of the run page's layers section (:mod:`.run_layers`): the heatmap of one
family's layers over the view's steps with the U-index under it, and the depth profile at a
pinned step, each with the text that says what it shows."""

from __future__ import annotations

import math
from typing import Any, Protocol

from normwatch.server.auth import Principal
from normwatch.server.services.layers import LayerGrid

from ..figures import Figure, empty_figure
from ..layers import (
    LayerHeatmap,
    depth_profile_figure,
    families_with_layers,
    layer_heatmap_figure,
    layer_rows,
    rows_u_index,
    small_empty,
    u_index_figure,
)
from ..refusals import Refusal, RunNotFound, said
from .run_view import RunView

NO_LAYERS = (
    "No per-layer metrics yet: log names like grad/norm/layers.{i} "
    "(normwatch.client.jax.stability_metrics does)."
)
HEATMAP_COLUMNS = 600
"""Columns of the heatmap: about its width in pixels (each a bucket's largest value)."""

PROFILE_RADIUS = 1000
"""A pinned step's profile takes each layer's logged step nearest it within this many steps
(per-layer norms are often logged every few steps)."""

DrawnDepth = tuple[Any, str, list[dict[str, str]], str | None]
"""The depth chart, its text, the family picker's options and its value."""
DrawnGrid = tuple[Figure, Figure, str]
"""The heatmap, the U-index chart and the text under them."""


class LayerReads(Protocol):
    """What the section reads, each for the viewer (`RunNotFound` outside its project)."""

    def metric_names(self, who: Principal, run_id: str) -> list[str]: ...

    def layer_grid(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
        at: int | None = None,
    ) -> LayerGrid: ...

    def layer_profile(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        at: int | None,
        radius: int,
        relative: bool = False,
        baseline_end: int | None = None,
    ) -> LayerGrid | None: ...


def family_options(families: list[str]) -> list[dict[str, str]]:
    return [{"label": f, "value": f} for f in families]


# --- the pinned step ----------------------------------------------------------------------


def _picked(family: object, families: list[str]) -> str | None:
    if isinstance(family, str) and family in families:
        return family
    return families[0] if families else None


def grid_text(grid: LayerGrid, rows: int) -> str:
    """'50 layers × 600 columns, steps 0–999,999; each cell the largest value in its ~1,667
    steps' (or 'at its step' when the range holds no more logged steps than columns)."""
    if not grid.steps:
        return ""
    span = f"steps {grid.steps[0]:,}–{grid.steps[-1]:,}"
    shape = f"{rows} layers × {len(grid.steps):,} columns, {span}"
    if not grid.bucketed:
        return f"{shape}; each cell the value logged at its step"
    width = (grid.steps[-1] - grid.steps[0]) / max(1, len(grid.steps) - 1)
    return f"{shape}; each cell the largest value in its ~{width:,.0f} steps"


def draw_grid(
    data: LayerReads, who: Principal, view: RunView | None, family: object, pinned: int | None
) -> DrawnGrid:
    """The heatmap of the picked ``family`` over the view's steps, the U-index under it, and
    the text that says what a cell is. Rows that lie inside another row (a leaf beside its
    layer) are left out, and the U-index is then taken over the rows drawn."""
    empty = small_empty(NO_LAYERS, 320), small_empty("", 210), ""
    if view is None:
        return empty
    try:
        families = families_with_layers(data.metric_names(who, view.run))
        picked = _picked(family, families)
        if picked is None:
            return empty
        grid = data.layer_grid(
            who, view.run, picked, start=view.start, end=view.end, points=HEATMAP_COLUMNS
        )
    except RunNotFound:
        return empty
    except Refusal as exc:
        return small_empty(said(exc), 320), small_empty("", 210), ""
    keep = layer_rows(grid.layers)
    values = [grid.values[i] for i in keep]
    u_index = grid.u_index if len(keep) == len(grid.layers) else rows_u_index(values)
    heatmap = LayerHeatmap(
        family=picked,
        layers=[grid.layers[i] for i in keep],
        steps=grid.steps,
        values=values,
        bucketed=grid.bucketed,
        x_range=view.x_range,
        pinned=pinned,
    )
    if not grid.steps:
        return small_empty(f"No {picked} values in these steps.", 320), small_empty("", 210), ""
    chart = u_index_figure(
        grid.steps,
        u_index,
        x_range=view.x_range,
        pinned=pinned,
        uirevision=f"{picked}|{view.x_range}",
    )
    return layer_heatmap_figure(heatmap), chart, grid_text(grid, len(keep))


# --- the depth profile --------------------------------------------------------------------


def no_layers(options: list[dict[str, str]]) -> DrawnDepth:
    figure: Figure = empty_figure(NO_LAYERS)
    return figure, "", options, None


def profile_text(profile_u: float | None, at: int, steps: list[int | None]) -> str:
    """'ends / middle: 4.3×', and which steps the values were logged at when not all at
    ``at``.

    >>> profile_text(4.29, 1208, [1200, 1210])
    'ends / middle: 4.3× · values logged at steps 1,200–1,210'
    """
    logged = sorted({s for s in steps if s is not None})
    parts = [] if profile_u is None else [f"ends / middle: {profile_u:.1f}×"]
    if not logged:
        parts.append(f"no values logged near step {at:,}")
    elif logged != [at]:
        where = f"{logged[0]:,}" if len(logged) == 1 else f"{logged[0]:,}–{logged[-1]:,}"
        parts.append(f"values logged at step{'s' if len(logged) > 1 else ''} {where}")
    return " · ".join(parts)


def _baseline_end(since: int | None, step: int) -> int:
    """Where the baseline of a profile at ``step`` ends: ``since`` when it is no later."""
    return since if since is not None and since <= step else step


def draw_depth(
    data: LayerReads,
    who: Principal,
    view: RunView | None,
    family: object,
    log: object,
    pinned: int | None = None,
    since: int | None = None,
) -> DrawnDepth:
    """The depth profile of the view's run for the picked ``family`` (the first family with
    layers when it has none of that name) at the ``pinned`` step, else the latest, with the
    picker's options and value. ``log`` is the profile's toggles: ``"log"`` a log axis,
    ``"baseline"`` each layer over its own baseline, the median of its values before step
    ``since`` (a spike's start; default the profile's step), so that the layers' rises at a
    spike compare whatever their sizes."""
    flags = log if isinstance(log, list) else []
    relative = "baseline" in flags
    if view is None:
        return no_layers([])
    try:
        families = families_with_layers(data.metric_names(who, view.run))
        picked = _picked(family, families)
        if picked is None:
            return no_layers(family_options(families))
        grid = data.layer_profile(
            who,
            view.run,
            picked,
            at=pinned,
            radius=PROFILE_RADIUS,
            relative=relative,
            baseline_end=since if relative else None,
        )
    except RunNotFound:  # the view names no run of the viewer's project
        return no_layers([])
    except Refusal as exc:
        figure: Figure = empty_figure(said(exc))
        return figure, "", family_options(families), picked
    if grid is None or grid.profile is None:
        return no_layers(family_options(families))
    keep = layer_rows(grid.layers)
    profile = grid.profile
    values = [profile.values[i] for i in keep]
    u_index = (
        profile.u_index
        if len(keep) == len(grid.layers)
        else rows_u_index([[v] for v in values])[0]
        if values
        else None
    )
    fig = depth_profile_figure(
        [grid.layers[i] for i in keep],
        [math.nan if v is None else v for v in values],
        family=picked,
        step=profile.step,
        log_y="log" in flags,
        baseline_end=_baseline_end(since, profile.step) if relative else None,
    )
    info = profile_text(u_index, profile.step, [profile.steps[i] for i in keep])
    return fig, info, family_options(families), picked
