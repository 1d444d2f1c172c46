"""What the trainer client costs the training loop, against baselines measured in the same run.

(a) ``Run.log`` on the training thread. One dict of ``--metrics`` Python floats (per-layer
norm names) is logged ``--calls`` times to a `normwatch.client.Run` whose transport is an
`httpx.MockTransport` answering at once, so only the client is measured; its writer and
sender threads run as they do in a trainer. Each call is timed alone; reported: median and
p99. Baseline: ``dict(metrics)`` kept alive as the queue keeps a record until the writer
takes its batch (25 records of 2,000), the least a client that copies the dict can do. Beside
it, ``log`` of the same values as one `PackedMetrics` (no copy). The variants take turns
call by call, in an order that rotates, so that the machine's drift falls on all of them.
Two patterns: back to back (the background threads converting, spooling and sending
earlier steps compete for the GIL), and each call right after a jitted step of ``--pace``
ms run to completion, which leaves the caches as a training step does. The client spools
to a temporary folder.

(b) A jitted AdamW train step of a 6-layer residual MLP of about 11M parameters (layers
stacked and run with ``lax.scan``) on the CPU, with and without
`normwatch.client.jax.stability_metrics` (grads, params, updates, Adam moments), and with
``every=10``. The three run in turn, one step each, so that other load on the machine
slows them alike; median step time over ``--steps`` steps each after warm-up; ratio to off.

(c) Cost of many scalar outputs: a 48-layer stack of 10 small leaves gives about 1,600
metrics (grads, params, updates); compile time and per-call host time of the jitted function
returning them, with ``per_leaf=False`` (totals and per-layer norms only), and the same
values returned as one vector.

(d) Leaf count: ``stability_metrics`` of grads and params over 10, 100, 1,000 and 5,000
leaves (``--leaves``), as the per-leaf dict and ``packed=True``: compile time, and host time
a step (the jitted call plus `Run.log` of what it returned, the log part also alone).
Baseline: the same function with ``per_leaf=False`` (the two totals only), which takes the
same inputs: what is left above it is the cost of the outputs.

Run from the repository root::

    .venv/bin/python benchmarks/client_overhead.py            # ~1.5 min
    .venv/bin/python benchmarks/client_overhead.py --quick    # fewer calls and steps
    .venv/bin/python benchmarks/client_overhead.py --only-leaves --leaves 10,100,1000,5000
    .venv/bin/python benchmarks/client_overhead.py --only-log   # (a) alone, ~20 s
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import httpx
import jax
import jax.numpy as jnp
import optax
from _harness import percentile, say, table

from normwatch.client import PackedMetrics, Run
from normwatch.client.jax import stability_metrics


def answer_at_once(request: httpx.Request) -> httpx.Response:
    if request.method == "PATCH":
        return httpx.Response(200, json={"id": "run-1"})
    if request.url.path.endswith("/runs"):
        return httpx.Response(200, json={"id": "run-1", "segment": 1})
    return httpx.Response(202, json={"accepted": 0, "segment": 1})


def paced_step(pace_ms: float) -> Callable[[], object]:
    """A jitted matmul chain taking about ``pace_ms`` on this machine, run to completion:
    what a training step leaves the caches in when `log` is called after it."""

    @functools.partial(jax.jit, static_argnums=1)
    def work(x: jax.Array, repeats: int) -> jax.Array:
        return jax.lax.fori_loop(0, repeats, lambda _, y: jnp.tanh(y @ y), x)

    x = jnp.full((256, 256), 0.01)
    work(x, 8).block_until_ready()
    started = time.perf_counter()
    for _ in range(5):
        work(x, 8).block_until_ready()
    per_repeat = (time.perf_counter() - started) / 40
    repeats = max(1, round(pace_ms / 1e3 / per_repeat))
    work(x, repeats).block_until_ready()
    return lambda: work(x, repeats).block_until_ready()


def bench_log(n_metrics: int, calls: int, pace_ms: float) -> list[list[str]]:
    """Each round times one call of every variant, in an order that rotates from round to
    round, so that drift in the machine's speed falls on all of them alike."""
    metrics = {f"grad/norm/layers.{i // 10}.w{i % 10}": 0.1 + i * 1e-4 for i in range(n_metrics)}
    packed = PackedMetrics(list(metrics), jnp.asarray(list(metrics.values())))
    batch_points = 50_000
    # The queue holds a record until the writer takes a batch: as many copies stay alive.
    keep = max(1, batch_points // n_metrics)
    kept: collections.deque[dict[str, float]] = collections.deque()
    step = paced_step(pace_ms)
    rows = []
    for label, pace in (("back to back", None), (f"after a {pace_ms:g} ms jitted step", step)):
        run = Run(
            "http://normwatch.test",
            token="nw_bench",
            name=f"bench-{len(rows)}",
            transport=httpx.MockTransport(answer_at_once),
            max_batch_points=batch_points,
            max_queue_points=n_metrics * calls * 4,
        )
        # Each returns what it made, freed after the clock stops: `log` frees nothing on the
        # training thread (the writer frees a batch), so neither do its baselines.
        variants: dict[str, Callable[[int], object]] = {
            "kept": lambda i: kept.append(dict(metrics)),
            "log": lambda i, run=run: run.log(metrics, step=i),
            "packed": lambda i, run=run: run.log(packed, step=i),
        }
        names = list(variants)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for i in range(calls):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                if pace is not None:
                    pace()
                started = time.perf_counter()
                made = variants[name](i)
                samples[name].append(time.perf_counter() - started)
                del made
                if len(kept) > keep:
                    kept.popleft()
        run.finish(timeout=300)
        kept.clear()
        median = {name: statistics.median(values) for name, values in samples.items()}
        rows.append(
            [
                label,
                f"{median['log'] * 1e6:.1f} µs",
                f"{percentile(sorted(samples['log']), 99) * 1e6:.1f} µs",
                f"{median['kept'] * 1e6:.1f} µs",
                f"**{median['log'] / median['kept']:.2f}**",
                f"{median['packed'] * 1e6:.1f} µs",
                f"{run.sent_points:,} / {run.dropped_points:,}",
            ]
        )
        say(f"  {label}: log median {median['log'] * 1e6:.1f} µs")
    return rows


def mlp_loss(params: Any, batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    inputs, targets = batch
    x = inputs @ params["w_in"]

    def layer(x: jax.Array, weights: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        return x + jax.nn.gelu(x @ weights["w"] + weights["b"]), None

    x, _ = jax.lax.scan(layer, x, params["layers"])
    return jnp.mean((x @ params["w_out"] - targets) ** 2)


def bench_train_step(width: int, batch_size: int, steps: int) -> list[list[str]]:
    keys = jax.random.split(jax.random.key(0), 6)
    n_layers = 6
    params = {
        "w_in": jax.random.normal(keys[0], (64, width)) / 8,
        "layers": {
            "w": jax.random.normal(keys[1], (n_layers, width, width)) / width**0.5 / 4,
            "b": jnp.zeros((n_layers, width)),
        },
        "w_out": jax.random.normal(keys[2], (width, 16)) / width**0.5,
    }
    n_params = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))
    batch = (
        jax.random.normal(keys[3], (batch_size, 64)),
        jax.random.normal(keys[4], (batch_size, 16)),
    )
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))

    def make_step(mode: str) -> Callable[..., Any]:
        def step_fn(params: Any, opt_state: Any, step: jax.Array) -> Any:
            loss, grads = jax.value_and_grad(mlp_loss)(params, batch)
            updates, opt_state = tx.update(grads, opt_state, params)
            metrics = {"train/loss": loss}
            if mode != "off":
                every = 10 if mode == "every=10" else 1
                metrics |= stability_metrics(
                    grads, params, updates, opt_state, every=every, step=step
                )
            return optax.apply_updates(params, updates), opt_state, step + 1, metrics

        return jax.jit(step_fn, donate_argnums=(0, 1))

    modes = ("off", "on", "every=10")
    step_fns = {mode: make_step(mode) for mode in modes}
    states: dict[str, tuple[Any, ...]] = {}
    outputs: dict[str, int] = {}
    for mode in modes:
        state: tuple[Any, ...] = (
            jax.tree_util.tree_map(jnp.copy, params),
            tx.init(params),
            jnp.int32(0),
        )
        started = time.perf_counter()
        for _ in range(3):  # compile, then settle
            *state_list, metrics = step_fns[mode](*state)
            state = tuple(state_list)
            jax.block_until_ready(metrics)
        states[mode] = state
        outputs[mode] = len(metrics)
        say(f"  {mode}: compiled and warmed up in {time.perf_counter() - started:.1f} s")
    # Round robin, so that anything else running on the machine slows all modes alike.
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(steps):
        for mode in modes:
            started = time.perf_counter()
            *state_list, metrics = step_fns[mode](*states[mode])
            states[mode] = tuple(state_list)
            jax.block_until_ready((states[mode], metrics))
            samples[mode].append(time.perf_counter() - started)
    medians = {mode: statistics.median(samples[mode]) for mode in modes}
    for mode in modes:
        say(f"  {mode}: median {medians[mode] * 1e3:.1f} ms")
    base = medians["off"]
    return [
        [
            mode,
            f"{n_params / 1e6:.1f}M",
            str(outputs[mode]),
            f"{medians[mode] * 1e3:.1f} ms",
            f"**{medians[mode] / base:.3f}**",
        ]
        for mode in medians
    ]


