"""What the runs list shows: :class:`RunsView`, which runs (a search and filters by tag,
state and config value), in which order, which page of them. Pure.

The view lives in the page's ``dcc.Store`` (id ``runs-view``) and in the URL, so that a
link reproduces it. Every parameter is optional, and one that is malformed is ignored:

==========  =====================================================================
``q``       a run's name contains it (in any case), or its id starts with it
            (at least 4 characters)
``tag``     repeated: the run carries every tag named
``state``   repeated: the run is in one of these states (``running``...)
``config``  repeated: every condition holds on the run's config
            (:mod:`~normwatch.dashboard.config_filter`: ``optimizer.lr>=3e-4``)
``sort``    a column, ``-`` in front for descending: ``name``, ``status``,
            ``last_step``, ``last_seen``, ``created`` (default ``-last_seen``), or a
            chosen column (``config:optimizer.lr``, ``min:train/loss``)
``page``    which page of `PAGE_SIZE` runs (of groups, when grouped), from 1
``col``     repeated: a chosen column, in order (:class:`~.runs_columns.Column`):
            ``last:train/loss``, ``min:…``, ``max:…``, ``config:optimizer.lr``
``group``   a config key: runs that share its value fold into one row
``open``    repeated: a group shown with its runs (its id, `~.runs_columns.group_id`)
==========  =====================================================================

>>> view = RunsView.from_query({"q": "lr", "config": "optimizer.lr>=3e-4", "sort": "oops"})
>>> view.to_url()
'?q=lr&config=optimizer.lr%3E%3D3e-4'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import urlencode

from normwatch.server.schemas import MAX_TAG, RunOut

from ..config_filter import ConfigCondition, ConfigFilterError, config_value, parse_conditions
from .runs_columns import MAX_COLUMNS, MAX_NAME, Column, Group, MetricValues, column_value, fold

__all__ = [
    "DEFAULT_SORT",
    "PAGE_SIZE",
    "SORTS",
    "STATES",
    "URL_SYNC_JS",
    "Listing",
    "RunsView",
    "sort_runs",
    "toggled_sort",
]

PAGE_SIZE = 50
"""Rows on one page of the table: a project of thousands of runs draws fast."""
SORTS = ("name", "status", "last_step", "last_seen", "created")
"""The columns the list sorts by, as ``sort=`` names them."""
DESCENDING_FIRST = frozenset({"last_step", "last_seen", "created"})
"""Columns whose first click sorts largest (newest) first."""
DEFAULT_SORT = "-last_seen"
STATES = ("running", "finished", "failed")
"""The states a run may have; the filter offers these and any other it finds."""
MAX_SEARCH = 256
MAX_VALUES = 64
"""Most tags, states or config conditions a view keeps."""

URL_SYNC_JS = """
function(view) {
    if (!view || typeof view.url !== "string") { return window.dash_clientside.no_update; }
    const target = window.location.pathname + view.url;
    if (target !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", target);
    }
    return window.dash_clientside.no_update;
}
"""
"""The browser side of :meth:`RunsView.from_query`: the address follows the view (without a
reload), so that it is always a link to what the list shows."""


class PageQuery(Protocol):
    """A URL's query as routing passes it: the last value of a name (``get``), and every
    value of a name (``every``, optional: a plain mapping gives the one value)."""

    def get(self, key: str, /) -> str | None: ...


# --- sorting --------------------------------------------------------------------------------


def sort_runs(
    runs: Iterable[RunOut], sort: str, values: MetricValues | None = None
) -> list[RunOut]:
    """``runs`` by ``sort`` (a column of `SORTS`, ``config:KEY``, or a metric column such
    as ``min:loss`` by its ``values``; ``-`` in front for descending); a run without a last
    step (without the key, without a value or a NaN) comes last either way, and runs that
    tie stay newest first (by creation, then id), so that the order holds still across
    refreshes.

    >>> from datetime import UTC, datetime
    >>> def run(name, step): return RunOut(id=name, project="p", name=name, status="running",
    ...     segment=1, config={}, tags=[], last_step=step, last_seen=datetime.now(UTC),
    ...     created_at=datetime(2025, 1, 1, tzinfo=UTC))
    >>> [r.name for r in sort_runs([run("a", 5), run("b", None), run("c", 9)], "-last_step")]
    ['c', 'a', 'b']
    """
    column = sort.removeprefix("-")
    descending = sort.startswith("-")
    ordered = sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)
    if column.startswith("config:"):
        return _by_config(ordered, column.removeprefix("config:"), descending)
    metric = Column.parse(column)
    if metric is not None and metric.metric:
        found = {r.id: column_value(r, metric, values or {}) for r in ordered}
        have = [r for r in ordered if found[r.id] is not None and not math.isnan(found[r.id])]
        never = [r for r in ordered if found[r.id] is None or math.isnan(found[r.id])]
        return sorted(have, key=lambda r: float(found[r.id]), reverse=descending) + never
    if column == "last_step":
        logged = [r for r in ordered if r.last_step is not None]
        never = [r for r in ordered if r.last_step is None]
        return sorted(logged, key=lambda r: r.last_step or 0, reverse=descending) + never
    keys: dict[str, Callable[[RunOut], Any]] = {
        "name": lambda r: (r.name.casefold(), r.name),
        "status": lambda r: r.status,
        "last_seen": lambda r: r.last_seen,
        "created": lambda r: r.created_at,
    }
    return sorted(ordered, key=keys.get(column, keys["last_seen"]), reverse=descending)


def _by_config(runs: list[RunOut], key: str, descending: bool) -> list[RunOut]:
    """``runs`` by their config's value at ``key``: numbers, then other values by their
    text; runs without the key last either way."""
    absent = config_value({}, "")
    numbers: list[tuple[float, RunOut]] = []
    texts: list[tuple[str, RunOut]] = []
    never: list[RunOut] = []
    for run in runs:
        value = config_value(run.config, key)
        if value is absent or value is None:
            never.append(run)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            numbers.append((float(value), run))
        else:
            texts.append((value if isinstance(value, str) else repr(value), run))
    numbers.sort(key=lambda pair: pair[0], reverse=descending)
    texts.sort(key=lambda pair: pair[0], reverse=descending)
    ranked = [r for _, r in numbers] + [r for _, r in texts]
    if descending:
        ranked = [r for _, r in texts] + [r for _, r in numbers]
    return ranked + never


def toggled_sort(current: str, column: str) -> str:
    """The sort after a click on ``column``'s header: the other direction when the list is
    sorted by it already, else its natural first direction (newest, largest or A first).

    >>> toggled_sort("-last_seen", "name"), toggled_sort("name", "name")
    ('name', '-name')
    """
    if current.removeprefix("-") == column:
        return column if current.startswith("-") else f"-{column}"
    return f"-{column}" if column in DESCENDING_FIRST else column


def valid_sort(value: object, columns: Sequence[Column] = ()) -> str | None:
    """``value`` if it names a column of `SORTS` or a chosen column of ``columns``."""
    if not isinstance(value, str):
        return None
    column = value.removeprefix("-")
    if column in SORTS or any(c.text == column for c in columns):
        return value
    return None


# --- the view ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """One page of the runs a view selects: ``rows`` of ``matched`` runs, out of ``total``."""

    rows: list[RunOut]
    matched: int
    total: int
    page: int
    pages: int
    groups: list[Group] | None = None
    """Grouped: the page's groups (``rows``: their runs), out of ``group_count``."""
    group_count: int = 0


