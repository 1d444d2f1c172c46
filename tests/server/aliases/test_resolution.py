"""Alias maps: presets, the checks that keep resolution one step, and what a name reads."""

from __future__ import annotations

import pytest

from normwatch.server.aliases import EMPTY, PRESETS, AliasError, build
from normwatch.server.aliases.resolution import MAX_PAIRS, MAX_PRESETS, matching_visible


def test_presets_and_their_grad_norm_names() -> None:
    grad = {name: dict(p.pairs) for name, p in PRESETS.items()}
    assert list(PRESETS) == ["olmo-core", "llm.c", "megatron", "hf-trainer"]
    assert grad["olmo-core"]["optim/total grad norm"] == "grad/norm/total"
    assert grad["olmo-core"]["train/CE loss"] == "train/loss"
    assert grad["llm.c"] == {
        "norm": "grad/norm/total",
        "trl": "train/loss",
        "tel": "val/loss",
        "lr": "optim/lr",
    }
    assert grad["megatron"]["grad-norm"] == "grad/norm/total"
    assert grad["megatron"]["params-norm"] == "params/norm/total"
    assert grad["megatron"]["lm loss"] == "train/loss"
    assert grad["hf-trainer"]["train/grad_norm"] == "grad/norm/total"
    assert grad["hf-trainer"]["grad_norm"] == "grad/norm/total"
    assert all(p.source and p.title for p in PRESETS.values())


def test_every_preset_builds_alone_and_all_together() -> None:
    for name, preset in PRESETS.items():
        assert build([name], {}).canonical_of == dict(preset.pairs)
    together = build(list(PRESETS), {})
    assert len(together.canonical_of) == sum(len(p.pairs) for p in PRESETS.values())
    assert together.aliases_of["grad/norm/total"] == (
        "optim/total grad norm",
        "norm",
        "grad-norm",
        "train/grad_norm",
        "grad_norm",
    )


def test_resolve_prefers_the_stored_canonical_then_the_first_alias() -> None:
    aliases = build(["hf-trainer"], {"gnorm": "grad/norm/total"})
    assert aliases.resolve("grad/norm/total", {"grad_norm", "gnorm"}) == "grad_norm"
    assert aliases.resolve("grad/norm/total", {"gnorm"}) == "gnorm"
    assert aliases.resolve("grad/norm/total", {"gnorm", "grad/norm/total"}) == "grad/norm/total"
    assert aliases.resolve("grad/norm/total", {"loss"}) is None
    assert aliases.resolve("loss", {"loss"}) == "loss"
    assert EMPTY.resolve("grad/norm/total", {"grad_norm"}) is None


def test_visible_names_and_glob_matching() -> None:
    aliases = build(["megatron"], {})
    stored = ["grad-norm", "params-norm", "params/norm/final_norm.weight", "lm loss"]
    visible = aliases.visible(stored)
    assert visible == {
        "grad-norm": "grad-norm",
        "params-norm": "params-norm",
        "params/norm/final_norm.weight": "params/norm/final_norm.weight",
        "lm loss": "lm loss",
        "grad/norm/total": "grad-norm",
        "params/norm/total": "params-norm",
        "train/loss": "lm loss",
    }
    assert aliases.matching("params/norm/*", stored) == {
        "params/norm/final_norm.weight": "params/norm/final_norm.weight",
        "params/norm/total": "params-norm",
    }
    assert aliases.matching("grad/norm/total", stored) == {"grad/norm/total": "grad-norm"}
    # The canonical name stored beside its alias: the alias stands for nothing.
    both = aliases.visible(["grad-norm", "grad/norm/total"])
    assert both == {"grad-norm": "grad-norm", "grad/norm/total": "grad/norm/total"}


def test_a_series_matched_directly_is_not_matched_again_through_its_alias() -> None:
    aliases = build([], {"train/gn": "train/grad"})
    visible = aliases.visible(["train/gn"])
    assert matching_visible("train/*", visible) == {"train/gn": "train/gn"}


@pytest.mark.parametrize(
    ("presets", "pairs", "message"),
    [
        (["olmo"], {}, "unknown preset 'olmo'; known presets: olmo-core, llm.c, megatron"),
        (["llm.c", "llm.c"], {}, "a preset is listed twice"),
        (["llm.c"], {"norm": "updates/norm/total"}, "alias 'norm' maps to 'grad/norm/total'"),
        ([], {"a": "a"}, "alias 'a' maps to itself"),
        ([], {"a": "b", "b": "a"}, "'a' → 'b' → 'a' is a cycle"),
        ([], {"a": "b", "b": "c"}, "'a' → 'b' → 'c' is a chain"),
        ([], {"grad/*": "grad/norm/total"}, "alias 'grad/*' is a glob"),
        ([], {"x": "rss(grad/norm/*)"}, "canonical name 'rss(grad/norm/*)' is a glob"),
        ([], {"x": "ratio(a, b)"}, "canonical name 'ratio(a, b)' is a derived expression"),
        ([], {" ": "a"}, "an empty alias"),
        ([], {"a" * 513: "b"}, "is longer than 512 characters"),
        ([], {f"a{i}": "b" for i in range(MAX_PAIRS + 1)}, f"at most {MAX_PAIRS} custom"),
        (["llm.c"] * (MAX_PRESETS + 1), {}, f"at most {MAX_PRESETS} presets"),
    ],
)
def test_aliases_that_cannot_resolve_one_way_are_refused(
    presets: list[str], pairs: dict[str, str], message: str
) -> None:
    with pytest.raises(AliasError) as refused:
        build(presets, pairs)
    assert message in str(refused.value)


def test_the_same_pair_from_a_preset_and_the_project_is_one_alias() -> None:
    aliases = build(["llm.c"], {"norm": "grad/norm/total", "my/loss": "train/loss"})
    assert aliases.origin["norm"] == "llm.c" and aliases.origin["my/loss"] == "custom"
    assert aliases.aliases_of["train/loss"] == ("trl", "my/loss")
    assert ("my/loss", "train/loss", "custom") in aliases.pairs()
