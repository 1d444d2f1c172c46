"""The run page's metric panels: which panels a run has, in which groups, in which order,
and how pinning, hiding and moving change a project's layout. Pure.

A panel is named by its key: a metric's name as logged, or a derived-series expression the
project added (``share(grad/norm/lm_head*, grad/norm/total)``). Panels are grouped by name
prefix (`PREFIX_GROUPS` in that order, then any other first path component, alphabetically,
then ``other``); pinned panels form a group of their own, drawn first, and expressions one
after it. Within a group, panels the layout's ``order`` names come first, in that order,
then the rest in natural order (``layers.2`` before ``layers.10``). The layout itself is
`normwatch.server.schemas.workspace.WorkspaceLayout`, the API's bounded model: a layout
that comes back from the browser is checked by the same rules as one sent to the API.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from normwatch.server.analytics.derived import is_derived
from normwatch.server.schemas.workspace import WorkspaceLayout

__all__ = [
    "EXPRESSIONS",
    "OTHER",
    "PAGE",
    "PINNED",
    "PREFIX_GROUPS",
    "Group",
    "Layout",
    "arrange",
    "group_of",
    "layout_of",
    "moved",
    "natural_key",
    "page_of",
    "paged",
    "pinned",
    "with_expression",
    "with_folded",
    "with_hidden",
    "without_expression",
]

Layout = WorkspaceLayout
PREFIX_GROUPS = ("train/", "grad/norm/", "params/norm/", "updates/", "optim/")
"""The groups of the product's own names, in the order they are shown."""
PINNED = "pinned"
PAGE = 12
"""Panels a group shows before its "show more": a page's components stay few whatever
the run logged (300 panels in full were 15,000 elements the browser re-rendered on
every callback)."""
EXPRESSIONS = "expressions"
OTHER = "other"
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Group:
    """One group of panels as shown: its ``name`` and its panels' ``keys`` in order."""

    name: str
    keys: tuple[str, ...]


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that puts numbers in a name in numeric order.

    >>> sorted(["layers.10.w", "layers.2.w", "b"], key=natural_key)
    ['b', 'layers.2.w', 'layers.10.w']
    """
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name) if part
    )


def group_of(key: str) -> str:
    """The group of a panel: its prefix of `PREFIX_GROUPS` (without the last ``/``),
    `EXPRESSIONS` for an expression, else its first path component, else `OTHER`.

    >>> [group_of(k) for k in ("train/loss", "grad/norm/total", "grad/clip", "lr")]
    ['train', 'grad/norm', 'grad', 'other']
    >>> group_of("ratio(grad/norm/total, params/norm/total)")
    'expressions'
    """
    if is_derived(key):
        return EXPRESSIONS
    for prefix in PREFIX_GROUPS:
        if key.startswith(prefix):
            return prefix[:-1]
    first, slash, _ = key.partition("/")
    return first if slash and first else OTHER


def _group_rank(name: str) -> tuple[int, str]:
    fixed = [PINNED, EXPRESSIONS, *(p[:-1] for p in PREFIX_GROUPS)]
    if name in fixed:
        return fixed.index(name), ""
    return (len(fixed) + 1, "") if name == OTHER else (len(fixed), name)


def arrange(names: Sequence[str], layout: Layout) -> tuple[list[Group], list[str]]:
    """The groups of panels shown for a run that logged ``names``, and the hidden panels.

    The panels are the run's names and the layout's expressions; the pinned group holds
    the pinned ones that are among them (in pin order), hidden ones are in no group, and
    an empty group is not shown.

    >>> layout = Layout(pinned=["train/loss"], hidden=["optim/lr"], order=["grad/norm/b"])
    >>> groups, hidden = arrange(["grad/norm/a", "grad/norm/b", "train/loss", "optim/lr"], layout)
    >>> [(g.name, g.keys) for g in groups], hidden
    ([('pinned', ('train/loss',)), ('grad/norm', ('grad/norm/b', 'grad/norm/a'))], ['optim/lr'])
    """
    panels = list(dict.fromkeys([*names, *layout.expressions]))
    present = set(panels)
    hidden = [k for k in layout.hidden if k in present]
    shown = [k for k in panels if k not in set(hidden)]
    pins = [k for k in layout.pinned if k in present and k not in set(hidden)]
    placed = {k: i for i, k in enumerate(layout.order)}
    by_group: dict[str, list[str]] = {}
    for key in shown:
        if key not in pins:
            by_group.setdefault(group_of(key), []).append(key)
    groups = [Group(PINNED, tuple(pins))] if pins else []
    for name in sorted(by_group, key=_group_rank):
        keys = sorted(
            by_group[name],
            key=lambda k: (0, placed[k], ()) if k in placed else (1, 0, natural_key(k)),
        )
        groups.append(Group(name, tuple(keys)))
    return groups, hidden


def layout_of(value: object) -> Layout:
    """The layout a store or the API holds; the empty layout for anything the API would
    refuse (a store comes back from the browser)."""
    try:
        return Layout.model_validate(value if isinstance(value, dict) else {})
    except ValidationError:
        return Layout()


def pinned(layout: Layout, key: str, pin: bool) -> Layout:
    """``layout`` with ``key`` pinned last (``pin``) or unpinned; a pinned panel is shown.

    >>> pinned(Layout(pinned=["a"], hidden=["b"]), "b", True).pinned
    ['a', 'b']
    """
    pins = [k for k in layout.pinned if k != key] + ([key] if pin else [])
    hidden = [k for k in layout.hidden if k != key]
    return layout.model_copy(update={"pinned": pins, "hidden": hidden})


def with_hidden(layout: Layout, key: str, hide: bool) -> Layout:
    """``layout`` with ``key`` hidden (and unpinned) or shown again."""
    hidden = [k for k in layout.hidden if k != key] + ([key] if hide else [])
    pins = [k for k in layout.pinned if k != key] if hide else list(layout.pinned)
    return layout.model_copy(update={"pinned": pins, "hidden": hidden})


def moved(layout: Layout, groups: Sequence[Group], key: str, by: int) -> Layout:
    """``layout`` with ``key`` moved ``by`` places (-1 up, +1 down) within its group as
    shown (``groups``, from `arrange`); past either end it stays. In the pinned group the
    pin order changes; elsewhere the group's whole order is written into ``order`` (its
    other keys there are dropped), so that the move holds whatever the group's defaults.

    >>> groups, _ = arrange(["m/a", "m/b", "m/c"], Layout())
    >>> moved(Layout(), groups, "m/c", -1).order
    ['m/a', 'm/c', 'm/b']
    """
    group = next((g for g in groups if key in g.keys), None)
    if group is None:
        return layout
    keys = list(group.keys)
    at = keys.index(key)
    to = at + by
    if not 0 <= to < len(keys):
        return layout
    keys[at], keys[to] = keys[to], keys[at]
    if group.name == PINNED:
        return layout.model_copy(update={"pinned": keys})
    rest = [k for k in layout.order if k not in set(keys)]
    return layout.model_copy(update={"order": rest + keys})


def with_expression(layout: Layout, expression: str) -> Layout:
    """``layout`` with the expression panel ``expression`` added (once), checked as the
    API checks it: `pydantic.ValidationError` says what is wrong."""
    if expression in layout.expressions:
        return layout
    return Layout.model_validate(
        {**layout.model_dump(), "expressions": [*layout.expressions, expression]}
    )


def with_folded(layout: Layout, group: str) -> Layout:
    """``layout`` with ``group`` folded if it was open, open if it was folded.

    >>> with_folded(with_folded(Layout(), "train"), "optim").collapsed
    ['train', 'optim']
    >>> with_folded(Layout(collapsed=["train"]), "train").collapsed
    []
    """
    if group in layout.collapsed:
        return layout.model_copy(update={"collapsed": [g for g in layout.collapsed if g != group]})
    return layout.model_copy(update={"collapsed": [*layout.collapsed, group]})


def paged(group: Group, pages: object) -> tuple[str, ...]:
    """The panels of ``group`` shown: `PAGE` for each page ``pages`` (the page's store of
    pages shown a group, ``{"grad/norm": 2}``) says, one page by default.

    >>> paged(Group("g", tuple("abcdefghijklmnop")), {"g": 1})
    ('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l')
    >>> len(paged(Group("g", tuple("abcdefghijklmnop")), {"g": 2}))
    16
    """
    return group.keys[: PAGE * page_of(pages, group.name)]


def page_of(pages: object, group: str) -> int:
    """The pages of ``group`` shown, from the page's store (1 for anything else)."""
    count = pages.get(group) if isinstance(pages, dict) else None
    ok = isinstance(count, int) and not isinstance(count, bool) and count >= 1
    return min(count, 1000) if ok and isinstance(count, int) else 1


def without_expression(layout: Layout, expression: str) -> Layout:
    """``layout`` without the expression panel ``expression``, in no list any more.

    >>> added = Layout(expressions=["ratio(a, b)"], pinned=["ratio(a, b)"])
    >>> without_expression(added, "ratio(a, b)")
    WorkspaceLayout(pinned=[], hidden=[], order=[], expressions=[], collapsed=[])
    """
    return layout.model_copy(
        update={
            name: [k for k in getattr(layout, name) if k != expression]
            for name in ("pinned", "hidden", "order", "expressions")
        }
    )
