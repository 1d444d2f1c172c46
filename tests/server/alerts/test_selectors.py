"""Which metrics and runs a rule selects: metric globs and run name and tag filters."""

from __future__ import annotations

import fnmatch
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normwatch.server.alerts.selectors import (
    MAX_GLOB_LENGTH,
    MAX_GLOB_WILDCARDS,
    GlobError,
    NameIndex,
    check_glob,
    matching_names,
    metric_matches,
    run_matches,
)
from normwatch.server.errors import Invalid


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("grad/norm/layers.*", "grad/norm/layers.12", True),
        ("grad/norm/layers.*", "grad/norm/layers.12.mlp.w1", True),
        ("grad/norm/layers.*", "grad/norm/layers.12/w1", False),
        ("grad/norm/layers.*", "grad/norm/layersX12", False),  # the dot is literal
        ("grad/norm/*", "grad/norm/total", True),
        ("*/norm/total", "grad/norm/total", True),
        ("*/norm/total", "a/grad/norm/total", False),
        ("grad/**", "grad/norm/layers.3/w1", True),
        ("grad/**/w1", "grad/w1", True),
        ("grad/**/w1", "grad/norm/layers.3/w1", True),
        ("grad/**/w1", "grad/norm/xw1", False),
        ("**/total", "total", True),
        ("**", "anything/at/all", True),
        ("grad/norm/layers.?", "grad/norm/layers.7", True),
        ("grad/norm/layers.?", "grad/norm/layers.17", False),
        ("grad/norm/layers.[0-4]", "grad/norm/layers.3", True),
        ("grad/norm/layers.[!0-4]", "grad/norm/layers.7", True),
        ("grad/norm/layers.[!0-4]", "grad/norm/layers.3", False),
        ("a[!x]b", "a/b", False),
        ("a[b", "a[b", True),
        ("a[]]b", "a]b", True),
        ("loss (z)+", "loss (z)+", True),
        ("optim/total grad norm", "optim/total grad norm", True),
        ("grad/norm/total", "grad/norm/total2", False),
        ("a[&&~~]b", "a&b", True),
    ],
)
def test_metric_matches(pattern: str, name: str, expected: bool) -> None:
    assert metric_matches(pattern, name) is expected


def test_run_matches() -> None:
    assert run_matches("*", [], "marin/32b-exp1295", ["32b"])  # * crosses / for run names
    assert run_matches(None, ["32b"], "x", ["32b", "moe"])
    assert run_matches("32b-exp*", ["32b", "moe"], "32b-exp1295", ["moe", "32b", "prod"])
    assert not run_matches("32b-exp*", ["32b", "moe"], "32b-exp1295", ["32b"])
    assert not run_matches("7b-*", [], "32b-exp1295", [])


# --- linear time, bounds, refusals ---------------------------------------------------------


def test_many_stars_match_in_linear_time() -> None:
    """Sixteen stars against a 51-character name took seconds when each star was a
    backtracking ``.*``; ten took minutes."""
    name = "x" * 51
    began = time.perf_counter()
    assert not metric_matches("*" * 16 + "#", name)
    assert not metric_matches("*a" * 10 + "#", "a" * 500)
    assert not run_matches("*" * 16 + "#", [], name, [])
    assert matching_names("*a" * 10 + "#", ["a" * 500] * 1000) == []
    # Seconds of slack for a loaded machine: the backtracking took 3.7 s for one name here
    # and would take hours for the second.
    assert time.perf_counter() - began < 2.0


def test_a_run_of_stars_is_one_double_star() -> None:
    assert metric_matches("grad/***", "grad/a/b") and metric_matches("grad/****/w", "grad/w")
    check_glob("*" * 400)  # one run: one wildcard


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("grad/[z-a]", "the range z-a in [z-a] is empty"),
        ("a" * MAX_GLOB_LENGTH + "*", f"at most {MAX_GLOB_LENGTH} characters"),
        ("*/" * (MAX_GLOB_WILDCARDS + 1), f"at most {MAX_GLOB_WILDCARDS}"),
        ("a\0*", "NUL"),
    ],
)
def test_bad_globs_are_refused_with_the_reason(pattern: str, said: str) -> None:
    with pytest.raises(GlobError, match=re.escape(said)):
        check_glob(pattern)
    with pytest.raises(GlobError, match=re.escape(said)):
        metric_matches(pattern, "grad/x")
    assert issubclass(GlobError, Invalid)  # answered 422 wherever a request brings one


