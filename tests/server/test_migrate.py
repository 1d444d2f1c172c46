"""Alembic owns the schema: upgrade, downgrade, upgrade again, and no drift."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from normwatch.server.db import build_engine, session_factory
from normwatch.server.migrate import downgrade, upgrade
from normwatch.server.models import Base
from normwatch.server.storage import blocks, chunks, citus, outline, summary_codec
from normwatch.server.storage.policy import Policy
from tests.helpers.committed import compact, new_run, post
from tests.helpers.databases import scratch_pg


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_db(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    with scratch_pg("mig", migrate=False) as url:
        yield url


def test_upgrade_downgrade_upgrade_without_drift(empty_db: str) -> None:
    engine = build_engine(empty_db, pool_size=1)
    try:
        upgrade(engine)
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        upgrade(engine)
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, Base.metadata)
            sharded = citus.has_citus(conn)
        if sharded:  # a sharded table keeps no foreign key to the coordinator's tables
            dropped = {name for _, name, _ in citus.DROPPED_KEYS}
            diff = [d for d in diff if not (d[0] == "add_fk" and d[1].name in dropped)]
        assert diff == []
    finally:
        engine.dispose()


def test_hot_points_move_into_blocks_and_back(empty_db: str) -> None:
    """0004 turns each series' hot points into one block, and its downgrade turns them back."""
    engine = build_engine(empty_db, pool_size=1)
    rows = [(1, 10, 1, s, float(s) / 4) for s in (3, 1, 2, 9)]
    rows += [(1, 10, 2, 5, None), (1, 11, 1, 7, float("inf")), (2, 12, 1, 0, -0.5)]
    insert = text(
        "INSERT INTO points (run_key, metric_id, segment, step, value) "
        "VALUES (:rk, :mid, :seg, :step, :value)"
    )
    select_points = text(
        "SELECT run_key, metric_id, segment, step, value FROM points ORDER BY 1, 2, 3, 4"
    )
    try:
        upgrade(engine, "0003")
        with engine.begin() as conn:
            conn.execute(
                insert,
                [dict(zip(("rk", "mid", "seg", "step", "value"), r, strict=True)) for r in rows],
            )
        upgrade(engine)
        with engine.connect() as conn:
            stored = conn.execute(
                text(
                    "SELECT run_key, metric_id, segment, first_step, last_step, count, "
                    "last_value, steps, data FROM blocks ORDER BY 1, 2, 3"
                )
            ).all()
        got = []
        for rk, mid, seg, first, last, count, last_value, steps, data in stored:
            pts = blocks.decode(first, last, count, steps, data)
            assert (first, last, count) == (pts.steps[0], pts.steps[-1], len(pts))
            last_nan = last_value is None or last_value != last_value
            assert last_nan == bool(np.isnan(pts.values[-1]))
            for step, value in zip(pts.steps.tolist(), pts.values.tolist(), strict=True):
                got.append((rk, mid, seg, step, None if value != value else value))
        assert got == sorted(rows)
        assert len(stored) == 4  # one block a series
        downgrade(engine, "0003")
        with engine.connect() as conn:
            assert [tuple(r) for r in conn.execute(select_points)] == sorted(rows)
    finally:
        engine.dispose()


def test_chunks_stored_before_outlines_get_theirs(empty_db: str) -> None:
    """0006 gives every chunk stored already an outline that reads as the one compaction
    now writes with it (its own layout of that revision: float64 values)."""
    engine = build_engine(empty_db, pool_size=1)
    select = text(
        "SELECT metric_id, seq, first_step, last_step, count, outline FROM chunks ORDER BY 1, 2"
    )

    def outlines() -> list[tuple[int, int, dict[str, list[object]]]]:
        with engine.connect() as conn:
            rows = [tuple(r) for r in conn.execute(select)]
        assert all(r[5] for r in rows)
        return [
            (mid, seq, {k: [p.steps.tolist(), p.values.tolist()] for k, p in parts.items()})
            for mid, seq, first, last, count, blob in rows
            for parts in [outline.decode(bytes(blob), first, last, count)]
        ]

    try:
        upgrade(engine)
        sessions = session_factory(engine)
        run_id = new_run(sessions)
        steps = np.arange(5000)
        post(sessions, run_id, steps, a=np.sin(steps / 100.0), b=np.cos(steps / 7.0))
        compact(sessions, run_id, Policy(chunk_points=1024))
        written = outlines()
        assert len(written) == 10
        # What a store at 0005 held: summaries in the layout of that time.
        with engine.begin() as conn:
            rows = conn.execute(text("SELECT metric_id, seq, buckets FROM chunks")).all()
            for mid, seq, blob in rows:
                buckets = summary_codec.decode_buckets(bytes(blob))
                old = chunks.shuffle_zlib(buckets.tobytes(), chunks.BUCKET.itemsize)
                conn.execute(
                    text("UPDATE chunks SET buckets = :b WHERE metric_id = :m AND seq = :s"),
                    {"b": old, "m": mid, "s": seq},
                )
        downgrade(engine, "0005")
        upgrade(engine)
        assert outlines() == written
    finally:
        engine.dispose()
