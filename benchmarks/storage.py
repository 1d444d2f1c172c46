"""Bytes a point at rest for the whole database, after the compactor and ``VACUUM FULL``.

What runs: a real ``normwatch serve --no-migrate`` (its compactor beside it, idle clock 5 s
so that each series' last partial chunk is compacted too) on a scratch Postgres database
that the script creates, migrates and drops. The trainer client (``normwatch.client.Run``)
posts a load as trainers do, the script waits until no point is hot, runs ``VACUUM FULL``
and reports what the database weighs.

Loads (``--load``):

- ``storage`` (default): two runs. A simulated 48-layer model (`normwatch.simulate`:
  loss, grad/update/param norms of every part and their totals, physically consistent) with
  every part logged at every step for ``--steps`` steps (155 metrics; 200,000 steps give
  31M points), and the real llm.c GPT-2 124M log (loss, grad norm, learning rate, eval).
- ``demo``: what ``normwatch demo`` stores before its live phase: the same simulated model's
  78,500 steps of history with parts every 100 steps, and the llm.c log.

Reported: the database (``pg_database_size``) over the stored points, and the same less an
empty migrated database measured the same way (catalogs, empty tables: a fixed ~8 MB);
each table's heap, indexes and TOAST; and the bytes of each kind of blob in ``chunks``.

``--before REV`` measures the same load first on the server of an earlier commit (built
from a ``git worktree`` into a temporary folder and run with it first on ``PYTHONPATH``),
then on this tree's, and prints them side by side. Each server's database is migrated by
its own tree. ``--precision float32,float64`` measures this tree's server once per
compaction precision (``NORMWATCH_COMPACTION_PRECISION``; float64, lossless, is the
default), side by side. ``--values float32`` logs the simulated values rounded to float32,
as a JAX trainer's float32 metrics arrive (the simulator computes in float64, with noise in
every bit).

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``)::

    .venv/bin/python benchmarks/storage.py                       # ~2 min
    .venv/bin/python benchmarks/storage.py --before HEAD~3       # before and after
    .venv/bin/python benchmarks/storage.py --load demo
    .venv/bin/python benchmarks/storage.py --load demo --precision float32,float64
    .venv/bin/python benchmarks/storage.py --load demo --precision float32,float64 --values float32
    .venv/bin/python benchmarks/storage.py --quick                # 3.3M points, ~10 s
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg
from _harness import base_pg_url, say, table

from normwatch.client import Run
from normwatch.client.importers.llmc import import_llmc
from normwatch.demo import HISTORY_END, LLMC_LOG
from normwatch.scratch import create_database, drop_database
from normwatch.simulate import SimulatedRun
from normwatch.testing import running_server

ROOT = Path(__file__).resolve().parent.parent
DRAIN_TIMEOUT_S = 900
BLOCK_STEPS = 2_000
QUEUE_POINTS = 2_000_000


@dataclass
class Measured:
    label: str
    points: int = 0
    database: int = 0
    empty: int = 0
    load_s: float = 0.0
    drain_s: float = 0.0
    relations: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    blobs: dict[str, int] = field(default_factory=dict)


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@contextmanager
def built(rev: str) -> Iterator[Path]:
    """The package at ``rev``, installed into a temporary folder (for ``PYTHONPATH``)."""
    with tempfile.TemporaryDirectory(prefix="normwatch-before-") as folder:
        tree, lib = Path(folder) / "tree", Path(folder) / "lib"
        say(f"building {rev} into {lib}")
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(tree), rev],
            cwd=ROOT,
            check=True,
        )
        try:
            # The package as pyproject.toml maps it (``normwatch.server`` is ``server/``...),
            # linked rather than installed: nothing is built.
            with (tree / "pyproject.toml").open("rb") as f:
                dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
            for package, folder in sorted(dirs.items()):
                target = lib.joinpath(*package.split("."))
                target.parent.mkdir(parents=True, exist_ok=True)
                if package == "normwatch":
                    shutil.copytree(tree / folder, target)
                else:
                    target.symlink_to(tree / folder)
            yield lib
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
            )


def ingest_token(url: str, env: dict[str, str]) -> str:
    """A token made by the server's own command line (of the tree being measured)."""
    done = subprocess.run(
        [sys.executable, "-m", "normwatch", "token", "create", "--project", "bench"]
        + ["--scope", "ingest"],
        env={**os.environ, **env, "NORMWATCH_DATABASE_URL": url},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def post_load(base: str, token: str, load: str, steps: int, values: str = "float64") -> None:
    sim = SimulatedRun(seed=0)
    layer_every = 1 if load == "storage" else 100
    stop = steps if load == "storage" else HISTORY_END
    with Run(
        base,
        token=token,
        project="bench",
        name="simulated-48L",
        start_step=0,
        max_batch_points=200_000,
    ) as run:
        for start in range(0, stop, BLOCK_STEPS):
            at, metrics = sim.block(start, min(start + BLOCK_STEPS, stop), layer_every=layer_every)
            if values == "float32":
                metrics = {k: v.astype(np.float32).astype(np.float64) for k, v in metrics.items()}
            for i, step in enumerate(at.tolist()):
                run.log({k: float(v[i]) for k, v in metrics.items() if v[i] == v[i]}, step=step)
            # Every point counts here: wait for the sender rather than let the queue shed.
            while run.pending_points > QUEUE_POINTS:
                time.sleep(0.02)
            if start % 20_000 == 0:
                say(f"  simulated: step {start:,} of {stop:,} queued")
    with Run(base, token=token, project="bench", name="llmc-gpt2-124M", start_step=0) as run:
        logged = import_llmc(LLMC_LOG, run)
    say(f"  llm.c: {logged:,} steps")


def stored(conn: psycopg.Connection) -> tuple[int, int]:
    """Points hot and in all."""
    hot = conn.execute("SELECT coalesce(sum(count), 0) FROM blocks").fetchone()
    cold = conn.execute("SELECT coalesce(sum(points), 0) FROM series").fetchone()
    assert hot is not None and cold is not None
    return int(hot[0]), int(hot[0]) + int(cold[0])


def vacuumed_size(conn: psycopg.Connection) -> int:
    conn.execute("VACUUM FULL")
    conn.execute("ANALYZE")
    row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


def relations(conn: psycopg.Connection) -> dict[str, tuple[int, int, int]]:
    """Heap, indexes and TOAST of each table of the public schema."""
    rows = conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid), pg_indexes_size(c.oid), "
        "coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind = 'r'"
    ).fetchall()
    return {name: (int(heap), int(index), int(toast)) for name, heap, index, toast in rows}