# A reference matcher, written as directly from the documented rules as possible: plain
# recursion over the pattern, fine on short inputs.
def _reference(pattern: str, name: str, segmented: bool = True) -> bool:
    def at(p: int, n: int) -> bool:
        if p == len(pattern):
            return n == len(name)
        if pattern[p] == "*":
            run = p
            while run < len(pattern) and pattern[run] == "*":
                run += 1
            double = run - p > 1 or not segmented
            if (
                double
                and segmented
                and (p == 0 or pattern[p - 1] == "/")
                and pattern[run : run + 1] == "/"
                and at(run + 1, n)
            ):
                return True  # ``**/`` standing for no segment at all
            for end in range(n, len(name) + 1):
                if at(run, end):
                    return True
                if end < len(name) and name[end] == "/" and not double:
                    return False
            return False
        if n == len(name):
            return False
        if pattern[p] == "?":
            return not (segmented and name[n] == "/") and at(p + 1, n + 1)
        if pattern[p] == "[":
            close = pattern.find("]", p + 1 + (pattern[p + 1 : p + 2] == "!"))
            if pattern[p + 1 : p + 2] in ("]",) or pattern[p + 1 : p + 3] == "!]":
                close = pattern.find("]", close + 1)
            if close > 0:
                body = pattern[p + 1 : close]
                negate = body.startswith("!")
                members = body[negate:]
                hit = any(
                    lo <= name[n] <= hi
                    for lo, hi in (
                        (members[i], members[i + 2])
                        if members[i + 1 : i + 2] == "-" and i + 2 < len(members)
                        else (members[i], members[i])
                        for i in _starts(members)
                    )
                )
                if negate:
                    hit = not hit and not (segmented and name[n] == "/")
                return hit and at(close + 1, n + 1)
        return pattern[p] == name[n] and at(p + 1, n + 1)

    return at(0, 0)


def _starts(members: str) -> list[int]:
    out, i = [], 0
    while i < len(members):
        out.append(i)
        i += 3 if members[i + 1 : i + 2] == "-" and i + 2 < len(members) else 1
    return out


_ALPHABET = "ab/-."
_names = st.text(alphabet=_ALPHABET, max_size=10)
_classes = st.builds(
    lambda negate, members: "[" + "!" * negate + members + "]",
    st.booleans(),
    st.sampled_from(["a", "ab", "a-b", "b", ".", "-a", "a-", "/", "]a"]),
)
_globs = st.lists(
    st.one_of(st.sampled_from(list(_ALPHABET) + ["*", "**", "?", "**/", "***"]), _classes),
    max_size=7,
).map("".join)


@settings(max_examples=600, deadline=1000)
@given(_globs, _names)
def test_metric_globs_match_as_the_reference_does(pattern: str, name: str) -> None:
    assert metric_matches(pattern, name) is _reference(pattern, name)
    assert (matching_names(pattern, [name]) == [name]) is _reference(pattern, name)


@settings(max_examples=600, deadline=1000)
@given(_globs, st.text(alphabet="ab.-", max_size=10))
def test_run_globs_match_as_fnmatch_does(pattern: str, name: str) -> None:
    """Run-name globs, where ``*`` crosses ``/``, are fnmatch's (case-sensitive) globs."""
    assert run_matches(pattern, [], name, []) is fnmatch.fnmatchcase(name, pattern)


@settings(max_examples=300, deadline=1000)
@given(_globs, st.lists(_names, max_size=12))
def test_an_index_matches_what_each_name_matches(pattern: str, names: list[str]) -> None:
    index = NameIndex(names)
    expected = [name for name in names if metric_matches(pattern, name)]
    assert index.matching(pattern) == expected
    assert index.matching(pattern) == expected  # kept, and the same


def test_an_index_frames_names_that_hold_newlines_and_brackets() -> None:
    names = ["a\nb", "a", "b\n", "[x]", "grad/norm/total"]
    index = NameIndex(names)
    assert index.matching("a*") == ["a\nb", "a"]
    assert index.matching("?") == ["a"]
    assert index.matching("*\n") == ["b\n"]
    assert index.matching("[[]x]") == ["[x]"]
    assert index.matching("**") == names


def test_an_index_keeps_a_bounded_number_of_answers() -> None:
    index = NameIndex([f"m/{i}" for i in range(1000)])
    index.MAX_KEPT_NAMES = 1500
    for digit in range(1, 10):
        assert len(index.matching(f"m/{digit}*")) == 111
    assert index.matching("m/*") == index.names  # 1,000 more: the oldest answers go
    assert list(index._kept) == [f"m/{d}*" for d in range(6, 10)] + ["m/*"]
    assert index._kept_names == 4 * 111 + 1000
