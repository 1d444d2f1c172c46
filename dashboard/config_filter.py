"""Conditions on a run's config, as the runs list's filter writes them:
``optimizer.lr>=3e-4``, ``model.qk_norm=true``, ``note="a, b"``. Pure.

A condition is ``<dotted key><op><value>`` with op one of ``= == != < <= > >=``; a field
holds several, separated by commas (a comma inside a ``"quoted"`` value is part of it), all
of which must hold. `ConfigFilterError` says why a condition cannot be read, and how to
write it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

__all__ = [
    "MAX_CONDITIONS",
    "ConfigCondition",
    "ConfigFilterError",
    "config_value",
    "parse_condition",
    "parse_conditions",
]

MAX_CONDITIONS = 64
"""Most conditions one field holds."""
MAX_CONDITION = 512
"""Most characters of one condition."""
OPS = ("==", "!=", "<=", ">=", "=", "<", ">")
"""Longest first, so that ``<=`` is never read as ``<`` before a value starting ``=``."""
_CONDITION = re.compile(
    r"^(?P<key>[^=<>!]+?)\s*(?P<op>"
    + "|".join(re.escape(op) for op in OPS)
    + r")\s*(?P<value>.*)$",
    re.DOTALL,
)
_MISSING = object()


class ConfigFilterError(ValueError):
    """A config condition that cannot be read; the message says why and how to write it."""


@dataclass(frozen=True)
class ConfigCondition:
    """One condition on a run's config: ``key`` (dotted, ``optimizer.lr``), ``op`` and the
    value as written. ``=`` compares numbers as numbers (``3e-4`` equals ``0.0003``),
    ``true``/``false``/``null`` with JSON's, anything else as text (a ``"quoted"`` value
    as exactly that text); ``<``, ``<=``, ``>``, ``>=`` compare numbers only. A run
    without the key satisfies only ``!=``."""

    key: str
    op: Literal["=", "!=", "<", "<=", ">", ">="]
    value: str

    @property
    def text(self) -> str:
        """The condition as written in the URL and the field."""
        return f"{self.key}{self.op}{self.value}"

    def holds(self, config: Mapping[str, Any]) -> bool:
        found = config_value(config, self.key)
        if self.op in ("=", "!="):
            same = found is not _MISSING and _equal(found, self.value)
            return same if self.op == "=" else not same
        number = _number(self.value)
        if found is _MISSING or number is None or not _is_number(found):
            return False
        left = float(found)
        return {
            "<": left < number,
            "<=": left <= number,
            ">": left > number,
            ">=": left >= number,
        }[self.op]


def parse_condition(text: str) -> ConfigCondition:
    """``key<op>value`` as a :class:`ConfigCondition`; `ConfigFilterError` saying why not.

    >>> parse_condition(" optimizer.lr >= 3e-4 ")
    ConfigCondition(key='optimizer.lr', op='>=', value='3e-4')
    >>> parse_condition("lr")
    Traceback (most recent call last):
    ...
    normwatch.dashboard.config_filter.ConfigFilterError: 'lr': write a key, an operator \
(= != < <= > >=) and a value, such as optimizer.lr>=3e-4
    """
    stripped = text.strip()
    if len(stripped) > MAX_CONDITION:
        raise ConfigFilterError(f"a condition has at most {MAX_CONDITION} characters")
    found = _CONDITION.match(stripped)
    if found is None or not found["key"].strip():
        raise ConfigFilterError(
            f"{stripped!r}: write a key, an operator (= != < <= > >=) and a value, "
            "such as optimizer.lr>=3e-4"
        )
    key, op, value = found["key"].strip(), found["op"], found["value"].strip()
    op = "=" if op == "==" else op
    ordered = op not in ("=", "!=")
    if not value:
        wanted = "a number" if ordered else 'a value ("" for empty text)'
        raise ConfigFilterError(f"{stripped!r}: write {wanted} after {op}")
    if value.startswith('"'):
        _quoted(value, stripped)
    if ordered and _number(value) is None:
        raise ConfigFilterError(f"{stripped!r}: {op} compares numbers; {value} is not a number")
    return ConfigCondition(key, cast(Any, op), value)


def parse_conditions(text: str) -> tuple[ConfigCondition, ...]:
    """The comma-separated conditions of the config field, all of which must hold (a comma
    inside a ``"quoted"`` value is part of it); `ConfigFilterError` for the first one that
    cannot be read.

    >>> [c.text for c in parse_conditions('model.qk_norm=true, name="a,b"')]
    ['model.qk_norm=true', 'name="a,b"']
    """
    parts = [p.strip() for p in _split(text) if p.strip()]
    if len(parts) > MAX_CONDITIONS:
        raise ConfigFilterError(f"at most {MAX_CONDITIONS} conditions at once")
    return tuple(dict.fromkeys(parse_condition(p) for p in parts))


def _split(text: str) -> list[str]:
    """``text`` cut at each comma outside a ``"quoted"`` value (``\\"`` escapes a quote)."""
    parts, start, quoted, escaped = [], 0, False, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append(text[start:i])
            start = i + 1
    if quoted:
        raise ConfigFilterError('a quoted value is not closed: add the missing "')
    return [*parts, text[start:]]


def config_value(config: Any, key: str) -> Any:
    """The value at the dotted ``key`` of ``config``: a key that holds the dot itself
    (``{"optimizer.lr": ...}``, as flattened configs have) or a path through nested
    objects and list indices (``{"optimizer": {"lr": ...}}``, ``layers.0``); a private
    marker when there is none.

    >>> config_value({"optimizer": {"lr": 3e-4}, "a.b": 1, "l": [5, 6]}, "optimizer.lr")
    0.0003
    >>> config_value({"a.b": 1}, "a.b"), config_value({"l": [5, 6]}, "l.1")
    (1, 6)
    """
    if isinstance(config, Mapping):
        if key in config:
            return config[key]
        start = key.find(".")
        while start > 0:
            head = key[:start]
            if head in config:
                found = config_value(config[head], key[start + 1 :])
                if found is not _MISSING:
                    return found
            start = key.find(".", start + 1)
    elif isinstance(config, list):
        head, _, rest = key.partition(".")
        if head.isdigit() and int(head) < len(config):
            return config[int(head)] if not rest else config_value(config[int(head)], rest)
    return _MISSING


def _quoted(value: str, condition: str) -> str:
    try:
        text = json.loads(value)
    except ValueError:
        text = None
    if not isinstance(text, str):
        raise ConfigFilterError(f'{condition!r}: a quoted value is "text in double quotes"')
    return text


def _number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(found: Any, value: str) -> bool:
    if value.startswith('"'):
        return isinstance(found, str) and found == _quoted(value, value)
    number = _number(value)
    if number is not None and _is_number(found):
        return float(found) == number
    if isinstance(found, str):
        return found == value
    # JSON's spelling: true, false, null (any case), [1,2], {"a":1}.
    spelled = json.dumps(found, separators=(",", ":"), sort_keys=True)
    if isinstance(found, bool) or found is None:
        return spelled == value.lower()
    return spelled == value.replace(" ", "")
