"""The runs list's chosen columns and groups: a metric's last value, minimum or maximum over
the run, or a config key's value (:class:`Column`); runs that share a config key's value
folded into one group (:func:`fold`), whose metric columns show the mean of its runs and
their range. Pure: values come in as the server read them.

Every number in the table reads the same way (:func:`number_text`): four significant
digits, NaN and infinities by name.

>>> Column.parse("min:train/loss").title, Column.parse("config:optimizer.lr").title
('train/loss (min)', 'optimizer.lr')
>>> number_text(3e-4), number_text(12345.678), number_text(float("nan")), number_text(48)
('0.0003', '1.235e+04', 'NaN', '48')
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from normwatch.server.schemas import RunOut

from ..config_filter import config_value

__all__ = [
    "KINDS",
    "MAX_COLUMNS",
    "STATS",
    "Column",
    "Group",
    "MetricValues",
    "cell_text",
    "column_value",
    "config_keys",
    "fold",
    "group_cell",
    "group_id",
    "number_text",
    "value_text",
]

STATS = ("last", "min", "max")
"""What a metric column shows of the metric over the run."""
KINDS = (*STATS, "config")
MAX_COLUMNS = 16
"""Chosen columns a view keeps at most: each metric column is part of a page's read."""
MAX_KEYS = 500
"""Config keys offered at most."""
MAX_NAME = 512
"""The longest metric name or config key a column names (a metric name's own bound)."""
DIGITS = 4
"""Significant digits of every number in the table."""
MISSING = "—"
NONE_GROUP = "~"
"""The id of the group of runs without the key (no JSON text starts with ``~``)."""


class Stats(Protocol):
    """A metric's values over one run, as `storage.run_stats.SeriesStats` holds them."""

    @property
    def last(self) -> float | None: ...
    @property
    def min(self) -> float | None: ...
    @property
    def max(self) -> float | None: ...


MetricValues = Mapping[str, Mapping[str, Stats]]
"""By run id, then metric name: what the server read for a page's runs."""


@dataclass(frozen=True)
class Column:
    """A chosen column: ``kind`` one of `KINDS`, ``name`` a metric's or a config key."""

    kind: str
    name: str

    @classmethod
    def parse(cls, text: object) -> Column | None:
        """The column ``kind:name`` names (as the URL's ``col`` has it); None if malformed."""
        if not isinstance(text, str):
            return None
        kind, sep, name = text.partition(":")
        if not sep or kind not in KINDS or not name or len(name) > MAX_NAME:
            return None
        if any(ord(c) < 32 for c in name):
            return None
        return cls(kind, name)

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def metric(self) -> bool:
        return self.kind in STATS

    @property
    def title(self) -> str:
        return f"{self.name} ({self.kind})" if self.metric else self.name


