"""Series read, bulk load, compaction and storage of one long metric, against the raw driver.

What is measured, per backend (Postgres and/or SQLite, each in a scratch database that the
script creates, migrates and removes):

* **load**: ``--steps`` steps of one metric (a noisy decaying curve with one spike at a
  random step) go into the hot ``blocks`` table in pieces of 100k steps, one transaction
  (and so one block) each. Up to 1M steps they go through the service path, ``parse_batch``
  then ``ingest_batch``. Above that (or with ``--load direct``) they go straight into
  ``blocks``: on Postgres as binary ``COPY`` streams (``pgcopy.encode_blocks``, what the
  service itself sends), on SQLite by ``execute``: the service path wants the series as
  JSON-like Python lists first (about a gigabyte of objects at 10M steps) and then takes
  35-55 s on a 2-core machine, which tells nothing the 1M run does not. Baseline: the same
  rows, in the same pieces, into a bare table with the same columns and primary key, by
  ``COPY ... FROM STDIN`` with ``write_row`` on Postgres and by ``executemany`` on SQLite.
  Ratio: load rate / baseline.
* **at rest, hot**: bytes per point of ``blocks`` (heap, primary-key index, TOAST), from
  ``pg_total_relation_size`` after ``VACUUM ANALYZE`` on Postgres, from the used pages of
  the file on SQLite.
* **read, hot**: ``query.read_series(..., points=1000)`` over the full range and over 10k
  steps centred on the spike (median of ``--repeat``, 7, after a warm-up), with the
  returned point counts and whether the spike survived. Baseline: the raw driver running
  ``SELECT step, value FROM bare WHERE run_key=.. AND metric_id=.. ORDER BY step`` with
  ``fetchall`` over the same range, on the load baseline's table of one row a point (the
  layout a row-per-point store reads). Ratio: read_series / raw fetch (above 1 = slower). The
  full-range read is also split into fetching rows into arrays and M4 in NumPy. The raw
  query also says ``AND segment = 1``, as the service's lineage filter does for a run that
  never restarted: without it neither database can walk the primary key in step order, and
  the baseline would pay a sort (or, on Postgres with one run, a sequential scan) that the
  service does not.
* **compaction**: ``schedule.compact_everything`` with the default policy (4096-point
  float32 chunks) moves every hot point into chunks and the summary pyramid; points/s.
* **at rest, compacted**: on Postgres ``pg_total_relation_size`` (heap, indexes and TOAST)
  of ``blocks`` + ``chunks`` + ``rollups`` + ``series`` per stored point, after a plain
  ``VACUUM blocks`` (which gives the emptied hot table's heap back, as autovacuum would,
  but not the pages of its primary-key index: those stay, free for the next hot blocks, so
  the report also gives the chunks, rollups and series alone); on SQLite the file size per
  point after ``PRAGMA wal_checkpoint(TRUNCATE)`` and ``VACUUM``. The bare baseline table
  is dropped before either measurement.
* **read, compacted**: the same two ``read_series`` calls, now served by the pyramid, with
  the full-range read split into ``pyramid.extent``, ``pyramid.gather`` and M4.

Every ``read_series`` result must hold the spike, as a real stored (step, value): the script
stops with an ``AssertionError`` otherwise. ``read_series`` is timed alone, on an open
connection with the run already loaded, ending each call's read transaction, as a request
handler does after authentication.

Run (from the repository root; Postgres from ``NORMWATCH_TEST_DATABASE_URL``, by default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, which must allow CREATE DATABASE;
``flock`` keeps two benchmarks from sharing the machine)::

    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/series_read.py            # 1M steps
    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/series_read.py --quick    # 100k steps
    flock /tmp/nw-bench.lock .venv/bin/python benchmarks/series_read.py --steps 10000000 --repeat 5
    .venv/bin/python benchmarks/series_read.py --backend postgresql --steps 300000
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _harness import Timing, say, scratch_postgres, scratch_sqlite, table, timed
from sqlalchemy import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory, session_scope
from normwatch.server.models import Run
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, query, runs
from normwatch.server.storage import blocks, citus, pgcopy, pyramid, schedule
from normwatch.server.storage.m4 import m4_select
from normwatch.server.storage.metric_ids import resolve_metric_ids
from normwatch.server.storage.points import point_count, read_points
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of

METRIC = "grad/norm/total"
CHUNK = 100_000
DIRECT_ABOVE = 1_000_000
POINTS = 1000
ZOOM = 10_000
SPIKE = 50.0
BARE_COLUMNS = "run_key, metric_id, segment, step, value"
BARE_TABLE = (
    "CREATE TABLE bare (run_key BIGINT NOT NULL, metric_id BIGINT NOT NULL, "
    "segment SMALLINT NOT NULL, step BIGINT NOT NULL, value DOUBLE PRECISION, "
    "PRIMARY KEY (run_key, metric_id, segment, step))"
)
COMPACTED_TABLES = ("blocks", "chunks", "rollups", "series")

Read = tuple[Timing, int, bool | None]


@dataclass
class Result:
    backend: str
    steps: int
    load_name: str = ""
    load_pps: float = 0.0
    baseline_name: str = ""
    baseline_pps: float = 0.0
    bytes_per_point: float = 0.0
    at_rest_detail: str = ""
    reads: dict[str, Read] = field(default_factory=dict)
    compact_s: float = 0.0
    compact_cpu_s: float = 0.0
    chunks_written: int = 0
    compacted_bytes_per_point: float = 0.0
    compacted_only_bytes_per_point: float = 0.0
    compacted_detail: str = ""
    compacted_reads: dict[str, Read] = field(default_factory=dict)
    load_average: tuple[float, float] = (0.0, 0.0)
    """The machine's 1-minute load average before and after the compacted reads."""


