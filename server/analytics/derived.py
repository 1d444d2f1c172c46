"""Derived series: ``ratio(A, B)``, ``share(A, B)`` and ``rss(GLOB)``, parsed and computed.

Wherever a metric name is accepted (series reads, charts, comparisons, alert rules) an
expression may stand instead:

- ``ratio(A, B)`` = ``A / B`` at the steps where both are logged;
- ``share(A, B)`` = ``A² / B²``: a part's share of a total's squared norm (a global norm is
  the root of its parts' summed squares, so the shares of disjoint parts add up to 1);
- ``rss(GLOB)`` = ``sqrt(Σ m²)`` over the metrics matching ``GLOB``, at the steps where every
  one of them is logged (a partial sum would be a wrong norm, not a smaller one).

Inside ``ratio`` and ``share`` an argument may be a metric name, a glob (standing for its
``rss``) or another expression: ``share(grad/norm/lm_head*, grad/norm/total)``,
``ratio(rss(grad/norm/layers.*), grad/norm/total)``. Globs follow the alert rules' syntax
(``*`` within a path segment, ``**`` across ``/``). Text that is not a call of one of the
three functions is a plain metric name.

Values are computed in float64 from every stored point of the inputs, before any
downsampling; NaN and infinities propagate as IEEE arithmetic gives them (``x / 0`` is an
infinity, ``0 / 0`` NaN).

>>> expression = parse("share(grad/norm/lm_head*, grad/norm/total)")
>>> patterns(expression)
['grad/norm/lm_head*', 'grad/norm/total']
>>> import numpy as np
>>> steps = np.arange(3)
>>> part = (steps, np.array([1.0, 2.0, 3.0]))
>>> total = (steps, np.array([2.0, 4.0, 3.0]))
>>> evaluate(expression, {"grad/norm/lm_head*": [part], "grad/norm/total": [total]})[1]
array([0.25, 0.25, 1.  ])
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

import numpy as np
import numpy.typing as npt

from ..alerts.selectors import GLOB_CHARS, check_glob
from ..errors import GlobError

__all__ = [
    "Call",
    "ExpressionError",
    "Name",
    "evaluate",
    "is_derived",
    "parse",
    "patterns",
]

StepArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
SeriesArrays = tuple[StepArray, FloatArray]

ARITY = {"ratio": 2, "share": 2, "rss": 1}
MAX_DEPTH = 8
MAX_LEAVES = 16
_CALL = re.compile(r"\s*(ratio|share|rss)\s*\(", re.ASCII)


class ExpressionError(ValueError):
    """A derived-series expression that cannot be parsed; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Name:
    """A metric name, or a glob over names."""

    pattern: str

    @property
    def is_glob(self) -> bool:
        return not GLOB_CHARS.isdisjoint(self.pattern)


@dataclass(frozen=True, slots=True)
class Call:
    function: str
    args: tuple[Expression, ...]


Expression = Name | Call


def is_derived(text: str) -> bool:
    """Whether ``text`` asks for a derived series rather than names a metric."""
    return _CALL.match(text) is not None


def parse(text: str) -> Expression:
    """The expression ``text`` spells; a plain metric name when it calls no function.

    Raises `ExpressionError` for a call that is malformed: unknown arity, an empty
    argument, unbalanced parentheses, more than 8 levels or 16 metric arguments, or a glob
    that `check_glob` refuses.
    """
    if not is_derived(text):
        return Name(text)
    parser = _Parser(text)
    expression = parser.expression(depth=1)
    parser.skip_space()
    if parser.at < len(text):
        raise ExpressionError(
            f"unexpected {text[parser.at]!r} at position {parser.at} of {text!r}: "
            "an expression is one call such as ratio(A, B)"
        )
    read = patterns(expression)
    if len(read) > MAX_LEAVES:
        raise ExpressionError(f"{text!r} names more than {MAX_LEAVES} metrics or globs")
    for pattern in read:
        if Name(pattern).is_glob:
            try:
                check_glob(pattern)
            except GlobError as e:
                raise ExpressionError(f"{e} (in {text!r})") from None
    return expression


