"""Which metrics and runs a rule watches: name globs (``*`` within a path segment, ``**``
across ``/``) and run tags.

Globs match in time linear in the name, whatever the pattern: a pattern with at most one
unbounded wildcard runs on Python's ``re`` (one wildcard backtracks at most once per
character, and that engine is the fastest per call), any other on RE2, which never
backtracks. Patterns are bounded (`MAX_GLOB_LENGTH` characters, `MAX_GLOB_WILDCARDS` runs
of ``*``), checked (`check_glob` raises `GlobError`, a ``ValueError`` answered 422, saying
what is wrong) and compiled once (the last 1,024 kept). :class:`NameIndex` matches a glob
against many names at once, and keeps what it matched.

>>> metric_matches("grad/norm/layers.*", "grad/norm/layers.12")
True
>>> metric_matches("grad/**/w1", "grad/norm/layers.12/w1")
True
>>> NameIndex(["loss", "grad/norm/a", "grad/norm/b/c"]).matching("grad/norm/*")
['grad/norm/a']
>>> try:
...     check_glob("grad/[z-a]")
... except GlobError as e:
...     print(e)
'grad/[z-a]': the range z-a in [z-a] is empty (write it low to high: [a-z])
"""

from __future__ import annotations

import re
import string
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import re2

from ..errors import GlobError

__all__ = [
    "GLOB_CHARS",
    "MAX_GLOB_LENGTH",
    "MAX_GLOB_WILDCARDS",
    "GlobError",
    "NameIndex",
    "check_glob",
    "metric_matches",
    "matching_names",
    "run_matches",
]

MAX_GLOB_LENGTH = 512
"""Characters of a glob (a metric name's own bound)."""
MAX_GLOB_WILDCARDS = 16
"""Runs of ``*`` in one glob (``**`` and ``***`` count once); ``?`` and classes are free."""
GLOB_CHARS = frozenset("*?[")


def check_glob(pattern: str, *, segmented: bool = True) -> None:
    """Raise `GlobError` unless ``pattern`` is a glob that can be matched: a metric glob,
    or with ``segmented=False`` a run-name glob (whose ``*`` crosses ``/``)."""
    _compiled(pattern, segmented)


def metric_matches(pattern: str, name: str) -> bool:
    """Whether a metric name matches a rule's selector.

    ``*`` matches any run of characters except ``/``, ``**`` any run including ``/``
    (``a/**/b`` also matches ``a/b``; a longer run of stars is ``**``), ``?`` one
    character except ``/``, ``[seq]`` and ``[!seq]`` one character from (not from)
    ``seq``, where ``a-z`` is a range; everything else is literal.
    ``grad/norm/layers.*`` matches ``grad/norm/layers.12`` and
    ``grad/norm/layers.12.mlp.w1``, not ``grad/norm/layers.12/w1``.

    Raises `GlobError` for a pattern `check_glob` refuses.
    """
    if GLOB_CHARS.isdisjoint(pattern):
        return pattern == name
    return _compiled(pattern, True).one.fullmatch(name) is not None


def run_matches(
    name_glob: str | None,
    tags_required: Collection[str],
    run_name: str,
    run_tags: Collection[str],
) -> bool:
    """The run's name matches ``name_glob`` (``*`` crosses ``/`` here; None: any name)
    and the run carries every tag of ``tags_required``."""
    if name_glob is not None and _compiled(name_glob, False).one.fullmatch(run_name) is None:
        return False
    return set(tags_required) <= set(run_tags)


def matching_names(pattern: str, names: Sequence[str]) -> list[str]:
    """The ``names`` (metric names) that ``pattern`` matches, in order (a `NameIndex` keeps
    what it needs for names matched often)."""
    return NameIndex(names).matching(pattern)


class NameIndex:
    """Metric names, each glob matched against all of them at once; what each glob matched
    is kept (at most `MAX_KEPT` globs and `MAX_KEPT_NAMES` names in all, oldest first out).

    A glob that Python's ``re`` may run (at most one run of ``*``) is matched name by name
    there; any other in one pass of RE2 over the names joined, built on its first use.
    Thread-safe. Names never hold NUL (the API refuses it), which separates them.
    """

    MAX_KEPT = 256
    MAX_KEPT_NAMES = 100_000

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self._joined: tuple[bytes, dict[int, int]] | None = None
        self._kept: dict[str, list[str]] = {}
        self._kept_names = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.names)

    def matching(self, pattern: str) -> list[str]:
        """The names ``pattern`` matches, in the index's order (`metric_matches` for each);
        raises `GlobError` for a pattern `check_glob` refuses."""
        if GLOB_CHARS.isdisjoint(pattern):
            return [name for name in self.names if name == pattern]
        with self._lock:
            kept = self._kept.get(pattern)
        if kept is not None:
            return kept
        glob = _compiled(pattern, True)
        if isinstance(glob.one, re.Pattern):
            fullmatch = glob.one.fullmatch
            found = [name for name in self.names if fullmatch(name)]
        else:
            found = self._in_one_pass(glob.framed)
        with self._lock:
            if pattern not in self._kept:
                self._kept[pattern] = found
                self._kept_names += len(found)
            while self._kept and (
                len(self._kept) > self.MAX_KEPT or self._kept_names > self.MAX_KEPT_NAMES
            ):
                self._kept_names -= len(self._kept.pop(next(iter(self._kept))))
        return found

    def _in_one_pass(self, framed: _Re2Pattern) -> list[str]:
        # Each name follows a NUL: "\0a\0b\0" in UTF-8. A match starts at a NUL and cannot
        # cross the next one, and RE2 takes the longest, so a name matches if and only if
        # the match that starts before it ends at the NUL after it.
        if self._joined is None:
            text = b"\0" + b"\0".join(name.encode() for name in self.names) + b"\0"
            at: dict[int, int] = {}
            offset = 0
            for i, name in enumerate(self.names):
                at[offset] = i
                offset += len(name.encode()) + 1
            self._joined = (text, at)
        text, at = self._joined
        return [
            self.names[at[match.start()]]
            for match in framed.finditer(text)
            if text.startswith(b"\0", match.end()) and match.start() in at
        ]