def blobs(conn: psycopg.Connection) -> dict[str, int]:
    columns = [
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'chunks' AND data_type = 'bytea' ORDER BY ordinal_position"
        ).fetchall()
    ]
    sums = ", ".join(f"coalesce(sum(octet_length({c})), 0)" for c in columns)
    row = conn.execute(f"SELECT {sums} FROM chunks").fetchone()
    assert row is not None
    out = {f"chunks.{c}": int(v) for c, v in zip(columns, row, strict=True)}
    # Which value codec the chunks hold (the header's fourth byte), to show what was measured.
    for codec, count in conn.execute(
        "SELECT get_byte(data, 3), count(*) FROM chunks WHERE data IS NOT NULL GROUP BY 1"
    ).fetchall():
        out[f"chunks with value codec {codec}"] = int(count)
    return out


@contextmanager
def database(keep: bool, env: dict[str, str]) -> Iterator[str]:
    """A scratch database migrated by the tree being measured (its own schema)."""
    url = create_database(base_pg_url(), "bench_storage", migrate=False)
    subprocess.run(
        [sys.executable, "-m", "normwatch", "db", "upgrade"],
        env={**os.environ, **env, "NORMWATCH_DATABASE_URL": url},
        check=True,
        capture_output=True,
    )
    try:
        yield url
    finally:
        if keep:
            say(f"kept {url}")
        else:
            drop_database(base_pg_url(), url)