@dataclass(frozen=True)
class RunsView:
    """The runs list's search, filters, sort and page; its chosen columns, the config key
    it groups by and the groups shown open."""

    search: str = ""
    tags: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    config: tuple[ConfigCondition, ...] = ()
    sort: str = DEFAULT_SORT
    page: int = 1
    columns: tuple[Column, ...] = ()
    group: str = ""
    opened: tuple[str, ...] = ()

    @classmethod
    def from_query(cls, query: PageQuery | Mapping[str, str]) -> RunsView:
        """The view a URL's query names; a malformed parameter is left out."""
        every = getattr(query, "every", None)

        def values(name: str) -> list[str]:
            if callable(every):
                return [v for v in every(name) if isinstance(v, str)]
            one = query.get(name)
            return [one] if isinstance(one, str) else []

        conditions: list[ConfigCondition] = []
        for text in values("config")[:MAX_VALUES]:
            try:
                conditions.extend(parse_conditions(text))
            except ConfigFilterError:
                continue
        columns = _columns(values("col"))
        group = _key(query.get("group"))
        return cls(
            search=_search(query.get("q")),
            tags=_words(values("tag"), MAX_TAG),
            states=_words(values("state"), 16),
            config=tuple(dict.fromkeys(conditions))[:MAX_VALUES],
            sort=valid_sort(query.get("sort"), columns) or DEFAULT_SORT,
            page=_page(query.get("page")),
            columns=columns,
            group=group,
            opened=_words(values("open"), MAX_NAME) if group else (),
        )

    @classmethod
    def from_store(cls, store: object) -> RunsView:
        """The view `to_store` wrote; anything malformed in it (a forged callback) is left
        out, as in a URL."""
        if not isinstance(store, Mapping):
            return cls()
        pairs: list[tuple[str, str]] = []
        for name in ("q", "sort", "page", "group"):
            value = store.get(name)
            if isinstance(value, str | int) and not isinstance(value, bool):
                pairs.append((name, str(value)))
        for name in ("tag", "state", "config", "col", "open"):
            items = store.get(name)
            if isinstance(items, list):
                pairs += [(name, v) for v in items[:MAX_VALUES] if isinstance(v, str)]
        return cls.from_query(_Pairs(pairs))

    def to_store(self) -> dict[str, Any]:
        return {
            "q": self.search,
            "tag": list(self.tags),
            "state": list(self.states),
            "config": [c.text for c in self.config],
            "sort": self.sort,
            "page": self.page,
            "col": [c.text for c in self.columns],
            "group": self.group,
            "open": list(self.opened),
            "url": self.to_url(),
        }

    def to_url(self) -> str:
        """The query string that reproduces the view (``""`` for the default one)."""
        pairs: list[tuple[str, str]] = []
        if self.search:
            pairs.append(("q", self.search))
        pairs += [("tag", t) for t in self.tags]
        pairs += [("state", s) for s in self.states]
        pairs += [("config", c.text) for c in self.config]
        if self.sort != DEFAULT_SORT:
            pairs.append(("sort", self.sort))
        if self.page > 1:
            pairs.append(("page", str(self.page)))
        pairs += [("col", c.text) for c in self.columns]
        if self.group:
            pairs.append(("group", self.group))
        pairs += [("open", g) for g in self.opened]
        return "?" + urlencode(pairs) if pairs else ""

    @property
    def config_text(self) -> str:
        """The conditions as the config field shows them."""
        return ", ".join(c.text for c in self.config)

    def matches(self, run: RunOut) -> bool:
        if self.search:
            needle = self.search.casefold()
            by_id = len(needle) >= 4 and run.id.casefold().startswith(needle)
            if needle not in run.name.casefold() and not by_id:
                return False
        if self.tags and not set(self.tags).issubset(run.tags):
            return False
        if self.states and run.status not in self.states:
            return False
        return all(c.holds(run.config) for c in self.config)

    @property
    def metric_sort(self) -> Column | None:
        """The metric column the view sorts by (None: another column)."""
        column = Column.parse(self.sort.removeprefix("-"))
        return column if column is not None and column.metric else None

    def select(self, runs: Sequence[RunOut], values: MetricValues | None = None) -> Listing:
        """The page of ``runs`` the view shows, sorted (by a metric column: by the matched
        runs' ``values``); the page past the last shows the last. Grouped, a page holds
        `PAGE_SIZE` groups, each with all its runs."""
        matched = sort_runs((r for r in runs if self.matches(r)), self.sort, values)
        if self.group:
            groups = fold(matched, self.group)
            pages = max(1, math.ceil(len(groups) / PAGE_SIZE))
            page = min(self.page, pages)
            shown = groups[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
            rows = [run for g in shown for run in g.runs]
            return Listing(rows, len(matched), len(runs), page, pages, shown, len(groups))
        pages = max(1, math.ceil(len(matched) / PAGE_SIZE))
        page = min(self.page, pages)
        rows = matched[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        return Listing(rows, len(matched), len(runs), page, pages)

    def with_column(self, column: Column | None) -> RunsView:
        """The view with ``column`` added at the end (one already chosen, or past
        `MAX_COLUMNS`, leaves it as it is)."""
        if column is None or column in self.columns or len(self.columns) >= MAX_COLUMNS:
            return self
        return replace(self, columns=(*self.columns, column))

    def without_column(self, text: str) -> RunsView:
        """The view without the column ``text`` names; a sort by it goes back to the default."""
        columns = tuple(c for c in self.columns if c.text != text)
        sort = self.sort if self.sort.removeprefix("-") != text else DEFAULT_SORT
        return replace(self, columns=columns, sort=sort)

    def grouped_by(self, key: object) -> RunsView:
        """The view grouped by the config ``key`` (none: not grouped), from its first page,
        every group closed."""
        group = _key(key)
        if group == self.group:
            return self
        return replace(self, group=group, opened=(), page=1)

    def toggled(self, group_id: str) -> RunsView:
        """The view with the group ``group_id`` opened, or closed if it was open."""
        if group_id in self.opened:
            return replace(self, opened=tuple(g for g in self.opened if g != group_id))
        if len(self.opened) >= MAX_VALUES or len(group_id) > MAX_NAME:
            return self
        return replace(self, opened=(*self.opened, group_id))

    def with_controls(
        self,
        *,
        search: object,
        tags: object,
        states: object,
        config: tuple[ConfigCondition, ...] | None,
        sort: object,
    ) -> RunsView:
        """The view with the controls' values (a malformed one keeps what the view had;
        ``config`` None: the field cannot be read); back to the first page when what is
        listed changed."""
        new = replace(
            self,
            search=_search(search) if isinstance(search, str | None) else self.search,
            tags=_words(tags, MAX_TAG) if isinstance(tags, list | None) else self.tags,
            states=_words(states, 16) if isinstance(states, list | None) else self.states,
            config=self.config if config is None else config,
            sort=valid_sort(sort, self.columns) or self.sort,
        )
        return self if new == self else replace(new, page=1)


class _Pairs:
    """Query pairs as routing's ``Query`` offers them."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def get(self, key: str, /) -> str | None:
        found = [v for k, v in self._pairs if k == key]
        return found[-1] if found else None

    def every(self, name: str, /) -> list[str]:
        return [v for k, v in self._pairs if k == name]


def _search(value: object) -> str:
    return value.strip()[:MAX_SEARCH] if isinstance(value, str) else ""


def _words(values: object, longest: int) -> tuple[str, ...]:
    """Each distinct non-empty string of ``values`` once, in order, none longer than
    ``longest``, at most `MAX_VALUES` of them."""
    if not isinstance(values, list):
        return ()
    kept = (v for v in values if isinstance(v, str) and 0 < len(v) <= longest)
    return tuple(dict.fromkeys(kept))[:MAX_VALUES]


def _columns(texts: list[str]) -> tuple[Column, ...]:
    """The columns ``texts`` name, each once, in order, at most `MAX_COLUMNS`."""
    found = (Column.parse(t) for t in texts[: 4 * MAX_COLUMNS])
    return tuple(dict.fromkeys(c for c in found if c is not None))[:MAX_COLUMNS]


def _key(value: object) -> str:
    """A config key to group by (``""``: none)."""
    if not isinstance(value, str) or len(value) > MAX_NAME:
        return ""
    key = value.strip()
    return "" if any(ord(c) < 32 for c in key) else key


def _page(value: object) -> int:
    if isinstance(value, str) and value.isdigit() and len(value) <= 6:
        return max(1, int(value))
    return 1
