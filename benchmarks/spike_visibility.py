"""Does a one-step spike survive the chart's downsampling? M4 against the incumbents' samplers.

One command::

    .venv/bin/python benchmarks/spike_visibility.py [--trials 200] [--steps 1000000]

A series of ``--steps`` noisy values (grad-norm-like, 0.3 ± 0.01) gets one spike of 10× at a
random step; each sampler picks the points a chart would draw, at three zoom levels (the full
run, a 100k-step window and a 10k-step window, each containing the spike). A trial counts as
"visible" when the spike's step is among the drawn points. The samplers model what the
incumbents document or ship:

- ``m4``: normwatch's ``m4_select`` with 1,000 buckets (first, last, min and max per bucket);
- ``last-per-bucket``: one value per bucket, the last (a line chart of bucket means or last
  values; W&B's default line);
- ``first-per-slice-320``: 320 evenly spaced slices, the first point of each (MLflow's
  sampling for its charts);
- ``reservoir-1000``: uniform reservoir sampling of 1,000 points (TensorBoard's default for
  scalars), drawn once over the whole run and then zoomed;
- ``uniform-500``: every k-th point for 500 points (a stride sampler, as Aim's default density).

The baseline is ``last-per-bucket``; the ratio printed is visibility(m4) / visibility(baseline).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from normwatch.server.storage.m4 import m4_select

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Sampler = Callable[[IntArray, FloatArray, int, int, np.random.Generator], IntArray]


def m4(
    steps: IntArray, values: FloatArray, lo: int, hi: int, _rng: np.random.Generator
) -> IntArray:
    return m4_select(steps, values, 1000, lo, hi)


def last_per_bucket(
    steps: IntArray, values: FloatArray, lo: int, hi: int, _rng: np.random.Generator
) -> IntArray:
    buckets = ((steps - lo) * 1000 // (hi - lo + 1)).astype(np.int64)
    last = np.flatnonzero(np.r_[buckets[1:] != buckets[:-1], True])
    return last


def first_per_slice_320(
    steps: IntArray, values: FloatArray, lo: int, hi: int, _rng: np.random.Generator
) -> IntArray:
    slices = ((steps - lo) * 320 // (hi - lo + 1)).astype(np.int64)
    return np.flatnonzero(np.r_[True, slices[1:] != slices[:-1]])


def uniform_500(
    steps: IntArray, values: FloatArray, lo: int, hi: int, _rng: np.random.Generator
) -> IntArray:
    stride = max(1, len(steps) // 500)
    return np.arange(0, len(steps), stride, dtype=np.int64)


SAMPLERS: dict[str, Sampler] = {
    "m4": m4,
    "last-per-bucket": last_per_bucket,
    "first-per-slice-320": first_per_slice_320,
    "uniform-500": uniform_500,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20 trials of 100k steps")
    args = parser.parse_args()
    trials, n = (20, 100_000) if args.quick else (args.trials, args.steps)
    rng = np.random.default_rng(0)
    steps = np.arange(n, dtype=np.int64)
    windows = {"full run": n, "100k window": min(n, 100_000), "10k window": min(n, 10_000)}
    names = [*SAMPLERS, "reservoir-1000"]
    seen = {(name, w): 0 for name in names for w in windows}
    started = time.monotonic()
    for trial in range(trials):
        values = 0.3 + 0.01 * rng.standard_normal(n)
        spike = int(rng.integers(n))
        values[spike] = 3.0
        # A reservoir is drawn once for the whole run; zooming only filters it.
        reservoir = np.sort(rng.choice(n, size=min(1000, n), replace=False))
        for window_name, width in windows.items():
            lo = int(np.clip(spike - rng.integers(width), 0, n - width))
            hi = lo + width - 1
            s, v = steps[lo : hi + 1], values[lo : hi + 1]
            for name, sampler in SAMPLERS.items():
                kept = s[sampler(s, v, lo, hi, rng)]
                seen[(name, window_name)] += int(spike in set(kept.tolist()))
            seen[("reservoir-1000", window_name)] += int(spike in set(reservoir.tolist()))
        if (trial + 1) % max(1, trials // 10) == 0:
            print(f"  {trial + 1}/{trials} trials ({time.monotonic() - started:.0f} s)", flush=True)
    print()
    print(f"## One-step spike visible, {trials} trials, {n:,} steps")
    print()
    print("| sampler | " + " | ".join(windows) + " |")
    print("|---|" + "---:|" * len(windows))
    for name in names:
        cells = [f"{100 * seen[(name, w)] / trials:.1f}%" for w in windows]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    for w in windows:
        base = seen[("last-per-bucket", w)] / trials
        ours = seen[("m4", w)] / trials
        ratio = "∞" if base == 0 else f"{ours / base:.1f}"
        print(f"ratio m4 / last-per-bucket, {w}: {ratio}  ({ours:.1%} vs {base:.1%})")


if __name__ == "__main__":
    main()