def bench_outputs(n_layers: int, repeat: int) -> list[list[str]]:
    tree = {
        "layers": {f"p{i}": jnp.ones((n_layers, 16, 16)) for i in range(10)},
        "embed": jnp.ones((100, 16)),
    }

    def as_vector(g: Any, p: Any) -> jax.Array:
        return jnp.stack(list(stability_metrics(g, p, g).values()))

    variants = {
        "dict of scalars": jax.jit(lambda g, p: stability_metrics(g, p, g)),
        "dict, per_leaf=False": jax.jit(lambda g, p: stability_metrics(g, p, g, per_leaf=False)),
        "one vector (same values as the first)": jax.jit(as_vector),
    }
    rows = []
    for label, fn in variants.items():
        started = time.perf_counter()
        compiled = fn.lower(tree, tree).compile()
        compile_s = time.perf_counter() - started
        out = compiled(tree, tree)
        jax.block_until_ready(out)
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            out = compiled(tree, tree)
            samples.append(time.perf_counter() - started)
            jax.block_until_ready(out)
        n_out = len(out) if isinstance(out, dict) else int(out.shape[0])
        rows.append(
            [
                label,
                f"{n_out:,}",
                f"{compile_s:.1f} s",
                f"{statistics.median(samples) * 1e3:.2f} ms",
            ]
        )
        say(f"  {label}: {n_out} values, compile {compile_s:.1f} s")
    return rows


