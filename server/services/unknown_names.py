"""Names a read asks for that the run never logged, and the closest names it has.

A misspelled metric used to read as nothing: an empty series, a column of NaN, "0.0 in
spikes". Every read that takes metric names (series, export and so `history`, transitions,
spikes, compare, the layer grid's and the attribution's prefix) looks its names up first and
refuses those the run has not logged with `UnknownMetrics` (404), which names each (a name
or glob inside an expression on its own) with the closest names the run has.

A name counts as logged when the run stored it, or stored an alias of it (the project's
aliases, presets included: `aliases.resolution`); a glob when it matches one of those
*visible* names. Suggestions come from the same visible names, so a canonical name an
alias stands for is suggested too.

Suggestions are the closest names by `difflib`'s ratio (at least `CUTOFF`, and within
`SPREAD` of the best one, so that a near-perfect match is not followed by names that only
share its directory), at most `MAX_SUGGESTIONS`; for a glob whose directory is misspelled
(``grad/nrom/*``) the same glob under the closest directories the run has comes first,
where it matches something. Suggestions are computed only when a read is refused: on a
run of 10,000 names in 10 to 120 ms, of 100,000 in about 0.4 s the first time and under
70 ms after (the name orders of `_shortlist` are kept), where scoring every name took up to
10 s (``benchmarks/suggestions.py``, on a loaded two-core machine).

>>> closest("grad/norm/totl", ["grad/norm/total", "grad/norm/layers.0", "train/loss"])
['grad/norm/total']
>>> closest("grad/nrom/*", ["grad/norm/total", "grad/norm/layers.0", "train/loss"])
['grad/norm/*', 'grad/norm/total', 'grad/norm/layers.0']
>>> closest_prefixes("grad/nrom", ["grad/norm/total", "params/norm/w"])
['grad/norm']
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from ..alerts.selectors import GLOB_CHARS, metric_matches
from ..analytics import derived
from ..errors import Invalid, UnknownMetrics
from .full_resolution import Reader

__all__ = [
    "CUTOFF",
    "MAX_SUGGESTIONS",
    "closest",
    "closest_prefixes",
    "patterns_of",
    "refuse_unknown",
    "require_known",
    "unknown_in",
    "visible_names",
]

MAX_SUGGESTIONS = 3
"""Closest names an unknown name is answered with, at most."""
CUTOFF = 0.6
"""The least `difflib.SequenceMatcher.ratio` a suggestion has with the name asked for."""
SPREAD = 0.15
"""How far below the best suggestion's ratio another may be."""
EXACT_UP_TO = 2_000
"""Names scored one by one; of more, a shortlist (`_shortlist`)."""
SHORTLIST = 128
"""Names scored either side of the word in each order, on runs of more than `EXACT_UP_TO`."""

_WILDCARDS = re.compile(r"\[[^\]]*\]|[*?]")


def patterns_of(metrics: Iterable[str]) -> list[str]:
    """The names and globs ``metrics`` use, each once, in order: a name or glob itself, an
    expression its arguments (`analytics.derived.patterns`). A malformed expression is
    `Invalid` (422).

    >>> patterns_of(["train/loss", "ratio(grad/norm/total, params/*)", "train/loss"])
    ['train/loss', 'grad/norm/total', 'params/*']
    """
    out: list[str] = []
    for text in metrics:
        if derived.is_derived(text):
            try:
                out += derived.patterns(derived.parse(text))
            except derived.ExpressionError as e:
                raise Invalid(str(e)) from None
        else:
            out.append(text)
    return list(dict.fromkeys(out))


def unknown_in(reader: Reader, metrics: Iterable[str]) -> list[str]:
    """The names and globs of ``metrics`` (`patterns_of`) that match nothing the reader's
    run logged (stored, or through one of its aliases)."""
    return [p for p in patterns_of(metrics) if not reader.matching(derived.Name(p))]


def require_known(reader: Reader, metrics: Iterable[str]) -> None:
    """Refuse (`UnknownMetrics`) the names and globs of ``metrics`` the run never logged."""
    refuse_unknown(reader, unknown_in(reader, metrics))


def refuse_unknown(reader: Reader, unknown: Sequence[str]) -> None:
    """Raise `UnknownMetrics` for ``unknown`` (if any), with the closest names the reader's
    run has for each."""
    if unknown:
        names = visible_names(reader)
        raise UnknownMetrics(list(unknown), {name: closest(name, names) for name in unknown})


def visible_names(reader: Reader) -> list[str]:
    """The names the reader's run can be read by: stored ones, and the canonical names
    its aliases stand for."""
    names = reader.names()
    return list(reader.aliases.visible(names)) if reader.aliases else list(names)


def closest(pattern: str, names: Sequence[str], n: int = MAX_SUGGESTIONS) -> list[str]:
    """The ``names`` closest to ``pattern``, closest first, at most ``n``; for a glob, the
    same glob under the closest directories the names have (where it matches one of
    them) first, then the names closest to its literal text."""
    if GLOB_CHARS.isdisjoint(pattern):
        return _ranked(pattern, names, n)
    found = _moved_globs(pattern, names, n)
    literal = _WILDCARDS.sub("", pattern)
    found += [m for m in _ranked(literal, names, n) if m not in found]
    return found[:n]


