"""Derived series: the parser's results and refusals, and values against a plain-Python
reference that walks steps one at a time."""

from __future__ import annotations

import doctest
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normwatch.server.alerts.selectors import check_glob
from normwatch.server.analytics import derived
from normwatch.server.analytics.derived import Call, ExpressionError, Name, evaluate, parse


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(derived).failed == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("grad/norm/total", Name("grad/norm/total")),
        ("ratio", Name("ratio")),
        ("lm_head(x)", Name("lm_head(x)")),
        ("rss(grad/norm/layers.*)", Call("rss", (Name("grad/norm/layers.*"),))),
        (
            " share( grad/norm/lm_head* ,grad/norm/total ) ",
            Call("share", (Name("grad/norm/lm_head*"), Name("grad/norm/total"))),
        ),
        (
            "ratio(rss(grad/norm/layers.*), grad/norm/total)",
            Call("ratio", (Call("rss", (Name("grad/norm/layers.*"),)), Name("grad/norm/total"))),
        ),
        (
            "ratio(optim/total grad norm, params/norm/total)",
            Call("ratio", (Name("optim/total grad norm"), Name("params/norm/total"))),
        ),
    ],
)
def test_parse(text: str, expected: derived.Expression) -> None:
    assert parse(text) == expected
    assert derived.is_derived(text) == isinstance(expected, Call)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ratio(a)", "ratio takes 2 arguments, got 1"),
        ("share(a, b, c)", "share takes 2 arguments, got 3"),
        ("rss(a, b)", "rss takes 1 argument, got 2"),
        ("ratio(a, b", "is not closed"),
        ("ratio(a, )", "is empty"),
        ("ratio(, b)", "is empty"),
        ("ratio(a, b) + 1", "unexpected '+'"),
        ("ratio(a, b))", "unexpected ')'"),
        ("rss(ratio(a, b))", "rss takes a metric name or glob, not a call"),
        ("ratio(log(a), b)", "'log' in 'ratio(log(a), b)' is not a function"),
        ("ratio(" * 9 + "a" + ", b)" * 9, "nests calls more than 8 deep"),
        ("rss(" + ",".join(["a"] * 2) + ")", "rss takes 1 argument"),
    ],
)
def test_malformed_expressions_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)):
        parse(text)


def balanced(depth: int, leaves: list[str]) -> str:
    """``ratio`` calls nested ``depth`` deep over ``2**depth`` names taken from ``leaves``."""
    if depth == 0:
        return leaves.pop()
    return f"ratio({balanced(depth - 1, leaves)}, {balanced(depth - 1, leaves)})"


def test_at_most_16_metrics_an_expression() -> None:
    assert len(derived.patterns(parse(balanced(4, [f"m{i}" for i in range(16)])))) == 16
    with pytest.raises(ExpressionError, match="names more than 16 metrics or globs"):
        parse(balanced(5, [f"m{i}" for i in range(32)]))
    # The same name twice is read once.
    assert derived.patterns(parse(balanced(5, ["m"] * 32))) == ["m"]


def reference(text: str, inputs: dict[str, list[dict[int, float]]]) -> dict[int, float]:
    """The expression's value at each step, computed one step at a time from dicts."""
    expression = parse(text)

    def value(e: derived.Expression) -> dict[int, float]:
        if isinstance(e, Name):
            found = inputs.get(e.pattern, [])
            if not e.is_glob:
                return dict(found[0]) if found else {}
            return rss(found)
        if e.function == "rss":
            assert isinstance(e.args[0], Name)
            return rss(inputs.get(e.args[0].pattern, []))
        a, b = (value(arg) for arg in e.args)
        out = {}
        for step in sorted(a.keys() & b.keys()):
            x, y = a[step], b[step]
            if e.function == "share":
                x, y = x * x, y * y
            out[step] = divide(x, y)
        return out

    return value(expression)


def rss(series: list[dict[int, float]]) -> dict[int, float]:
    if not series:
        return {}
    common = set(series[0]).intersection(*series[1:])
    return {step: math.sqrt(sum(s[step] ** 2 for s in series)) for step in sorted(common)}