@dataclass(frozen=True)
class Target:
    """What the read, once compacted, is measured against."""

    run_id: str
    run_key: int
    metric_id: int
    steps: int
    spike: int

    @property
    def zoom(self) -> tuple[int, int]:
        lo = max(0, min(self.spike - ZOOM // 2, self.steps - ZOOM))
        return lo, lo + ZOOM - 1


def series_data(steps: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Steps 0..n-1; a decaying, noisy grad-norm-like curve with one spike at a random step."""
    rng = np.random.default_rng(seed)
    x = np.arange(steps, dtype=np.int64)
    values = 0.3 + 2.0 * np.exp(-x / max(1, steps // 8)) + 0.02 * rng.standard_normal(steps)
    spike = int(rng.integers(0, steps))
    values[spike] = SPIKE
    return x, values, spike


def chunks(steps: np.ndarray, values: np.ndarray) -> Iterator[tuple[list[int], list[float]]]:
    """The series as Python lists, a piece at a time (built before each piece's clock starts)."""
    for lo in range(0, len(steps), CHUNK):
        yield steps[lo : lo + CHUNK].tolist(), values[lo : lo + CHUNK].tolist()


def create_run(factory: sessionmaker[Session]) -> str:
    with session_scope(factory) as session:
        secret, _ = create_token(session, "bench", "ingest")
        who = authenticate(session, secret)
        assert who is not None
        return runs.create_or_resume(session, who, RunCreate(name="series-read")).id


def load_rows(
    factory: sessionmaker[Session], run_id: str, data: Iterator[tuple[list[int], list[float]]]
) -> float:
    """Seconds to store every piece through ``parse_batch`` + ``ingest_batch``."""
    total = 0.0
    done = 0
    for steps, values in data:
        doc = {"steps": steps, "metrics": {METRIC: values}}
        t0 = time.perf_counter()
        batch = parse_batch(doc, max_points=len(steps))
        with session_scope(factory) as session:
            ingest.ingest_batch(session, run_id, batch)
        total += time.perf_counter() - t0
        done += len(steps)
        if done < 1_000_000 or done % 1_000_000 == 0:
            say(f"  load (service): {done:>11,} points, {done / total:>10,.0f} points/s")
    return total


def load_direct(
    engine: Engine, run_key: int, metric_id: int, steps: np.ndarray, values: np.ndarray
) -> float:
    """Seconds to put the points straight into ``blocks``, one block and commit a piece."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        total = 0.0
        for lo in range(0, len(steps), CHUNK):
            s, v = steps[lo : lo + CHUNK], values[lo : lo + CHUNK]
            t0 = time.perf_counter()
            block = blocks.encode(s, v, metric_id)
            if engine.dialect.name == "postgresql":
                with cur.copy(pgcopy.COPY_BLOCKS) as copy:
                    copy.write(pgcopy.encode_blocks(run_key, 1, [block]))
            else:
                cur.execute(
                    "INSERT INTO blocks (run_key, metric_id, segment, first_step, last_step, "
                    "count, last_value, steps, data) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?)",
                    (
                        run_key,
                        metric_id,
                        block.first_step,
                        block.last_step,
                        block.count,
                        block.last_value,
                        block.steps,
                        block.data,
                    ),
                )
            raw.commit()
            total += time.perf_counter() - t0
            done = lo + len(s)
            if done % 1_000_000 == 0 or done == len(steps):
                say(f"  load (direct): {done:>12,} points, {done / total:>10,.0f} points/s")
        cur.close()
    finally:
        raw.close()
    return total


def load_baseline(
    engine: Engine, run_key: int, metric_id: int, data: Iterator[tuple[list[int], list[float]]]
) -> float:
    """Seconds to put the same rows into ``bare`` with the raw driver, one commit a piece."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(BARE_TABLE)
        raw.commit()
        total = 0.0
        done = 0
        for steps, values in data:
            t0 = time.perf_counter()
            if engine.dialect.name == "postgresql":
                with cur.copy(f"COPY bare ({BARE_COLUMNS}) FROM STDIN") as copy:
                    for step, value in zip(steps, values, strict=True):
                        copy.write_row((run_key, metric_id, 1, step, value))
            else:
                cur.executemany(
                    f"INSERT INTO bare ({BARE_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                    [(run_key, metric_id, 1, s, v) for s, v in zip(steps, values, strict=True)],
                )
            raw.commit()
            total += time.perf_counter() - t0
            done += len(steps)
            if done < 1_000_000 or done % 1_000_000 == 0:
                say(f"  load (baseline): {done:>10,} points, {done / total:>10,.0f} points/s")
        cur.close()
    finally:
        raw.close()
    return total


def drop_baseline(engine: Engine) -> None:
    """The bare table is the load's and the hot reads' yardstick: it must not count at rest."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("DROP TABLE bare")
        raw.commit()
        cur.close()
    finally:
        raw.close()


def table_bytes(conn: Any, name: str) -> tuple[int, int, int]:
    """Total, heap and index bytes of table ``name``; on Citus, of its shards together."""
    sharded = citus.placed(conn).get(name) == "by run"
    if not sharded:
        row = conn.exec_driver_sql(
            f"SELECT pg_total_relation_size('{name}'), pg_relation_size('{name}'), "
            f"pg_indexes_size('{name}')"
        ).one()
        return int(row[0]), int(row[1]), int(row[2])
    row = conn.exec_driver_sql(
        "SELECT sum(split_part(result, ',', 1)::bigint), sum(split_part(result, ',', 2)::bigint), "
        f"sum(split_part(result, ',', 3)::bigint) FROM run_command_on_shards('{name}', "
        "$$SELECT pg_total_relation_size('%%1$s') || ',' || pg_relation_size('%%1$s') || ',' || "
        "pg_indexes_size('%%1$s')$$) WHERE success"
    ).one()
    return int(row[0]), int(row[1]), int(row[2])


def at_rest(engine: Engine, rows: int) -> tuple[float, str]:
    """Bytes per stored point of the hot ``blocks`` table, and how they split."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("VACUUM ANALYZE blocks")
            total, heap, index = table_bytes(conn, "blocks")
        return total / rows, (
            f"heap {heap / rows:.1f} + index {index / rows:.1f} + TOAST "
            f"{(total - heap - index) / rows:.1f} B/point"
        )
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
        size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
    return (pages - free) * size / rows, "whole file (rowid table + primary-key index)"


def at_rest_compacted(engine: Engine, url: str, rows: int) -> tuple[float, float, str]:
    """Bytes per stored point once compacted: every table that holds points, all included.

    Also the same without ``points`` (the chunks, rollups and series alone), and how the
    bytes split.
    """
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("VACUUM blocks")
            sizes: dict[str, tuple[int, int, int]] = {}
            for name in COMPACTED_TABLES:
                sizes[name] = table_bytes(conn, name)
            data, buckets, outlines = conn.exec_driver_sql(
                "SELECT sum(octet_length(data)), sum(octet_length(buckets)), "
                "sum(octet_length(outline)) FROM chunks"
            ).one()
            rollup = conn.exec_driver_sql("SELECT sum(octet_length(buckets)) FROM rollups").one()
        split = "; ".join(
            f"{name} {total / rows:.2f} (heap {heap / rows:.2f}, index {index / rows:.2f}, "
            f"TOAST {(total - heap - index) / rows:.2f})"
            for name, (total, heap, index) in sizes.items()
        )
        blobs = (
            f"blobs: chunk data {int(data or 0) / rows:.2f}, chunk buckets "
            f"{int(buckets or 0) / rows:.2f}, chunk outlines {int(outlines or 0) / rows:.2f}, "
            f"rollup buckets {int(rollup[0] or 0) / rows:.3f}"
        )
        everything = sum(total for total, _, _ in sizes.values())
        compacted = everything - sizes["blocks"][0]
        return everything / rows, compacted / rows, f"B/point: {split}; {blobs}"
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.exec_driver_sql("VACUUM")
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    path = make_url(url).database
    assert path is not None
    size = os.path.getsize(path) / rows
    return size, size, "whole file after VACUUM"


def compact(factory: sessionmaker[Session], steps: int) -> tuple[float, float, int]:
    """Seconds to compact every hot point with the default policy, and the chunks written.

    Also the CPU seconds of this process: SQLite's work is among them, Postgres's is not.
    """
    say("  compacting (default policy: 4096-point float32 chunks)")
    t0, cpu0 = time.perf_counter(), time.process_time()
    report = schedule.compact_everything(factory, Policy())
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if report.points != steps:
        raise RuntimeError(f"compacted {report.points} points, expected {steps}")
    say(f"  compacted {report.points:,} points in {seconds:.1f} s ({steps / seconds:,.0f}/s)")
    return seconds, cpu, report.chunks_written


def spike_check(target: Target, name: str, s: query.Series) -> bool:
    """The spike is in the result as the stored point it is; stops the run otherwise."""
    hit = np.flatnonzero(s.steps == target.spike)
    if not (len(hit) == 1 and float(s.values[hit[0]]) == SPIKE):
        raise AssertionError(f"{name}: the spike at step {target.spike:,} is missing")
    return True


def time_read_series(
    engine: Engine, target: Target, repeat: int, suffix: str = ""
) -> dict[str, Read]:
    """``read_series`` full and zoomed, alone, on an open connection, one transaction a call."""
    out: dict[str, Read] = {}
    with engine.connect() as conn, Session(bind=conn) as session:
        found = runs.get_run(session, target.run_id)
        assert found is not None
        run = found[0]
        session.expunge(run)  # ending each read transaction must not expire it
        session.rollback()
        for label, (lo, hi) in (("full", (None, None)), ("zoom", target.zoom)):

            def call(lo: int | None = lo, hi: int | None = hi) -> query.Series:
                try:
                    return query.read_series(
                        session, run, [METRIC], start=lo, end=hi, points=POINTS
                    )[0]
                finally:
                    session.rollback()

            name = f"read_series {label}{suffix}"
            say(f"  timing {name} ({repeat} runs + warm-up)")
            timing, result = timed(call, repeat=repeat)
            out[name] = (timing, len(result.steps), spike_check(target, name, result))
    return out


def measure_reads(
    engine: Engine, factory: sessionmaker[Session], target: Target, repeat: int
) -> dict[str, Read]:
    """Reads of the hot table: ``read_series``, the raw driver, and where the time goes."""
    zoom_lo, zoom_hi = target.zoom
    out = time_read_series(engine, target, repeat)

    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        mark = "%s" if engine.dialect.name == "postgresql" else "?"
        sql = (
            f"SELECT step, value FROM bare WHERE run_key = {mark} AND metric_id = {mark} "
            f"AND segment = {mark}"
        )
        for label, bounds in (("full", ()), ("zoom", (zoom_lo, zoom_hi))):
            text = sql + (f" AND step BETWEEN {mark} AND {mark}" if bounds else "")
            params = (target.run_key, target.metric_id, 1, *bounds)

            def fetch(text: str = text + " ORDER BY step", params: Any = params) -> Sequence[Any]:
                cur.execute(text, params)
                rows = cur.fetchall()
                raw.rollback()  # end the read transaction, as returning a pooled connection does
                return rows

            name = f"raw fetch {label}"
            say(f"  timing {name} ({repeat} runs + warm-up)")
            timing, rows = timed(fetch, repeat=repeat)
            out[name] = (timing, len(rows), None)
            del rows
        cur.close()
    finally:
        raw.close()

    # Where the full-range read goes: rows into arrays, then M4.
    with factory() as session:
        lineage = lineage_of(segments_of(session, target.run_key))

        def read_full() -> tuple[np.ndarray, np.ndarray]:
            arrays = read_points(session, target.run_key, target.metric_id, lineage, None, None)
            session.rollback()
            return arrays

        say(f"  timing read_points full ({repeat} runs + warm-up)")
        timing, (s, v) = timed(read_full, repeat=repeat)
        out["  of which read_points"] = (timing, len(s), None)
        say(f"  timing m4_select full ({repeat} runs + warm-up)")
        timing, keep = timed(lambda: m4_select(s, v, POINTS, int(s[0]), int(s[-1])), repeat=repeat)
        out["  of which m4_select"] = (timing, len(keep), None)
    return out


def measure_compacted_reads(
    engine: Engine, factory: sessionmaker[Session], target: Target, repeat: int
) -> dict[str, Read]:
    """Reads served by the pyramid: ``read_series``, split into extent, gather and M4."""
    out = time_read_series(engine, target, repeat, " (compacted)")
    with factory() as session:
        lineage = lineage_of(segments_of(session, target.run_key))
        session.rollback()

        def extent() -> tuple[int, int]:
            found = pyramid.extent(session, target.run_key, target.metric_id, lineage)
            session.rollback()
            assert found is not None
            return found

        say(f"  timing pyramid.extent ({repeat} runs + warm-up)")
        timing, (lo, hi) = timed(extent, repeat=repeat)
        out["  of which pyramid.extent"] = (timing, 2, None)
        pixel = (hi - lo + 1) / POINTS

        def gather() -> pyramid.Gathered:
            got = pyramid.gather(
                session, target.run_key, target.metric_id, lineage, None, None, pixel
            )
            session.rollback()
            return got

        say(f"  timing pyramid.gather full ({repeat} runs + warm-up)")
        timing, got = timed(gather, repeat=repeat)
        out["  of which pyramid.gather"] = (timing, len(got.points), None)
        s, v = got.points.steps, got.points.values
        say(f"  timing m4_select of the candidates ({repeat} runs + warm-up)")
        timing, keep = timed(lambda: m4_select(s, v, POINTS, lo, hi), repeat=repeat)
        out["  of which m4_select"] = (timing, len(keep), None)
    return out


def run_backend(backend: str, url: str, steps: int, repeat: int, seed: int, direct: bool) -> Result:
    result = Result(backend, steps)
    engine = build_engine(url, pool_size=2)
    factory = session_factory(engine)
    try:
        run_id = create_run(factory)
        x, values, spike = series_data(steps, seed)
        say(f"[{backend}] {steps:,} steps of {METRIC!r}, spike at step {spike:,}")
        with session_scope(factory) as session:
            run_key = session.query(Run).filter(Run.id == run_id).one().key
            metric_id = resolve_metric_ids(session, run_key, [METRIC])[METRIC]
        if direct:
            result.load_name = "COPY (binary, NumPy)" if backend == "postgresql" else "executemany"
            load_s = load_direct(engine, run_key, metric_id, x, values)
        else:
            result.load_name = "service"
            load_s = load_rows(factory, run_id, chunks(x, values))
        result.load_pps = steps / load_s
        with factory() as session:
            stored = point_count(session, run_key)
        if stored != steps:
            raise RuntimeError(f"stored {stored} points, expected {steps}")
        result.bytes_per_point, result.at_rest_detail = at_rest(engine, stored)
        say(f"  at rest: {result.bytes_per_point:.1f} bytes/point ({result.at_rest_detail})")
        result.baseline_name = "COPY write_row" if backend == "postgresql" else "executemany"
        base_s = load_baseline(engine, run_key, metric_id, chunks(x, values))
        result.baseline_pps = steps / base_s
        target = Target(run_id, run_key, metric_id, steps, spike)
        result.reads = measure_reads(engine, factory, target, repeat)
        drop_baseline(engine)

        result.compact_s, result.compact_cpu_s, result.chunks_written = compact(factory, steps)
        (
            result.compacted_bytes_per_point,
            result.compacted_only_bytes_per_point,
            result.compacted_detail,
        ) = at_rest_compacted(engine, url, steps)
        say(f"  at rest, compacted: {result.compacted_bytes_per_point:.2f} bytes/point")
        say(f"    {result.compacted_detail}")
        before = os.getloadavg()[0]
        result.compacted_reads = measure_compacted_reads(engine, factory, target, repeat)
        result.load_average = (before, os.getloadavg()[0])
    finally:
        engine.dispose()
    return result


def _read_rows(reads: dict[str, Read]) -> list[list[str]]:
    return [
        [
            name,
            f"{timing.median_ms:,.1f}",
            f"{timing.min_ms:,.1f}–{timing.max_ms:,.1f}",
            f"{count:,}",
            "" if spike is None else ("yes" if spike else "NO"),
        ]
        for name, (timing, count, spike) in reads.items()
    ]


def _ratio(reads: dict[str, Read], name: str, base: dict[str, Read], base_name: str) -> str:
    return f"{reads[name][0].median_ms / base[base_name][0].median_ms:.3f}"


def report(results: list[Result]) -> None:
    for r in results:
        say(f"\n## {r.backend}, {r.steps:,} steps, points={POINTS}\n")
        headers = ["read", "median ms", "range ms", "points", "spike kept"]
        say(table(headers, _read_rows(r.reads) + _read_rows(r.compacted_reads)))
        hot, packed = r.reads, r.compacted_reads
        say("")
        say(
            table(
                ["measure", "value"],
                [
                    [f"load, {r.load_name} (points/s)", f"{r.load_pps:,.0f}"],
                    [f"load, {r.baseline_name} into bare (points/s)", f"{r.baseline_pps:,.0f}"],
                    ["load ratio / baseline", f"{r.load_pps / r.baseline_pps:.2f}"],
                    ["bytes per point, hot", f"{r.bytes_per_point:.1f} ({r.at_rest_detail})"],
                    [
                        "read ratio read_series / raw fetch, full, hot",
                        _ratio(hot, "read_series full", hot, "raw fetch full"),
                    ],
                    [
                        "read ratio read_series / raw fetch, zoom, hot",
                        _ratio(hot, "read_series zoom", hot, "raw fetch zoom"),
                    ],
                    ["compaction (points/s)", f"{r.steps / r.compact_s:,.0f}"],
                    [
                        "compaction: seconds, of which this process's CPU",
                        f"{r.compact_s:.1f}, {r.compact_cpu_s:.1f}",
                    ],
                    ["chunks written", f"{r.chunks_written:,}"],
                    ["bytes per point, compacted", f"{r.compacted_bytes_per_point:.2f}"],
                    [
                        "  of which chunks + rollups + series",
                        f"{r.compacted_only_bytes_per_point:.2f}",
                    ],
                    [
                        "read ratio read_series / raw fetch, full, compacted",
                        _ratio(packed, "read_series full (compacted)", hot, "raw fetch full"),
                    ],
                    [
                        "read ratio read_series / raw fetch, zoom, compacted",
                        _ratio(packed, "read_series zoom (compacted)", hot, "raw fetch zoom"),
                    ],
                ],
            )
        )
        say(f"\nat rest, compacted: {r.compacted_detail}")
        say(
            f"1-minute load average around the compacted reads: {r.load_average[0]:.1f} → "
            f"{r.load_average[1]:.1f} ({os.cpu_count()} CPUs; other work on the machine shows)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--steps", type=int, default=None, help="default 1,000,000")
    parser.add_argument("--quick", action="store_true", help="100k steps, 3 timed repeats")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per read (7)")
    parser.add_argument(
        "--load",
        choices=["auto", "service", "direct"],
        default="auto",
        help=f"how points reach the hot table (auto: the service up to {DIRECT_ABOVE:,} steps)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    steps = args.steps or (100_000 if args.quick else 1_000_000)
    repeat = args.repeat or (3 if args.quick else 7)
    if steps < ZOOM:
        parser.error(f"--steps must be at least {ZOOM}")
    direct = args.load == "direct" or (args.load == "auto" and steps > DIRECT_ABOVE)
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = []
    for backend in backends:
        scratch: AbstractContextManager[str] = (
            scratch_postgres("normwatch_bench") if backend == "postgresql" else scratch_sqlite()
        )
        with scratch as url:
            results.append(run_backend(backend, url, steps, repeat, args.seed, direct))
    report(results)
    say(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
