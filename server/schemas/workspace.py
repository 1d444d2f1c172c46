"""Bodies of the workspace API: the layout of a project's run-page panels, bounded.

A layout names panels by their key: a metric's name as logged, or a derived-series
expression (``share(grad/norm/lm_head*, grad/norm/total)``) for a panel that draws one. It
says which panels are pinned (drawn first, in this order), which are hidden, the order of
the others (`order`: panels it does not name follow in their group's own order), the
expression panels added, and the groups shown folded. Every list is bounded, keys are
plain text of at most `MAX_KEY` characters, each list names a key once, and the layout's
keys together are at most `MAX_LAYOUT_CHARS` characters: a layout past any bound, or an
expression that does not parse, is a 422 that says which.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from ..analytics.derived import ExpressionError, is_derived, parse
from . import plain_text

MAX_KEY = 512
"""The longest panel key: a metric name or expression (the series API's bound)."""
MAX_PANELS = 1000
"""The most keys in `order` or `hidden`."""
MAX_PINNED = 100
MAX_EXPRESSIONS = 50
MAX_GROUPS = 100
MAX_LAYOUT_CHARS = 64 * 1024
"""The layout's keys together, at most: what a row a project may hold."""

PanelKey = Annotated[str, AfterValidator(plain_text), Field(min_length=1, max_length=MAX_KEY)]
GroupName = Annotated[str, AfterValidator(plain_text), Field(min_length=1, max_length=128)]


def _expression(text: str) -> str:
    """``text`` if it is a derived-series expression that parses."""
    if not is_derived(text):
        raise ValueError(f"{text!r} is a metric name, not an expression such as ratio(a, b)")
    try:
        parse(text)
    except ExpressionError as exc:
        raise ValueError(str(exc)) from None
    return text


class WorkspaceLayout(BaseModel):
    """The layout of a project's run-page panels, replaced whole."""

    model_config = ConfigDict(extra="forbid")

    pinned: list[PanelKey] = Field(
        default_factory=list, max_length=MAX_PINNED, description="Panels drawn first, in order."
    )
    hidden: list[PanelKey] = Field(
        default_factory=list, max_length=MAX_PANELS, description="Panels not drawn."
    )
    order: list[PanelKey] = Field(
        default_factory=list,
        max_length=MAX_PANELS,
        description="Panels in the order placed; a panel not named keeps its group's order.",
    )
    expressions: list[Annotated[PanelKey, AfterValidator(_expression)]] = Field(
        default_factory=list,
        max_length=MAX_EXPRESSIONS,
        description="Expression panels added, e.g. `share(grad/norm/lm_head*, grad/norm/total)`.",
    )
    collapsed: list[GroupName] = Field(
        default_factory=list, max_length=MAX_GROUPS, description="Groups shown folded."
    )

    @model_validator(mode="after")
    def _bounded(self) -> WorkspaceLayout:
        lists = {
            "pinned": self.pinned,
            "hidden": self.hidden,
            "order": self.order,
            "expressions": self.expressions,
            "collapsed": self.collapsed,
        }
        for name, keys in lists.items():
            seen: set[str] = set()
            for key in keys:
                if key in seen:
                    raise ValueError(f"{name} names {key!r} twice")
                seen.add(key)
        size = sum(len(k) for keys in lists.values() for k in keys)
        if size > MAX_LAYOUT_CHARS:
            raise ValueError(
                f"the layout's keys are {size:,} characters, at most {MAX_LAYOUT_CHARS:,}"
            )
        return self


class WorkspaceOut(BaseModel):
    project: str
    layout: WorkspaceLayout
    revision: int
    """0 while the project never saved a layout; grows with every save."""
    updated_by: str | None = None
    updated_at: datetime | None = None
