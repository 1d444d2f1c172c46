"""Rows of earlier layouts rewritten in the current ones: every read gives the same answer
before and after, on both backends."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import text

from normwatch.server.db import session_scope
from normwatch.server.storage import across, chunks, outline, pyramid, recode, summary_codec
from normwatch.server.storage.chunks import NO_STEP, Points
from normwatch.server.storage.metric_ids import metric_ids_by_name
from normwatch.server.storage.policy import Policy
from normwatch.server.storage.runs import lineage_of, segments_of
from normwatch.server.workers.compactor import Compactor
from tests.helpers.committed import Sessions, compact, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions

NAMES = ["loss", "grad/norm/total", "params/norm/total"]


@pytest.fixture(params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    """A database of each test's own: a recoder walks every run it holds."""
    with own_sessions(request.param, "recode", tmp_path_factory) as made:
        yield made


def _old_data(blob: bytes) -> bytes:
    """A chunk as it was written before pcodec: byte-shuffled zlib values and step deltas."""
    points, narrow = chunks.decode_raw(blob)
    kind, width = (0, 4) if narrow else (1, 8)
    values = points.values.astype(np.float32 if narrow else np.float64)
    diffs = chunks.shuffle_zlib(np.diff(points.steps).astype("<i8").tobytes(), 8)
    header = chunks._HEADER.pack(1, kind, 1, 1, len(points), int(points.steps[0]), 0, len(diffs))
    return header + diffs + chunks.shuffle_zlib(values.tobytes(), width)


def _old_outline(buckets: np.ndarray) -> bytes:
    """An outline as it was first written: uint32 offsets and float64 values."""
    firsts = buckets["first_step"].astype(np.int64)
    maxes = np.where(buckets["max_step"] == NO_STEP, firsts, buckets["max_step"])
    return b"".join(
        (
            b"\x00",
            (maxes - firsts[0]).astype("<u4").tobytes(),
            buckets["max"].astype("<f8").tobytes(),
            (firsts - firsts[0]).astype("<u4").tobytes(),
            buckets["first"].astype("<f8").tobytes(),
        )
    )


def _old_summary(blob: bytes) -> bytes:
    return chunks.shuffle_zlib(summary_codec.decode_buckets(blob).tobytes(), chunks.BUCKET.itemsize)


def _age(sessions: Sessions) -> int:
    """Every chunk and rollup row rewritten in the earliest layouts; how many chunks."""
    with session_scope(sessions) as session:
        rows = session.execute(
            text("SELECT run_key, metric_id, segment, seq, data, buckets FROM chunks")
        ).all()
        for rk, mid, seg, seq, data, summary in rows:
            session.execute(
                text(
                    "UPDATE chunks SET data = :d, buckets = :b, outline = :o WHERE run_key = :rk "
                    "AND metric_id = :mid AND segment = :seg AND seq = :seq"
                ),
                {
                    "d": _old_data(bytes(data)),
                    "b": _old_summary(bytes(summary)),
                    "o": _old_outline(summary_codec.decode_buckets(bytes(summary))),
                    "rk": rk,
                    "mid": mid,
                    "seg": seg,
                    "seq": seq,
                },
            )
        for rk, mid, seg, level, seq, summary in session.execute(
            text("SELECT run_key, metric_id, segment, level, seq, buckets FROM rollups")
        ).all():
            session.execute(
                text(
                    "UPDATE rollups SET buckets = :b WHERE run_key = :rk AND metric_id = :mid "
                    "AND segment = :seg AND level = :level AND seq = :seq"
                ),
                {
                    "b": _old_summary(bytes(summary)),
                    "rk": rk,
                    "mid": mid,
                    "seg": seg,
                    "level": level,
                    "seq": seq,
                },
            )
    return len(rows)


def _reads(sessions: Sessions, run_id: str) -> list[object]:
    """What the reads give: every point, a zoomed-out chart's candidates, outlines."""
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        lineage = lineage_of(segments_of(session, run.key))
        ids = metric_ids_by_name(session, run.key, NAMES)
        out: list[object] = []
        for name in NAMES:
            every = pyramid.read_all(session, run.key, ids[name], lineage, None, None)
            out.append((every.steps.tolist(), every.values.view(np.int64).tolist()))
            gathered = pyramid.gather(session, run.key, ids[name], lineage, None, None, 1000.0)
            finished = gathered.finish()
            out.append((finished.steps.tolist(), finished.values.view(np.int64).tolist()))
        got = across.read(
            session, run.key, [ids[n] for n in NAMES], lineage, None, None, 500.0, "max"
        )
        for series, narrow in zip(got.series, got.narrow, strict=True):
            values = series.values.copy()
            if narrow is not None:
                values[narrow] = chunks.readable(values[narrow].astype(np.float32))
            out.append((series.steps.tolist(), values.view(np.int64).tolist()))
        return out