def bench_leaves(counts: list[int], repeat: int) -> list[list[str]]:
    """(d) Compile time and host time per step against the number of leaves: per-leaf dict
    against `packed=True`; the step is the norms of grads and params of ``n`` leaves, and
    host time includes `Run.log` of what it returned (to a client that sends nowhere)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="normwatch-bench-spool-") as spool:
        os.environ["NORMWATCH_SPOOL_DIR"] = spool
        run = Run(
            "http://bench.invalid",
            token="nw_bench",
            name="leaves",
            transport=httpx.MockTransport(answer_at_once),
        )
        for n in counts:
            tree: dict[str, dict[str, jax.Array]] = {}
            for i in range(n):  # blocks of 100 leaves, as a model's modules group them
                tree.setdefault(f"block{i // 100}", {})[f"w{i}"] = jnp.ones((8, 8))
            cells = [f"{n:,}"]
            for mode in ("dict", "packed", "totals"):
                fn = jax.jit(
                    lambda g, p, mode=mode: stability_metrics(
                        g, p, packed=mode == "packed", per_leaf=mode != "totals"
                    )
                )
                started = time.perf_counter()
                compiled = fn.lower(tree, tree).compile()
                compile_s = time.perf_counter() - started
                out = compiled(tree, tree)
                jax.block_until_ready(out)
                samples, log_samples = [], []
                for step in range(repeat):
                    started = time.perf_counter()
                    out = compiled(tree, tree)
                    called = time.perf_counter()
                    run.log(out, step=step)
                    logged = time.perf_counter()
                    samples.append(logged - started)
                    log_samples.append(logged - called)
                    jax.block_until_ready(out)
                outputs = 1 if mode == "packed" else len(out)
                cells += [
                    f"{outputs:,}",
                    f"{compile_s:.2f} s",
                    f"{statistics.median(samples) * 1e3:.3f} ms",
                ]
                if mode != "totals":
                    cells.append(f"{statistics.median(log_samples) * 1e6:.1f} µs")
                say(
                    f"  {n} leaves, {mode}: {outputs} outputs, compile {compile_s:.2f} s, "
                    f"host {statistics.median(samples) * 1e3:.3f} ms"
                )
            rows.append(cells)
        run.finish(timeout=30.0)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--pace", type=float, default=2.0, help="ms of jitted work before each paced call"
    )
    parser.add_argument("--width", type=int, default=1344, help="MLP width (6 layers)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--leaves", default="10,100,1000,5000", help="leaf counts for (d), comma separated"
    )
    parser.add_argument("--only-leaves", action="store_true", help="run (d) alone")
    parser.add_argument("--only-log", action="store_true", help="run (a) alone")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.steps, args.width = 500, 5, 512
    counts = [int(n) for n in args.leaves.split(",") if n.strip()]
    leaves_header = [
        "leaves",
        "dict: outputs",
        "compile",
        "host time a step",
        "of it, log",
        "packed: outputs",
        "compile",
        "host time a step",
        "of it, log",
        "totals only (baseline): outputs",
        "compile",
        "host time a step",
    ]
    if args.only_leaves:
        say(f"(d) leaves {counts}: per-leaf dict against packed")
        print()
        print(table(leaves_header, bench_leaves(counts, repeat=20)))
        return

    say(f"(a) Run.log of {args.metrics:,} floats, {args.calls:,} calls")
    with tempfile.TemporaryDirectory(prefix="normwatch-bench-spool-") as spool:
        os.environ["NORMWATCH_SPOOL_DIR"] = spool  # the client spools here, not in the cwd
        log_rows = bench_log(args.metrics, args.calls, args.pace)
    log_table = table(
        [
            f"Run.log, {args.metrics:,} floats",
            "log median",
            "log p99",
            "dict() kept, median",
            "ratio log / kept",
            "packed log median",
            "points sent / dropped",
        ],
        log_rows,
    )
    if args.only_log:
        print()
        print(log_table)
        return
    say(f"(b) train step, width {args.width}, batch {args.batch_size}, {args.steps} steps")
    step_rows = bench_train_step(args.width, args.batch_size, args.steps)
    say("(c) many scalar outputs")
    output_rows = bench_outputs(n_layers=48 if not args.quick else 8, repeat=50)
    say(f"(d) leaves {counts}: per-leaf dict against packed")
    leaves_rows = bench_leaves(counts if not args.quick else counts[:3], repeat=20)

    print()
    print(log_table)
    print()
    print(
        table(
            ["train step", "parameters", "outputs", "median step", "ratio to off"],
            step_rows,
        )
    )
    print()
    print(table(["returned as", "values", "compile", "host time per call"], output_rows))
    print()
    print(table(leaves_header, leaves_rows))


if __name__ == "__main__":
    main()