def closest_prefixes(prefix: str, names: Sequence[str], n: int = MAX_SUGGESTIONS) -> list[str]:
    """The directories of ``names`` (``grad/norm`` of ``grad/norm/total``) closest to
    ``prefix``, closest first, at most ``n``."""
    directories = {name[:i] for name in names for i, c in enumerate(name) if c == "/" and i}
    return _ranked(prefix.rstrip("/"), sorted(directories), n)


def _shortlist(word: str, names: Sequence[str]) -> Sequence[str]:
    """The names worth scoring against ``word``: all of a few thousand; of more, those
    nearest it in name order and in the order of reversed names (`SHORTLIST` each way),
    and in each order those nearest the word with its first difference from its
    neighbour mended (a character dropped, inserted or replaced).

    A typo splits a name into a correct start and a correct end, so the name meant sorts
    near the word by one of them, or, mended, by both: the ratio is costly (about 40 µs a
    name), and scoring a run's 100,000 names took seconds."""
    if len(names) <= EXACT_UP_TO:
        return names
    out: dict[str, None] = {}
    for reverse, (ordered, keys) in enumerate(_orders(tuple(names))):
        typed = _reversed(word) if reverse else word.casefold()
        at = bisect.bisect(keys, typed)
        out.update(dict.fromkeys(ordered[max(0, at - SHORTLIST) : at + SHORTLIST]))
        for mended in _mended(typed, keys[max(0, at - 1) : at + 1]):
            near = bisect.bisect(keys, mended)
            out.update(dict.fromkeys(ordered[max(0, near - 8) : near + 8]))
    return list(out)


@lru_cache(maxsize=8)
def _orders(names: tuple[str, ...]) -> list[tuple[list[str], list[str]]]:
    """``names`` in name order and in the order of reversed names (both casefolded), each
    with its sort keys; kept for the last few runs' names, since a refused read is often
    tried again."""
    out = []
    for key in (str.casefold, _reversed):
        ordered = sorted(names, key=key)
        out.append((ordered, [key(name) for name in ordered]))
    return out


def _mended(typed: str, neighbours: Sequence[str]) -> list[str]:
    """``typed`` with its first difference from each of ``neighbours`` undone each way a
    typo is made: its character there dropped, the neighbour's inserted, or put instead.

    >>> _mended("layrs.12", ["layers.9"])
    ['lays.12', 'layers.12', 'layes.12']
    """
    out = []
    for other in neighbours:
        at = next((i for i, (a, b) in enumerate(zip(typed, other, strict=False)) if a != b), None)
        if at is None:
            continue
        out += [typed[:at] + typed[at + 1 :], typed[:at] + other[at] + typed[at:]]
        out.append(typed[:at] + other[at] + typed[at + 1 :])
    return out


def _reversed(name: str) -> str:
    return name.casefold()[::-1]


def _ranked(word: str, candidates: Sequence[str], n: int) -> list[str]:
    """The ``n`` candidates of highest `difflib.SequenceMatcher.ratio` with ``word`` (as
    `difflib.get_close_matches` finds them), keeping only those within `SPREAD` of the
    best. The ratio, which is costly, is computed in order of its cheap upper bound
    (``quick_ratio``) and no further once that bound is below the ``n``-th best found."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(word.casefold())  # "train/ppl" is "Train/PPL" misremembered
    bounded = []
    for candidate in _shortlist(word, candidates):
        matcher.set_seq1(candidate.casefold())
        if matcher.real_quick_ratio() >= CUTOFF and (bound := matcher.quick_ratio()) >= CUTOFF:
            bounded.append((bound, candidate))
    bounded.sort(key=lambda pair: (-pair[0], pair[1]))
    scored: list[tuple[float, str]] = []
    for bound, candidate in bounded:
        if len(scored) >= n and bound < min(scored)[0]:
            break
        matcher.set_seq1(candidate.casefold())
        if (ratio := matcher.ratio()) >= CUTOFF:
            scored.append((ratio, candidate))
    best = sorted(scored, key=lambda pair: (-pair[0], pair[1]))[:n]
    return [name for ratio, name in best if ratio >= best[0][0] - SPREAD]


def _moved_globs(pattern: str, names: Sequence[str], n: int) -> list[str]:
    """``pattern`` with its literal leading directories replaced by the closest ones the
    names have, where the glob then matches a name (``grad/nrom/*`` → ``grad/norm/*``)."""
    parts = pattern.split("/")
    first_wild = next(i for i, part in enumerate(parts) if not GLOB_CHARS.isdisjoint(part))
    if first_wild == 0:
        return []
    head, rest = "/".join(parts[:first_wild]), "/".join(parts[first_wild:])
    heads = sorted(
        {"/".join(name.split("/")[:first_wild]) for name in names if name.count("/") >= first_wild}
    )
    moved = [f"{close}/{rest}" for close in _ranked(head, heads, n) if close != head]
    return [glob for glob in moved if any(metric_matches(glob, name) for name in names)]