def measure(
    label: str,
    load: str,
    steps: int,
    lib: Path | None,
    keep: bool,
    precision: str | None = None,
    values: str = "float64",
) -> Measured:
    # PYTHONSAFEPATH: ``python -m normwatch`` run from the repository root would otherwise
    # find this tree's package in the working directory before PYTHONPATH.
    env = {"PYTHONPATH": str(lib), "PYTHONSAFEPATH": "1"} if lib else {}
    if precision:
        env["NORMWATCH_COMPACTION_PRECISION"] = precision
    out = Measured(label)
    with database(keep, env) as url, tempfile.TemporaryDirectory() as logs:
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            out.empty = vacuumed_size(conn)
            token = ingest_token(url, env)
            with running_server(
                url,
                Path(logs),
                NORMWATCH_COMPACTION_IDLE_S="5",
                NORMWATCH_COMPACTION_INTERVAL_S="1",
                **env,
            ) as server:
                say(f"{label}: loading ({load})")
                started = time.perf_counter()
                post_load(server.url, token, load, steps, values)
                out.load_s = time.perf_counter() - started
                started = time.perf_counter()
                while True:
                    hot, total = stored(conn)
                    if hot == 0:
                        break
                    if time.perf_counter() - started > DRAIN_TIMEOUT_S:
                        raise RuntimeError(f"{hot:,} points still hot")
                    say(f"  compacting: {hot:>12,} of {total:,} points hot")
                    time.sleep(3)
                out.drain_s = time.perf_counter() - started
            out.points = total
            out.database = vacuumed_size(conn)
            out.relations = relations(conn)
            out.blobs = blobs(conn)
    return out


def report(results: list[Measured]) -> None:
    labels = [r.label for r in results]

    def per_point(value: float, r: Measured) -> str:
        return f"{value / r.points:.2f}"

    rows = [
        ["points stored", *[f"{r.points:,}" for r in results]],
        ["**whole database, B/point**", *[f"**{per_point(r.database, r)}**" for r in results]],
        ["less an empty database, B/point", *[per_point(r.database - r.empty, r) for r in results]],
        ["empty database (MB)", *[f"{r.empty / 1e6:.1f}" for r in results]],
    ]
    names = sorted(
        {n for r in results for n in r.relations},
        key=lambda n: -max(sum(r.relations.get(n, (0, 0, 0))) for r in results),
    )
    for name in names[:8]:
        cells = []
        for r in results:
            heap, index, toast = r.relations.get(name, (0, 0, 0))
            cells.append(
                f"{(heap + index + toast) / r.points:.3f} "
                f"({heap / r.points:.2f} + {index / r.points:.2f} + {toast / r.points:.2f})"
            )
        rows.append([f"{name}: all (heap + indexes + TOAST)", *cells])
    for blob in sorted({b for r in results for b in r.blobs}):
        if blob.startswith("chunks with"):
            rows.append([blob, *[f"{r.blobs.get(blob, 0):,}" for r in results]])
        else:
            rows.append([f"blobs {blob}", *[per_point(r.blobs.get(blob, 0), r) for r in results]])
    rows.append(["load through HTTP (s)", *[f"{r.load_s:.1f}" for r in results]])
    rows.append(["compactor catching up (s)", *[f"{r.drain_s:.1f}" for r in results]])
    say("\n" + table(["bytes a point", *labels], rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", choices=("storage", "demo"), default="storage")
    parser.add_argument("--steps", type=int, default=200_000, help="simulated steps (storage)")
    parser.add_argument("--before", metavar="REV", help="also measure the server at REV")
    parser.add_argument("--keep", action="store_true", help="keep this tree's database")
    parser.add_argument("--quick", action="store_true", help="20,000 simulated steps")
    parser.add_argument(
        "--precision",
        metavar="P[,P]",
        help="measure this tree at each compaction precision (float32, float64)",
    )
    parser.add_argument(
        "--values",
        choices=("float64", "float32"),
        default="float64",
        help="log the simulated values as they are, or rounded to float32 (as JAX's arrive)",
    )
    args = parser.parse_args(argv)
    precisions = args.precision.split(",") if args.precision else [None]
    if not set(precisions) <= {None, "float32", "float64"}:
        parser.error(f"--precision takes float32 and float64, got {args.precision!r}")
    if args.quick:
        args.steps = 20_000
    started = time.perf_counter()
    results = []
    if args.before:
        with built(args.before) as lib:
            results.append(
                measure(
                    f"before ({args.before})", args.load, args.steps, lib, False, None, args.values
                )
            )
    for precision in precisions:
        label = "this tree" if precision is None else f"this tree, {precision}"
        results.append(
            measure(label, args.load, args.steps, None, args.keep, precision, args.values)
        )
    report(results)
    say(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
