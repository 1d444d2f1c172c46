"""One project's aliases, checked, and how a canonical name finds its stored series.

A run's *visible* names are its stored names, plus the canonical name of each stored
alias whose canonical name the run did not store itself: a stored canonical name always
wins over an alias, and among several stored aliases of one canonical name the first in
the map's order of preference stands for it. Nothing is renamed: a visible name that is
not stored resolves to the stored alias (its *source*).

>>> aliases = build(["olmo-core"], {})
>>> aliases.resolve("grad/norm/total", {"optim/total grad norm", "train/CE loss"})
'optim/total grad norm'
>>> aliases.resolve("grad/norm/total", {"grad/norm/total", "optim/total grad norm"})
'grad/norm/total'
>>> aliases.visible(["optim/total grad norm", "train/PPL"])["grad/norm/total"]
'optim/total grad norm'
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ..alerts.selectors import NameIndex
from ..analytics import derived
from .presets import PRESETS

MAX_PRESETS = 8
"""Presets one project may choose."""
MAX_PAIRS = 1_000
"""A project's own ``alias → canonical`` pairs."""
MAX_NAME = 512
"""Characters of an alias or a canonical name (a stored metric name's bound)."""

CUSTOM = "custom"
"""The origin of a project's own pairs, beside the presets' names."""

_GLOB = frozenset("*?[")


class AliasError(ValueError):
    """Aliases that cannot be resolved one way: the message says what to change."""


@dataclass(frozen=True)
class AliasMap:
    """``alias → canonical`` of one project, each alias with one canonical name, no chains."""

    canonical_of: Mapping[str, str] = field(default_factory=dict)
    origin: Mapping[str, str] = field(default_factory=dict)
    """The preset (or `CUSTOM`) each alias came from, first one first."""
    aliases_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Each canonical name's aliases in order of preference."""

    def __bool__(self) -> bool:
        return bool(self.canonical_of)

    def resolve(self, name: str, stored: Collection[str]) -> str | None:
        """The stored name that stands for ``name``: itself when stored, else its first
        stored alias; None when neither is stored."""
        if name in stored:
            return name
        return next((a for a in self.aliases_of.get(name, ()) if a in stored), None)

    def visible(self, stored: Iterable[str]) -> dict[str, str]:
        """Each visible name of a run that stored ``stored`` → its stored source."""
        names = list(stored)
        out = {name: name for name in names}
        if not self.canonical_of:
            return out
        for canonical in dict.fromkeys(
            self.canonical_of[n] for n in names if n in self.canonical_of
        ):
            if canonical not in out:
                source = self.resolve(canonical, out)
                if source is not None:
                    out[canonical] = source
        return out

    def matching(self, pattern: str, stored: Iterable[str]) -> dict[str, str]:
        """The visible names a metric glob (or a name) matches → their stored sources."""
        return matching_visible(pattern, self.visible(stored))

    def pairs(self) -> list[tuple[str, str, str]]:
        """``(alias, canonical, origin)`` of every alias, in order of preference."""
        return [(a, c, self.origin[a]) for a, c in self.canonical_of.items()]


def matching_visible(
    pattern: str, visible: Mapping[str, str], names: NameIndex | None = None
) -> dict[str, str]:
    """The names of ``visible`` (`AliasMap.visible`) that a metric glob or a name matches
    → their stored sources; a stored name matched directly is not matched again through
    its canonical name, so that one stored series is watched once. ``names``: an index of
    ``visible``'s names, for a caller matching several globs against them."""
    if not _GLOB.intersection(pattern):
        source = visible.get(pattern)
        return {} if source is None else {pattern: source}
    matched = set((names if names is not None else NameIndex(list(visible))).matching(pattern))
    picked: dict[str, str] = {}
    for name, source in visible.items():
        if name == source and name in matched:
            picked[name] = source
    taken = set(picked)
    for name, source in visible.items():
        if name != source and source not in taken and name in matched:
            picked[name] = source
            taken.add(source)
    return picked


EMPTY = AliasMap()
"""A project without aliases: every name stands for itself."""


def build(presets: Sequence[str], pairs: Mapping[str, str]) -> AliasMap:
    """The map of ``presets`` (in order of preference) and a project's own ``pairs``.

    Raises `AliasError` for an unknown or repeated preset, too many presets or pairs, a
    name that is empty, too long, a glob or a derived expression, an alias of itself, an
    alias given two canonical names, and a canonical name that is itself an alias (a
    chain, or a cycle): aliases resolve in one step, always to a canonical name.
    """
    if len(presets) > MAX_PRESETS:
        raise AliasError(f"at most {MAX_PRESETS} presets, got {len(presets)}")
    if len(pairs) > MAX_PAIRS:
        raise AliasError(f"at most {MAX_PAIRS} custom aliases, got {len(pairs)}")
    for name in presets:
        if name not in PRESETS:
            known = ", ".join(PRESETS)
            raise AliasError(f"unknown preset {name!r}; known presets: {known}")
    if len(set(presets)) != len(presets):
        raise AliasError("a preset is listed twice; list each once")
    return _build(tuple(presets), tuple(pairs.items()))


@lru_cache(maxsize=256)
def _build(presets: tuple[str, ...], pairs: tuple[tuple[str, str], ...]) -> AliasMap:
    canonical_of: dict[str, str] = {}
    origin: dict[str, str] = {}
    given = [(a, c, p) for p in presets for a, c in PRESETS[p].pairs]
    given += [(a, c, CUSTOM) for a, c in pairs]
    for alias, canonical, source in given:
        for role, text in (("alias", alias), ("canonical name", canonical)):
            _check_name(role, text, alias)
        if alias == canonical:
            raise AliasError(f"alias {alias!r} maps to itself; drop it")
        held = canonical_of.get(alias)
        if held is not None and held != canonical:
            raise AliasError(
                f"alias {alias!r} maps to {held!r} ({origin[alias]}) and to {canonical!r} "
                f"({source}); an alias names one canonical metric, drop one of them"
            )
        if held is None:
            canonical_of[alias] = canonical
            origin[alias] = source
    for alias, canonical in canonical_of.items():
        if canonical in canonical_of:
            chain = [alias, canonical]
            while chain[-1] in canonical_of and chain[-1] not in chain[:-1]:
                chain.append(canonical_of[chain[-1]])
            shown = " → ".join(repr(n) for n in chain)
            kind = "a cycle" if chain[-1] in chain[:-1] else "a chain"
            raise AliasError(
                f"{shown} is {kind}: an alias maps straight to a canonical name that is "
                "no alias itself"
            )
    aliases_of: dict[str, list[str]] = {}
    for alias, canonical in canonical_of.items():
        aliases_of.setdefault(canonical, []).append(alias)
    return AliasMap(canonical_of, origin, {c: tuple(a) for c, a in aliases_of.items()})


def _check_name(role: str, text: str, alias: str) -> None:
    where = f" (alias {alias!r})" if role != "alias" else ""
    if not text or not text.strip():
        raise AliasError(f"an empty {role}{where}; name a metric")
    if len(text) > MAX_NAME:
        raise AliasError(f"{role} {text[:40]!r}… is longer than {MAX_NAME} characters{where}")
    if _GLOB.intersection(text):
        raise AliasError(f"{role} {text!r} is a glob{where}; aliases name single metrics")
    if derived.is_derived(text):
        raise AliasError(f"{role} {text!r} is a derived expression{where}; name a metric")
    if "\x00" in text:
        raise AliasError(f"{role} {text!r} holds a NUL character{where}")
