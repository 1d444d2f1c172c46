"""Value codecs for compacted chunks, on the kinds of series runs log: bytes a value and the
time to decode a chunk, each against the codec chunks use today, in the same run.

Series (each cut into 4,096-point chunks, as the compactor cuts them):

* the llm.c GPT-2 log shipped in ``normwatch/data``: its loss (``trl``, 6 decimals) and
  its grad norm (``norm``, printed to 4 significant digits), 19,560 steps;
* the demo's simulated run (`normwatch.simulate.SimulatedRun`, 200,000 steps): the loss,
  the total grad norm, the final norm's gain, the update norm, one layer's grad norm, the
  learning rate and the token counter;
* a noisy random walk, the worst case of a smooth-looking metric;
* random values printed to 6 decimals (what text logs and importers give: ``0.412345``,
  ``16.017241``), uniform in [0, 1) and in [0, 100);
* a float32 random walk (what a JAX trainer logs: each value a float32, arriving as its
  exact float64).

Codecs: **shuffled zlib** (what chunks held before pcodec: the bytes of every value
grouped by position, then deflate at level 1) and **pcodec** (`pcodec.standalone`, default
config), on the values as float32 and as float64. Every codec is checked to give back the
values bit for bit. Baseline: shuffled zlib on float32.

Then **precision**: what a chunk (`storage.chunks.encode`, pcodec at level 4, its header
included) costs a value at each compaction precision: float32 (rounded: the default before,
now the opt-in lossy setting) and float64 (lossless, the default), and how many of the
series' values float32 would have changed.

    .venv/bin/python benchmarks/codecs.py
    .venv/bin/python benchmarks/codecs.py --precision-only    # the second table, ~10 s
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from _harness import say, table
from pcodec import ChunkConfig, standalone

from normwatch.client.importers.llmc import parse_llmc_log
from normwatch.server.storage import chunks
from normwatch.server.storage.chunks import Points
from normwatch.simulate import SimulatedRun

CHUNK = 4096
LLMC = Path(__file__).resolve().parent.parent / "normwatch" / "data"


def series() -> Iterator[tuple[str, np.ndarray]]:
    """Each series' name and values (float64, as logged)."""
    log = next(LLMC.glob("*.log"))
    rows = list(parse_llmc_log(log.read_text().splitlines()))
    for key, name in (("train/loss", "llm.c loss"), ("grad/norm/total", "llm.c grad norm")):
        yield name, np.array([m[key] for _, m in rows if key in m], dtype=np.float64)
    _, metrics = SimulatedRun(seed=0).block(0, 200_000)
    for key in (
        "train/loss",
        "grad/norm/total",
        "params/norm/final_norm.weight",
        "updates/norm/total",
        "grad/norm/layers.10",
        "optim/lr",
        "throughput/total_tokens",
    ):
        values = metrics[key]
        yield f"simulated {key}", values[np.isfinite(values) | np.isnan(values)]
    rng = np.random.default_rng(0)
    yield "random walk", 10.0 + np.cumsum(rng.standard_normal(200_000)) * 0.01
    # Six decimals below 1 are six significant digits, which a float32's shortest decimal
    # keeps; from 10 up they are eight (16.017241), which it does not.
    yield "random 6-decimal values in [0, 1)", np.round(rng.uniform(0.0, 1.0, 200_000), 6)
    yield "random 6-decimal values in [0, 100)", np.round(rng.uniform(0.0, 100.0, 200_000), 6)
    walk = 10.0 + np.cumsum(rng.standard_normal(200_000)) * 0.01
    yield "float32 random walk", walk.astype(np.float32).astype(np.float64)


def shuffled_zlib(values: np.ndarray) -> bytes:
    width = values.dtype.itemsize
    arr = np.frombuffer(values.tobytes(), dtype=np.uint8).reshape(-1, width)
    return zlib.compress(np.ascontiguousarray(arr.T).tobytes(), 1)


