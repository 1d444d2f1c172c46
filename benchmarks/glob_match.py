"""Glob matching: the linear matcher (`normwatch.server.alerts.selectors`) against the
backtracking translation it replaced, measured in the same run.

The baseline is that translation, kept here as it was: each ``*`` a ``[^/]*``, each ``**`` a
``.*``, matched by Python's ``re`` name by name. Three workloads:

* ingest: the 50 rules of ``alias_rules.py`` matched against a batch's 1,002 names, as alert
  evaluation does for every batch (baseline: each rule against each column; now: one
  `NameIndex` of the batch, one pass a rule);
* a read: globs of a chart or an expression against a run's 20,000 names (baseline: each
  name; now: the run's kept index, first pass and kept answer; the last glob, with three
  runs of ``*``, goes to RE2);
* hostile: a run of stars followed by a character no name has, against one 51-character
  name (the baseline is stopped at 14 stars: each two stars multiply its time by about 12;
  16 took 3.7 s on a server).

Reported: milliseconds (median of ``--repeat``) and the ratio baseline / now.

Run (from the repository root)::

    .venv/bin/python benchmarks/glob_match.py
    .venv/bin/python benchmarks/glob_match.py --repeat 3   # quicker
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable

from _harness import say, table
from alias_rules import RULES

from normwatch.server.alerts.selectors import NameIndex, metric_matches


def backtracking(pattern: str) -> re.Pattern[str]:
    """The translation the linear matcher replaced (``[seq]`` classes left out)."""
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            at_segment = i == 0 or pattern[i - 1] == "/"
            i += 2
            if at_segment and pattern.startswith("/", i):
                parts.append("(?:.*/)?")
                i += 1
            else:
                parts.append(".*")
            continue
        char = pattern[i]
        parts.append("[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    rows: list[list[str]] = []

    def row(what: str, before: float, now: float) -> None:
        rows.append([what, f"{before:,.2f}", f"{now:,.3f}", f"{before / now:,.1f}"])
        say(f"{what}: {before:,.2f} ms before, {now:,.3f} ms now")

    batch = ["grad/norm/total", "train/loss"] + [
        f"{family}/layers.{i}.{part}"
        for family in ("grad/norm", "params/norm")
        for i in range(100)
        for part in ("attn", "mlp", "ln", "w1", "w2")
    ]
    batch = batch[:1002]
    patterns = [pattern for pattern, _ in RULES]

    compiled_rules = [backtracking(pattern) for pattern in patterns]  # kept, as they were

    def ingest_before() -> None:
        for compiled in compiled_rules:
            [name for name in batch if compiled.fullmatch(name)]

    def ingest_now() -> None:
        index = NameIndex(batch)
        for pattern in patterns:
            index.matching(pattern)

    assert [backtracking(p).fullmatch(n) is not None for p in patterns for n in batch] == [
        metric_matches(p, n) for p in patterns for n in batch
    ]
    row("ingest: 50 rules x a batch of 1,002 names", *_pair(ingest_before, ingest_now, args))

    names = [f"grad/norm/layers.{i}/w{j}" for i in range(200) for j in range(100)]
    for glob in ("grad/norm/layers.1*/w[0-3]", "**/w7", "**", "grad/*/layers.1*/w*"):
        compiled = backtracking(glob.replace("[0-3]", "?"))
        index = NameIndex(names)

        def read_before(c: re.Pattern[str] = compiled) -> None:
            [name for name in names if c.fullmatch(name)]

        def read_first(g: str = glob) -> None:
            NameIndex(names).matching(g)

        def read_kept(g: str = glob, i: NameIndex = index) -> None:
            i.matching(g)

        before = median_ms(read_before, args.repeat)
        row(f"read: {glob} x 20,000 names, first pass", before, median_ms(read_first, args.repeat))
        row(f"read: {glob} x 20,000 names, kept", before, median_ms(read_kept, args.repeat))

    name = "x" * 51
    for stars in (8, 12, 14):
        pattern = "*" * stars + "#"
        hostile = backtracking(pattern)  # every two stars a ``.*``

        def hostile_before(h: re.Pattern[str] = hostile) -> None:
            h.fullmatch(name)

        def hostile_now(p: str = pattern) -> None:
            metric_matches(p, name)

        what = f"hostile: {stars} stars x one 51-character name"
        row(what, *_pair(hostile_before, hostile_now, args, repeat=1))
    print(table(["workload", "before ms", "now ms", "before / now"], rows))


def _pair(
    before: Callable[[], object],
    now: Callable[[], object],
    args: argparse.Namespace,
    repeat: int | None = None,
) -> tuple[float, float]:
    times = repeat if repeat is not None else args.repeat
    return median_ms(before, times), median_ms(now, args.repeat)


if __name__ == "__main__":
    main()
