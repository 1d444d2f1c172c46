"""The closest names to one a run never logged: typos anywhere in a name, globs, prefixes,
case, and runs of 100,000 names (where only a shortlist is scored), against difflib's own
answer over every name."""

from __future__ import annotations

import difflib
import doctest
import random

import pytest

from normwatch.server import errors
from normwatch.server.errors import Invalid, UnknownMetrics
from normwatch.server.services import unknown_names
from normwatch.server.services.unknown_names import (
    CUTOFF,
    EXACT_UP_TO,
    closest,
    closest_prefixes,
    patterns_of,
)

LEAVES = ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.w1", "mlp.w2", "moe.router", "norm1"]


def model_names(blocks: int, layers: int = 48) -> list[str]:
    """A large model's per-parameter norms: three families, ``blocks`` stacks of layers."""
    names = ["grad/norm/total", "train/loss", "Train/PPL", "optim/lr"]
    names += [
        f"{family}/norm/block{b}.layers.{i}.{leaf}"
        for family in ("grad", "params", "updates")
        for b in range(blocks)
        for i in range(layers)
        for leaf in LEAVES
    ]
    random.Random(0).shuffle(names)
    return names


def test_the_docstrings_examples_hold() -> None:
    for module in (unknown_names, errors):
        assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("grad/norm/totl", "grad/norm/total"),  # at the end
        ("grda/norm/total", "grad/norm/total"),  # at the start
        ("grad/norm/block0.layers.12.attn.qq", "grad/norm/block0.layers.12.attn.q"),
        ("grad/norm/block0.layrs.12.attn.q", "grad/norm/block0.layers.12.attn.q"),  # middle
        ("params/norm/block0.layers.47.moe.routr", "params/norm/block0.layers.47.moe.router"),
        ("train/ppl", "Train/PPL"),  # case
        ("train/los", "train/loss"),
    ],
)
def test_the_name_meant_comes_first_on_small_and_large_runs(typed: str, meant: str) -> None:
    small, large = model_names(1), model_names(90)
    assert len(small) <= EXACT_UP_TO < 100_000 < len(large)
    for names in (small, large):
        assert closest(typed, names)[0] == meant


def test_the_shortlist_finds_what_scoring_every_name_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a run past `EXACT_UP_TO` names, the best suggestion is difflib's best over all
    of them (compared casefolded, as suggestions are)."""
    monkeypatch.setattr(unknown_names, "EXACT_UP_TO", 100)  # 1,156 names: a shortlist
    names = model_names(1)
    rng = random.Random(1)
    for _ in range(40):
        name = rng.choice(names)
        at = rng.randrange(len(name))
        typed = name[:at] + rng.choice("xq_.") + name[at + 1 :]
        if typed in names:
            continue
        folded = {n.casefold(): n for n in names}
        [best] = difflib.get_close_matches(typed.casefold(), list(folded), 1, CUTOFF)
        got = closest(typed, names)
        ratio = difflib.SequenceMatcher(None, typed.casefold(), got[0].casefold()).ratio()
        best_ratio = difflib.SequenceMatcher(None, typed.casefold(), best).ratio()
        assert ratio == best_ratio, (typed, got, folded[best])


def test_nothing_close_suggests_nothing() -> None:
    assert closest("zzzz", model_names(1, 4)) == []
    assert closest_prefixes("qqq/xx", model_names(1, 4)) == []


def test_globs_and_prefixes() -> None:
    names = model_names(1, 4)
    assert closest("grad/nrom/*", names)[0] == "grad/norm/*"
    assert closest("grad/norm/block0.layer.*", names)[0].startswith("grad/norm/block0.layers.")
    assert closest("*/norm/xyz*", names) == []  # nothing literal to go by, nothing close
    assert closest_prefixes("updates/nrom", names) == ["updates/norm"]
    assert closest_prefixes("grad/norm/block0.layers.3/", names) == []


def test_patterns_of_expressions_and_their_refusal() -> None:
    assert patterns_of(["a", "share(b/*, c)", "rss(b/*)"]) == ["a", "b/*", "c"]
    with pytest.raises(Invalid, match="share takes 2 arguments"):
        patterns_of(["share(a)"])


def test_the_refusal_names_each_with_its_suggestions_and_runs() -> None:
    refused = UnknownMetrics(
        ["a/b", "c/*"], {"a/b": ["a/bb", "a/c"]}, missing_in={"a/b": ["r1"], "c/*": ["r1", "r2"]}
    )
    assert str(refused) == (
        "no metric 'a/b' in run r1 (closest: 'a/bb', 'a/c'); 'c/*' matches no metric of runs r1, r2"
    )
    assert refused.fields() == {
        "unknown": ["a/b", "c/*"],
        "suggestions": {"a/b": ["a/bb", "a/c"], "c/*": []},
        "missing_in": {"a/b": ["r1"], "c/*": ["r1", "r2"]},
    }
    assert refused.status_code == 404
    prefix = UnknownMetrics(["grad/nrom"], {"grad/nrom": ["grad/norm"]}, what="prefix")
    assert str(prefix) == "no metric under 'grad/nrom' in this run (closest: 'grad/norm')"