def patterns(expression: Expression) -> list[str]:
    """The names and globs an expression reads, in order of appearance, each once."""
    if isinstance(expression, Name):
        return [expression.pattern]
    seen: dict[str, None] = {}
    for arg in expression.args:
        seen.update(dict.fromkeys(patterns(arg)))
    return list(seen)


def evaluate(expression: Expression, inputs: Mapping[str, Sequence[SeriesArrays]]) -> SeriesArrays:
    """The derived series, given for each pattern of `patterns` the series of every metric
    it matched (steps ascending and unique in each).

    A pattern that matched nothing, or inputs with no step in common, give an empty series.
    """
    if isinstance(expression, Name):
        found = inputs.get(expression.pattern, ())
        if expression.is_glob:
            return _rss(found)
        if len(found) > 1:
            raise ValueError(f"{expression.pattern!r} is a name, yet {len(found)} series came")
        return found[0] if found else _EMPTY
    if expression.function == "rss":
        arg = expression.args[0]
        assert isinstance(arg, Name), "the parser gives rss one name or glob"
        return _rss(inputs.get(arg.pattern, ()))
    (a_steps, a), (b_steps, b) = _aligned([evaluate(arg, inputs) for arg in expression.args])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        values = a / b if expression.function == "ratio" else np.square(a) / np.square(b)
    return a_steps, values.astype(np.float64, copy=False)


_EMPTY: SeriesArrays = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))


def _rss(series: Sequence[SeriesArrays]) -> SeriesArrays:
    """``sqrt(Σ v²)`` at the steps every series has."""
    if not series:
        return _EMPTY
    aligned = _aligned(list(series))
    with np.errstate(over="ignore", invalid="ignore"):
        total = reduce(np.add, (np.square(values) for _, values in aligned))
        return aligned[0][0], np.sqrt(total)


def _aligned(series: list[SeriesArrays]) -> list[SeriesArrays]:
    """Each series restricted to the steps all of them have."""
    first = series[0][0]
    if all(len(s) == len(first) and np.array_equal(s, first) for s, _ in series[1:]):
        return series  # the usual case: logged together, at the same steps
    common = reduce(lambda a, b: np.intersect1d(a, b, assume_unique=True), (s for s, _ in series))
    return [(common, values[np.searchsorted(steps, common)]) for steps, values in series]


class _Parser:
    """Recursive descent over ``call := function "(" argument ("," argument)* ")"``, where an
    argument is a call or a name (anything up to the next ``,`` or ``)``, trimmed)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def skip_space(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1

    def expression(self, depth: int) -> Expression:
        if depth > MAX_DEPTH:
            raise ExpressionError(f"{self.text!r} nests calls more than {MAX_DEPTH} deep")
        call = _CALL.match(self.text, self.at)
        if call is None:
            return self.name()
        function = call.group(1)
        self.at = call.end()
        args = [self.argument(depth)]
        while self.peek() == ",":
            self.at += 1
            args.append(self.argument(depth))
        if self.peek() != ")":
            raise ExpressionError(
                f"{function}( at position {call.start()} of {self.text!r} is not closed"
            )
        self.at += 1
        if len(args) != ARITY[function]:
            raise ExpressionError(
                f"{function} takes {ARITY[function]} argument{'s' * (ARITY[function] > 1)}, "
                f"got {len(args)} in {self.text!r}"
            )
        if function == "rss" and not isinstance(args[0], Name):
            raise ExpressionError(f"rss takes a metric name or glob, not a call, in {self.text!r}")
        return Call(function, tuple(args))

    def argument(self, depth: int) -> Expression:
        self.skip_space()
        arg = self.expression(depth + 1)
        self.skip_space()
        return arg

    def name(self) -> Name:
        start = self.at
        while self.at < len(self.text) and self.text[self.at] not in ",()":
            self.at += 1
        pattern = self.text[start : self.at].strip()
        if not pattern:
            raise ExpressionError(f"an argument at position {start} of {self.text!r} is empty")
        if self.peek() == "(":
            raise ExpressionError(
                f"{pattern!r} in {self.text!r} is not a function: use ratio, share or rss"
            )
        return Name(pattern)

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.at] if self.at < len(self.text) else ""
