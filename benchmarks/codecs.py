"""Value codecs for compacted chunks, on the kinds of series runs log: bytes a value and the
time to decode a chunk, each against the codec chunks use today, in the same run.

Series (each cut into 4,096-point chunks, as the compactor cuts them):

* the llm.c GPT-2 log shipped in ``normwatch/data``: its loss (``trl``, 6 decimals) and
  its grad norm (``norm``, printed to 4 significant digits), 19,560 steps;
* the demo's simulated run (`normwatch.simulate.SimulatedRun`, 200,000 steps): the loss,
  the total grad norm, the final norm's gain, the update norm, one layer's grad norm, the
  learning rate and the token counter;
* a noisy random walk, the worst case of a smooth-looking metric.

Codecs: **shuffled zlib** (what `storage.chunks` writes today: the bytes of every value
grouped by position, then deflate at level 1) and **pcodec** (`pcodec.standalone`, default
config), on the values as float32 (the default precision) and as float64. Every codec is
checked to give back the values bit for bit. Baseline: shuffled zlib on float32.

    .venv/bin/python benchmarks/codecs.py
"""

from __future__ import annotations

import statistics
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from _harness import say, table
from pcodec import ChunkConfig, standalone

from normwatch.client.importers.llmc import parse_llmc_log
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


def main() -> int:
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
        say(f"median over the series, {key}: {middle:.2f} B a value ({middle / base:.2f}x today's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