def _heads(sessions: Sessions) -> tuple[list[bool], list[int]]:
    with session_scope(sessions) as session:
        rows = session.execute(
            text(
                "SELECT substr(data, 1, 4), substr(buckets, 1, 1), substr(outline, 1, 1) "
                "FROM chunks"
            )
        ).all()
        rollups = session.execute(text("SELECT substr(buckets, 1, 1) FROM rollups")).all()
    old = [recode.chunk_is_old(bytes(d), bytes(b), bytes(o)) for d, b, o in rows]
    return old, [bytes(r[0])[0] for r in rollups]


def test_old_rows_are_rewritten_and_read_the_same(sessions: Sessions) -> None:
    run_id = new_run(sessions)
    rng = np.random.default_rng(3)
    steps = np.arange(9000)
    values = {
        NAMES[0]: rng.lognormal(size=9000),
        NAMES[1]: np.where(steps % 997 == 0, np.nan, rng.lognormal(size=9000)),
        NAMES[2]: np.cumsum(rng.normal(size=9000)) + 1e6,
    }
    values[NAMES[1]][4000] = np.inf
    post(sessions, run_id, steps, **values)
    # Float32 chunks (the earlier default, or the opt-in lossy setting)...
    compact(sessions, run_id, Policy(chunk_points=512, precision="float32"))
    # ... and a second series stored at float64 (the default), steps uneven.
    other = new_run(sessions, name="f64")
    uneven = np.cumsum(1 + steps % 5)
    post(sessions, other, uneven, **{n: v for n, v in values.items()})
    compact(sessions, other, Policy(chunk_points=512, precision="float64"))

    want = [_reads(sessions, run_id), _reads(sessions, other)]
    aged = _age(sessions)
    assert aged > 50
    old, rollup_heads = _heads(sessions)
    assert all(old) and set(rollup_heads) == {0x78}
    for got, expected in zip(
        [_reads(sessions, run_id), _reads(sessions, other)], want, strict=True
    ):
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert a == b, i  # old layouts read as the current ones

    recoder = recode.Recoder()
    steps_taken = 0
    while not recoder.finished:
        recoder.step(sessions, budget=40)
        steps_taken += 1
        assert steps_taken < 100
    assert recoder.total.chunks == aged and recoder.total.runs_done == 2
    assert steps_taken > 2  # a budget at a time
    old, rollup_heads = _heads(sessions)
    assert not any(old) and 0x78 not in rollup_heads
    assert [_reads(sessions, run_id), _reads(sessions, other)] == want
    # Each chunk kept its precision: float32 ones are not widened, float64 ones not narrowed.
    assert _precisions(sessions, run_id) == {True} and _precisions(sessions, other) == {False}
    # Nothing is left for a fresh walk.
    again = recode.Recoder()
    assert again.step(sessions).rows == 0 and again.finished


def _precisions(sessions: Sessions, run_id: str) -> set[bool]:
    """Whether each of the run's chunks holds float32 values."""
    with session_scope(sessions) as session:
        key = the_run(session, run_id).key
        heads = session.execute(
            text("SELECT substr(data, 1, 4) FROM chunks WHERE run_key = :k"), {"k": key}
        ).all()
    return {chunks.holds_float32(bytes(head)) for (head,) in heads}


def test_outline_of_a_float64_chunk_is_not_old() -> None:
    buckets = chunks.summarize(Points(np.arange(64, dtype=np.int64), np.linspace(0, 1, 64) + 1e-9))
    data = chunks.encode(
        Points(np.arange(64, dtype=np.int64), np.linspace(0, 1, 64) + 1e-9), "float64"
    )
    shape = outline.encode(buckets)
    assert shape[0] == 0
    assert not recode.chunk_is_old(data[:4], summary_codec.encode_buckets(buckets)[:1], shape[:1])


def test_the_compactor_rewrites_old_rows_when_it_has_nothing_to_compact(
    sessions: Sessions,
) -> None:
    run_id = new_run(sessions)
    steps = np.arange(3000)
    post(sessions, run_id, steps, loss=np.linspace(3.0, 1.0, 3000))
    compact(sessions, run_id, Policy(chunk_points=512, precision="float32"))
    want = _reads_one(sessions, run_id)
    _age(sessions)
    compactor = Compactor(sessions, Policy(), interval_s=0.05)  # the lossless default
    compactor.start()
    try:
        deadline = time.monotonic() + 20
        while not compactor.recoder.finished and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        compactor.stop()
    old, rollup_heads = _heads(sessions)
    assert compactor.recoder.finished and not any(old) and 0x78 not in rollup_heads
    assert _reads_one(sessions, run_id) == want
    assert _precisions(sessions, run_id) == {True}  # rewritten, still float32


def _reads_one(sessions: Sessions, run_id: str) -> tuple[list[int], list[int]]:
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        lineage = lineage_of(segments_of(session, run.key))
        mid = metric_ids_by_name(session, run.key, ["loss"])["loss"]
        every = pyramid.read_all(session, run.key, mid, lineage, None, None)
    return every.steps.tolist(), every.values.view(np.int64).tolist()
