"""Which metrics and runs a rule watches: name globs (``*`` within a path segment, ``**``
across ``/``) and run tags."""

from __future__ import annotations

import re
from collections.abc import Collection
from functools import lru_cache

__all__ = [
    "metric_matches",
    "run_matches",
]


def metric_matches(pattern: str, name: str) -> bool:
    """Whether a metric name matches a rule's selector.

    ``*`` matches any run of characters except ``/``, ``**`` any run including ``/``
    (``a/**/b`` also matches ``a/b``), ``?`` one character except ``/``, ``[seq]`` and
    ``[!seq]`` one character from (not from) ``seq``; everything else is literal.
    ``grad/norm/layers.*`` matches ``grad/norm/layers.12`` and
    ``grad/norm/layers.12.mlp.w1``, not ``grad/norm/layers.12/w1``.
    """
    return _glob_regex(pattern, True).fullmatch(name) is not None


def run_matches(
    name_glob: str | None,
    tags_required: Collection[str],
    run_name: str,
    run_tags: Collection[str],
) -> bool:
    """The run's name matches ``name_glob`` (``*`` crosses ``/`` here; None: any name)
    and the run carries every tag of ``tags_required``."""
    if name_glob is not None and _glob_regex(name_glob, False).fullmatch(run_name) is None:
        return False
    return set(tags_required) <= set(run_tags)


@lru_cache(maxsize=4096)
def _glob_regex(pattern: str, segmented: bool) -> re.Pattern[str]:
    one = "[^/]" if segmented else "."
    parts: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if pattern.startswith("**", i):
            at_segment = i == 0 or pattern[i - 1] == "/"
            i += 2
            if segmented and at_segment and pattern.startswith("/", i):
                parts.append("(?:.*/)?")  # zero or more whole segments
                i += 1
            else:
                parts.append(".*")
            continue
        if char == "*":
            parts.append(one + "*")
        elif char == "?":
            parts.append(one)
        elif char == "[" and (end := _class_end(pattern, i)) > 0:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            escaped = "".join("\\" + c if c in "\\[]^&~|" else c for c in body[negate:])
            parts.append(f"[^{'/' if segmented else ''}{escaped}]" if negate else f"[{escaped}]")
            i = end
        else:
            parts.append(re.escape(char))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``start``; -1 when it is a literal ``[``."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ``]`` is a member, as in fnmatch
    return pattern.find("]", j)
