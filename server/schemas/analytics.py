"""Response bodies of the analytics endpoints (see docs/analytics.md)."""

from __future__ import annotations

from pydantic import BaseModel


class LayerProfileOut(BaseModel):
    step: int
    """The pinned step."""
    steps: list[int | None]
    """Per layer, the logged step nearest the pinned one (None: none within a column)."""
    values: list[float | None]
    u_index: float | None


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
