"""How long the spike finder takes on long series, and how that grows with their length.

One command::

    .venv/bin/python benchmarks/spike_finder.py [--sizes 50001 200001 1000001] [--repeat 3]

Series (all in memory, no database):

- ``sawtooth``: ``1 + (step % 8) / 16`` (exact in float32) with spikes of 37.5 and 52.25 at
  60 % and 82 % of the run (steps 29,988 and 41,134 of 50,001). Its blocks' spread reads 0,
  so every tooth's top is a spike of its own: one spike every 8 steps, the finder's worst case;
- ``walk``: a random walk around 10 with Gaussian noise (SD 0.05) and one spike of 1.2-6x
  every 2,000 steps (one-step blips, short bursts and slow decays); some end far later than
  they started, or never;
- ``walk-low``: the same around 1 with noise of SD 0.1, past 5 % of the level, so the lower
  threshold finds noise spikes too;
- ``llmc/<metric>``: each metric of the llm.c log shipped with the package (19,561 steps).

Measured, the fastest of ``--repeat`` calls (wall clock, in seconds) of ``find_spikes`` at the
default threshold (5.25), and of ``kept_spikes.spikes_of``: what the server keeps per run for
the run page's spikes and the compare summary (spikes at 5.25 and at 4.0, and the noise SD).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

import normwatch
from normwatch.client.importers.llmc import parse_llmc
from normwatch.server.analytics.spikes import THRESHOLD, find_spikes
from normwatch.server.services.kept_spikes import spikes_of

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Series = tuple[str, IntArray, FloatArray]

LLMC_LOG = Path(normwatch.__file__).parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"


def sawtooth(n: int) -> Series:
    """The period-8 sawtooth with its two spikes (see the module docstring)."""
    steps = np.arange(n, dtype=np.int64)
    values = (1 + (steps % 8) / 16).astype(np.float32).astype(np.float64)
    values[n * 29_988 // 50_001] = 37.5
    values[n * 41_134 // 50_001] = 52.25
    return "sawtooth", steps, values


def walk(n: int, level: float, noise: float, name: str) -> Series:
    """A random walk around ``level`` with noise of SD ``noise`` and a spike in 2,000 steps."""
    rng = np.random.default_rng(0)
    trend = level + np.cumsum(rng.normal(0, 0.01, n))
    values = trend + rng.normal(0, noise, n)
    for at in rng.choice(n, size=max(1, n // 2_000), replace=False).tolist():
        length = int(rng.choice([1, 3, 40, 400]))
        shape = np.exp(-np.arange(min(length, n - at)) / max(1, length / 4))
        values[at : at + len(shape)] += (rng.uniform(1.2, 6.0) - 1) * abs(trend[at]) * shape
    return name, np.arange(n, dtype=np.int64), values


def llmc() -> Iterator[Series]:
    """Each metric of the llm.c log, in step order."""
    points: dict[str, dict[int, float]] = {}
    for step, metrics in parse_llmc(LLMC_LOG):
        for name, value in metrics.items():
            points.setdefault(name, {})[step] = value
    for name, by_step in sorted(points.items()):
        steps = sorted(by_step)
        values = [by_step[s] for s in steps]
        yield f"llmc/{name}", np.array(steps, dtype=np.int64), np.array(values)


def fastest(call: Callable[[], object], repeat: int) -> float:
    """The shortest wall-clock time of ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return min(times)


def measure(series: Series, repeat: int) -> str:
    """One row: the series, its length, the spikes found and the two timings."""
    name, steps, values = series
    found = find_spikes(steps, values)
    alone = fastest(lambda: find_spikes(steps, values, threshold=THRESHOLD), repeat)
    kept = fastest(lambda: spikes_of(steps, values, THRESHOLD), repeat)
    return f"| {name} | {len(steps):,} | {len(found):,} | {alone:.3f} | {kept:.3f} |"


def main(argv: list[str] | None = None) -> int:
    """Print a Markdown table of the timings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_001, 200_001, 1_000_001])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--series", nargs="+", default=["sawtooth", "walk", "walk-low", "llmc"])
    args = parser.parse_args(argv)
    print("| series | points | spikes | find_spikes (s) | spikes_of, 5.25 + 4.0 (s) |")
    print("|---|---:|---:|---:|---:|")
    makers: dict[str, Callable[[int], Series]] = {
        "sawtooth": sawtooth,
        "walk": lambda n: walk(n, 10.0, 0.05, "walk"),
        "walk-low": lambda n: walk(n, 1.0, 0.1, "walk-low"),
    }
    for kind in args.series:
        if kind == "llmc":
            for series in llmc():
                print(measure(series, args.repeat), flush=True)
            continue
        for n in args.sizes:
            print(measure(makers[kind](n), args.repeat), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