def number_text(value: float | int) -> str:
    """A number as the table shows it: an integer whole, any other with `DIGITS`
    significant digits; NaN, inf and -inf by name."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{DIGITS}g}"


def value_text(value: Any) -> str:
    """A config value as a cell shows it: numbers by `number_text`, ``true``/``false``/
    ``null`` as JSON writes them, text as it is, anything else as compact JSON.

    >>> value_text(True), value_text(None), value_text("adamw"), value_text([1, 2])
    ('true', 'null', 'adamw', '[1,2]')
    """
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return number_text(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def config_keys(runs: Iterable[RunOut]) -> list[str]:
    """The dotted keys of every leaf value in the runs' configs (a list counts as one
    value), sorted, at most `MAX_KEYS`.

    >>> from datetime import UTC, datetime
    >>> run = RunOut(id="a", project="p", name="a", status="running", segment=1,
    ...     config={"optimizer": {"lr": 1e-3, "betas": [0.9, 0.95]}, "seed": 1}, tags=[],
    ...     last_step=None, last_seen=datetime.now(UTC), created_at=datetime.now(UTC))
    >>> config_keys([run])
    ['optimizer.betas', 'optimizer.lr', 'seed']
    """
    found: set[str] = set()

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, Mapping) and value:
            for key, item in value.items():
                walk(item, f"{prefix}.{key}" if prefix else str(key))
        elif prefix and len(prefix) <= MAX_NAME:
            found.add(prefix)

    for run in runs:
        walk(run.config, "")
        if len(found) >= 4 * MAX_KEYS:
            break
    return sorted(found)[:MAX_KEYS]


def _metric(values: MetricValues, run_id: str, column: Column) -> float | None:
    stats = values.get(run_id, {}).get(column.name)
    if stats is None:
        return None
    found: float | None = getattr(stats, column.kind)
    return found


def column_value(run: RunOut, column: Column, values: MetricValues) -> Any:
    """The run's value in ``column``: a metric's statistic (None: none), or the config
    value (`config_filter.config_value`'s marker where it has none)."""
    if column.metric:
        return _metric(values, run.id, column)
    return config_value(run.config, column.name)


def cell_text(value: Any, column: Column) -> str:
    """``column_value`` as its cell shows it."""
    if value is None and column.metric:
        return MISSING
    if not column.metric and _missing(value):
        return MISSING
    return value_text(value)


_ABSENT = config_value({}, "")
"""`config_value`'s marker of a key a config does not have."""


def _missing(value: Any) -> bool:
    return value is _ABSENT


# --- groups ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """Runs whose config holds the same value at the grouping key."""

    id: str
    """The value as canonical JSON (`group_id`), `NONE_GROUP` for runs without the key."""
    label: str
    runs: list[RunOut]


def group_id(value: Any) -> str:
    """The id of the group of ``value``: its canonical JSON, a float that is a whole number
    written as the integer (``48.0`` and ``48`` fold together, as the config filter
    compares them).

    >>> group_id(3e-4), group_id(48.0), group_id("adamw"), group_id({"b": 1, "a": 2})
    ('0.0003', '48', '"adamw"', '{"a":2,"b":1}')
    """
    if _missing(value):
        return NONE_GROUP
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _order(group: Group) -> tuple[int, float, str]:
    """Numbers first, ascending; then other values by their text; runs without the key last."""
    if group.id == NONE_GROUP:
        return (2, 0.0, "")
    value = json.loads(group.id)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), group.id)
    return (1, 0.0, group.id)


def fold(runs: Sequence[RunOut], key: str) -> list[Group]:
    """``runs`` in groups by their config's value at ``key``, in the order of `_order`; each
    group's runs in the order given."""
    members: dict[str, list[RunOut]] = {}
    labels: dict[str, str] = {}
    for run in runs:
        value = config_value(run.config, key)
        gid = group_id(value)
        members.setdefault(gid, []).append(run)
        labels.setdefault(gid, "(no value)" if gid == NONE_GROUP else value_text(value))
    groups = [Group(gid, labels[gid], found) for gid, found in members.items()]
    return sorted(groups, key=_order)


def group_cell(group: Group, column: Column, values: MetricValues) -> str:
    """What a group's row shows in ``column``: for a metric, the mean of its runs' values
    and their range, ``mean (min–max)`` (NaN and runs without a value left out, NaN where
    every value is NaN; the range left out where it is one value); for a config key, the
    value its runs share, else how many values they have."""
    if column.metric:
        found = [v for run in group.runs if (v := _metric(values, run.id, column)) is not None]
        numbers = [v for v in found if not math.isnan(v)]
        if not numbers:
            return number_text(math.nan) if found else MISSING
        mean = _mean(numbers)
        low, high = min(numbers), max(numbers)
        if low == high:
            return number_text(mean)
        return f"{number_text(mean)} ({number_text(low)}–{number_text(high)})"
    texts = {cell_text(column_value(run, column, values), column) for run in group.runs}
    return texts.pop() if len(texts) == 1 else f"{len(texts)} values"


def _mean(numbers: list[float]) -> float:
    """The mean, inf or -inf where infinities of one sign are among them (NaN for both)."""
    if any(math.isinf(v) for v in numbers):
        return sum(numbers) / len(numbers)
    return math.fsum(numbers) / len(numbers)
