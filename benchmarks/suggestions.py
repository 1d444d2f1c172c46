"""Suggestions for a name a run never logged: `services.unknown_names.closest` against
`difflib.get_close_matches` over every name, measured in the same run.

A refused read (a misspelt metric) is answered with the closest names the run has. The
baseline scores every name; `closest` scores all of a few thousand, and of more a shortlist
of the names nearest the word in name order and in reversed-name order (with its first
difference mended), the orders kept for the last few runs. Workloads: runs of 10,000 and
100,000 per-parameter names, five typos each (at the start, the middle, the end, a glob,
case); reported: milliseconds for the first refusal (orders computed) and the next (kept),
median of ``--repeat``, and the baseline / next ratio; and whether both found the same
first suggestion.

Run (from the repository root)::

    .venv/bin/python benchmarks/suggestions.py
    .venv/bin/python benchmarks/suggestions.py --repeat 1   # quicker
"""

from __future__ import annotations

import argparse
import difflib
import random
import statistics
import time
from collections.abc import Callable

from _harness import say, table

from normwatch.server.services import unknown_names
from normwatch.server.services.unknown_names import CUTOFF, closest

LEAVES = ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.w1", "mlp.w2", "moe.router", "norm1"]
TYPOS = [
    "grda/norm/block0.layers.3.mlp.w1",
    "grad/norm/block0.layrs.12.attn.q",
    "grad/norm/totl",
    "train/ppl",
    "grad/nrom/*",
]


def names_of(blocks: int) -> list[str]:
    names = ["grad/norm/total", "train/loss", "Train/PPL"]
    names += [
        f"{family}/norm/block{b}.layers.{i}.{leaf}"
        for family in ("grad", "params", "updates")
        for b in range(blocks)
        for i in range(48)
        for leaf in LEAVES
    ]
    random.Random(0).shuffle(names)
    return names


def ms(fn: Callable[[], list[str]]) -> tuple[float, list[str]]:
    began = time.perf_counter()
    got = fn()
    return (time.perf_counter() - began) * 1e3, got


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for blocks in (9, 87):
        names = names_of(blocks)
        folded = [n.casefold() for n in names]
        for typo in TYPOS:
            firsts, nexts, bases = [], [], []
            got: list[str] = []
            base: list[str] = []
            literal = typo.replace("*", "").casefold()
            for _ in range(args.repeat):
                unknown_names._orders.cache_clear()
                firsts.append(ms(lambda t=typo, n=names: closest(t, n))[0])
                took, got = ms(lambda t=typo, n=names: closest(t, n))
                nexts.append(took)
                took, base = ms(
                    lambda w=literal, f=folded: difflib.get_close_matches(w, f, 3, CUTOFF)
                )
                bases.append(took)
            plain = "*" not in typo
            check = (
                "—"
                if not plain
                else "same"
                if got[:1] and base[:1] == [got[0].casefold()]
                else f"baseline {base[:1]}"
            )
            rows.append(
                [
                    f"{len(names):,}",
                    typo,
                    f"{statistics.median(firsts):.1f}",
                    f"{statistics.median(nexts):.1f}",
                    f"{statistics.median(bases):.1f}",
                    f"{statistics.median(bases) / statistics.median(nexts):.0f}x",
                    got[0] if got else "—",
                    check,
                ]
            )
    say(
        table(
            ["names", "typed", "first ms", "next ms", "difflib ms", "ratio", "closest", "check"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