@dataclass(frozen=True, slots=True)
class _Glob:
    pattern: str
    one: re.Pattern[str] | _Re2Pattern
    """Matches one name (``fullmatch``)."""

    @property
    def framed(self) -> _Re2Pattern:
        """Finds, after each NUL of a `NameIndex`'s text, the longest run that matches
        (compiled on first use: only globs RE2 matches need it)."""
        return _framed(self.pattern)


class _Re2Pattern(Protocol):
    """The part of RE2's compiled pattern used here (RE2's bindings are not typed)."""

    def fullmatch(self, text: str) -> object | None: ...

    def finditer(self, text: bytes) -> Iterator[re.Match[bytes]]: ...


def _options(*, longest: bool) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the caller's error, said in GlobError
    options.dot_nl = True
    options.longest_match = longest
    # Each compiled pattern's memory, its lazily built automaton included (past it RE2
    # falls back to a slower search, still linear): the caches below hold at most 1,088
    # patterns, so about 280 MB at the very worst, and in practice a few KB each.
    options.max_mem = RE2_MAX_MEM
    return options


RE2_MAX_MEM = 1 << 18
_RE2_OPTIONS = _options(longest=False)
_LONGEST = _options(longest=True)


@lru_cache(maxsize=64)
def _framed(pattern: str) -> _Re2Pattern:
    framed, _ = _translate(pattern, True, framed=True)
    compiled: _Re2Pattern = re2.compile(f"\\x00(?:{framed})".encode(), _LONGEST)
    return compiled


@lru_cache(maxsize=1024)
def _compiled(pattern: str, segmented: bool) -> _Glob:
    if "\0" in pattern:
        raise GlobError("a glob must not contain NUL characters")
    if len(pattern) > MAX_GLOB_LENGTH:
        raise GlobError(
            f"a glob is at most {MAX_GLOB_LENGTH} characters; this one has {len(pattern)}"
        )
    one, unbounded = _translate(pattern, segmented, framed=False)
    if unbounded > MAX_GLOB_WILDCARDS:
        raise GlobError(
            f"{pattern!r} has {unbounded} runs of '*'; a glob may have at most {MAX_GLOB_WILDCARDS}"
        )
    try:
        single: re.Pattern[str] | _Re2Pattern = (
            re.compile(one, re.DOTALL) if unbounded <= 1 else re2.compile(one, _RE2_OPTIONS)
        )
        return _Glob(pattern, single)
    except (re.error, re2.error) as e:  # pragma: no cover - _translate emits valid syntax
        raise GlobError(f"{pattern!r} cannot be matched: {e}") from None


def _translate(pattern: str, segmented: bool, *, framed: bool) -> tuple[str, int]:
    """The regular expression of ``pattern`` and how many unbounded wildcards it holds.

    ``framed``: for a `NameIndex`'s text, where no wildcard may cross a NUL.
    """
    nul = "\\x00" if framed else ""
    anything = f"[^{nul}]" if framed else "."
    one = f"[^/{nul}]" if segmented else anything
    parts: list[str] = []
    unbounded = 0
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            run_end = i
            while run_end < n and pattern[run_end] == "*":
                run_end += 1
            unbounded += 1
            if run_end - i == 1:
                parts.append(one + "*")
            elif (
                segmented and (i == 0 or pattern[i - 1] == "/") and pattern.startswith("/", run_end)
            ):
                parts.append(f"(?:{anything}*/)?")  # zero or more whole segments
                run_end += 1
            else:
                parts.append(anything + "*")
            i = run_end
            continue
        if char == "?":
            parts.append(one)
        elif char == "[" and (end := _class_end(pattern, i)) > 0:
            parts.append(_class(pattern, i, end, excluded="/" if segmented else "", framed=framed))
            i = end
        else:
            parts.append(_literal(char))
        i += 1
    return "".join(parts), unbounded


def _class(pattern: str, start: int, end: int, *, excluded: str, framed: bool) -> str:
    """The character class of ``pattern[start : end + 1]`` (``[seq]`` or ``[!seq]``)."""
    body = pattern[start + 1 : end]
    negate = body.startswith("!")
    members = body[1:] if negate else body
    items: list[str] = []
    j = 0
    while j < len(members):
        low = members[j]
        if j + 2 < len(members) and members[j + 1] == "-":
            high = members[j + 2]
            if low > high:
                raise GlobError(
                    f"{pattern!r}: the range {low}-{high} in {pattern[start : end + 1]} is "
                    f"empty (write it low to high: [{high}-{low}])"
                )
            items.append(f"{_literal(low)}-{_literal(high)}")
            j += 3
        else:
            items.append(_literal(low))
            j += 1
    if negate:
        kept = excluded + ("\\x00" if framed else "")
        return f"[^{kept}{''.join(items)}]"
    return f"[{''.join(items)}]"


def _literal(char: str) -> str:
    """``char`` as a literal that Python's ``re`` and RE2 both read the same way."""
    if char.isascii() and not char.isalnum():
        return "\\" + char if char in _PUNCTUATION else f"\\x{ord(char):02x}"
    return char  # letters, digits and every non-ASCII character stand for themselves


_PUNCTUATION = frozenset(string.punctuation)


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``start``; -1 when it is a literal ``[``."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ``]`` is a member, as in fnmatch
    return pattern.find("]", j)