def unshuffled_zlib(blob: bytes, dtype: np.dtype) -> np.ndarray:
    width = dtype.itemsize
    arr = np.frombuffer(zlib.decompress(blob), dtype=np.uint8).reshape(width, -1)
    return np.frombuffer(np.ascontiguousarray(arr.T).tobytes(), dtype=dtype)


def pco(values: np.ndarray) -> bytes:
    return bytes(standalone.simple_compress(values, ChunkConfig()))


def unpco(blob: bytes, dtype: np.dtype) -> np.ndarray:
    out: np.ndarray = standalone.simple_decompress(blob)
    return out


Codec = tuple[Callable[[np.ndarray], bytes], Callable[[bytes, np.dtype], np.ndarray]]
CODECS: dict[str, Codec] = {
    "shuffled zlib": (shuffled_zlib, unshuffled_zlib),
    "pcodec": (pco, unpco),
}


def measure(values: np.ndarray, codec: Codec) -> tuple[float, float]:
    """Bytes a value, and microseconds to decode a chunk (median), checked bit for bit."""
    encode, decode = codec
    size = 0
    times = []
    for lo in range(0, len(values), CHUNK):
        part = np.ascontiguousarray(values[lo : lo + CHUNK])
        blob = encode(part)
        size += len(blob)
        started = time.perf_counter()
        back = decode(blob, part.dtype)
        times.append((time.perf_counter() - started) * 1e6)
        if back.tobytes() != part.tobytes():
            raise AssertionError("a codec changed a value")
    return size / len(values), statistics.median(times)


def precision_table() -> None:
    """Bytes a value of whole chunks at each compaction precision, on every series."""
    rows = []
    for name, logged in series():
        steps = np.arange(len(logged), dtype=np.int64)
        sizes = {}
        for precision in ("float32", "float64"):
            size = 0
            for lo in range(0, len(logged), CHUNK):
                part = Points(steps[lo : lo + CHUNK], np.ascontiguousarray(logged[lo : lo + CHUNK]))
                blob = chunks.encode(part, precision)
                size += len(blob)
                if precision == "float64" and chunks.decode(blob).values.tobytes() != (
                    part.values.tobytes()
                ):
                    raise AssertionError("a float64 chunk changed a value")
            sizes[precision] = size / len(logged)
        rounded = chunks.stored_values(logged, "float32")
        changed = np.count_nonzero(rounded.view(np.uint64) != logged.view(np.uint64))
        rows.append(
            [
                name,
                f"{len(logged):,}",
                f"{sizes['float32']:.2f}",
                f"**{sizes['float64']:.2f}**",
                f"{sizes['float64'] / sizes['float32']:.2f}",
                f"{changed / len(logged):.0%}",
            ]
        )
    headers = ["series", "values", "float32 (rounded)", "float64 (lossless)", "ratio"]
    headers.append("values float32 changes")
    say("")
    say("bytes a value of 4,096-value chunks (pcodec level 4, header included)")
    say(table(headers, rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--precision-only", action="store_true", help="only the chunks' bytes at each precision"
    )
    args = parser.parse_args(argv)
    if args.precision_only:
        precision_table()
        return 0
    rows = []
    totals: dict[str, list[float]] = {}
    for name, logged in series():
        row = [name, f"{len(logged):,}"]
        for dtype in (np.float32, np.float64):
            values = logged.astype(dtype)
            for codec_name, codec in CODECS.items():
                per_value, micros = measure(values, codec)
                key = f"{codec_name} {np.dtype(dtype).name}"
                totals.setdefault(key, []).append(per_value)
                row.append(f"{per_value:.2f} B, {micros:.0f} µs")
        rows.append(row)
        say(f"  {name}: done")
    headers = ["series", "values"]
    headers += [f"{c} {np.dtype(d).name}" for d in (np.float32, np.float64) for c in CODECS]
    say("")
    say(table(headers, rows))
    base = statistics.median(totals["shuffled zlib float32"])
    say("")
    for key, sizes in totals.items():
        middle = statistics.median(sizes)
        say(f"median over the series, {key}: {middle:.2f} B a value ({middle / base:.2f}x zlib's)")
    precision_table()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