def divide(x: float, y: float) -> float:
    if y == 0:
        if x == 0 or math.isnan(x):
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def arrays(points: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    steps = sorted(points)
    return np.array(steps, dtype=np.int64), np.array([points[s] for s in steps])


def same(got: tuple[np.ndarray, np.ndarray], want: dict[int, float]) -> None:
    steps, values = arrays(want)
    assert got[0].tolist() == steps.tolist()
    np.testing.assert_allclose(got[1], values, rtol=1e-12, equal_nan=True)


EXPRESSIONS = [
    "ratio(a, b)",
    "share(a, b)",
    "rss(layers.*)",
    "share(layers.*, b)",
    "ratio(rss(layers.*), b)",
    "ratio(share(a, b), ratio(b, a))",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
@pytest.mark.parametrize("seed", range(4))
def test_values_match_the_step_by_step_reference(text: str, seed: int) -> None:
    rng = np.random.default_rng(seed)

    def series(density: float) -> dict[int, float]:
        steps = np.flatnonzero(rng.random(400) < density) * 3 + 1_000_000
        values = rng.lognormal(size=len(steps)) * rng.choice(
            [1.0, -1.0, 0.0], len(steps), p=[0.8, 0.1, 0.1]
        )
        return dict(zip(steps.tolist(), values.tolist(), strict=True))

    inputs = {
        "a": [series(0.9)],
        "b": [series(0.7)],
        "layers.*": [series(0.95) for _ in range(5)],
    }
    got = evaluate(parse(text), {k: [arrays(s) for s in v] for k, v in inputs.items()})
    same(got, reference(text, inputs))


def test_series_logged_at_the_same_steps_are_not_realigned() -> None:
    steps = np.arange(5, dtype=np.int64)
    a, b = np.array([1.0, 2, 3, 4, 5]), np.array([2.0, 2, 2, 2, 0])
    got_steps, got = evaluate(parse("ratio(a, b)"), {"a": [(steps, a)], "b": [(steps, b)]})
    assert got_steps is steps
    assert got.tolist() == [0.5, 1.0, 1.5, 2.0, math.inf]


def test_nan_and_infinities_propagate() -> None:
    steps = np.arange(4, dtype=np.int64)
    a = np.array([math.nan, math.inf, 0.0, 1e200])
    b = np.array([1.0, 1.0, 0.0, 1e-200])
    _, share = evaluate(parse("share(a, b)"), {"a": [(steps, a)], "b": [(steps, b)]})
    assert [str(v) for v in share.tolist()] == ["nan", "inf", "nan", "inf"]


def test_a_pattern_matching_nothing_gives_an_empty_series() -> None:
    steps = np.arange(3, dtype=np.int64)
    for text in ("rss(x.*)", "ratio(a, missing)", "share(x.*, a)"):
        got_steps, got = evaluate(parse(text), {"a": [(steps, np.ones(3))]})
        assert got_steps.tolist() == [] and got.tolist() == []


@given(
    parts=st.lists(st.lists(st.floats(1e-3, 1e3), min_size=6, max_size=6), min_size=1, max_size=8)
)
def test_shares_of_the_parts_of_a_global_norm_add_up_to_one(parts: list[list[float]]) -> None:
    steps = np.arange(6, dtype=np.int64)
    columns = [np.array(p) for p in parts]
    total = np.sqrt(sum(np.square(c) for c in columns))
    inputs = {f"p{i}": [(steps, c)] for i, c in enumerate(columns)} | {"total": [(steps, total)]}
    shares = [evaluate(parse(f"share(p{i}, total)"), inputs)[1] for i in range(len(parts))]
    np.testing.assert_allclose(sum(shares), np.ones(6), rtol=1e-12)
    glob = {"p*": [(steps, c) for c in columns], "total": [(steps, total)]}
    np.testing.assert_allclose(evaluate(parse("share(p*, total)"), glob)[1], 1.0, rtol=1e-12)


def depth(expression: derived.Expression) -> int:
    if isinstance(expression, Name):
        return 0
    return 1 + max(depth(arg) for arg in expression.args)


# Text made mostly of what the parser reacts to, with names and globs mixed in: every way a
# typed or crafted expression can go wrong, and deep or wide ones.
PIECES = st.sampled_from(
    [
        "ratio(",
        "share(",
        "rss(",
        "log(",
        "(",
        ")",
        ",",
        " ",
        "*",
        "**",
        "?",
        "[a-z]",
        "[z-a]",
        "[",
        "]",
        "/",
        "grad/norm/",
        "layers.",
        "0",
        "\x00",
        "é",
        "a" * 40,
        "*" * 17,
    ]
)
EXPRESSIONS = st.lists(PIECES, max_size=60).map("".join) | st.text(max_size=200)


@settings(max_examples=500, deadline=1000)
@given(EXPRESSIONS)
def test_any_text_parses_or_is_refused_with_an_expression_error(text: str) -> None:
    """``parse`` never fails otherwise, and what it accepts keeps its bounds: 8 levels, 16
    names or globs, each glob one that can be matched. The deadline (1 s, where a parse
    takes microseconds) catches a parser, or a glob check, that backtracks."""
    try:
        expression = parse(text)
    except ExpressionError as e:
        assert str(e)
        return
    assert derived.is_derived(text) == isinstance(expression, Call)
    if isinstance(expression, Call):
        assert depth(expression) <= derived.MAX_DEPTH
        assert len(derived.patterns(expression)) <= derived.MAX_LEAVES
        for pattern in derived.patterns(expression):
            if Name(pattern).is_glob:
                check_glob(pattern)


@settings(max_examples=50, deadline=1000)
@given(
    st.integers(1, 20_000),
    st.sampled_from(["a, ", "ratio(", "rss(a), ", "*a", "[a-z]*", "(", " "]),
)
def test_long_expressions_are_parsed_or_refused_in_linear_time(repeats: int, piece: str) -> None:
    """Up to 140,000 characters of arguments, calls or glob within one call: answered well
    within the deadline."""
    text = f"ratio({piece * repeats}b, c)"
    try:
        parse(text)
    except ExpressionError:
        pass
