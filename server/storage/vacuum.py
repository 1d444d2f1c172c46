"""The hot table's dead rows: compaction deletes what it moves, and vacuums the table itself
when autovacuum is off or behind."""

from __future__ import annotations

import time

from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session, sessionmaker

from .citus import placed

VACUUM_THRESHOLD = 50_000


VACUUM_SCALE = 0.2


VACUUM_COST_DELAY_MS = 2


def vacuum_due(live_rows: int, dead_rows: int) -> bool:
    """Whether the hot table's dead rows have passed autovacuum's own trigger."""
    return dead_rows >= VACUUM_THRESHOLD + VACUUM_SCALE * live_rows


_LOCAL_ROWS = text(
    "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relid = 'blocks'::regclass"
)
# On Citus the rows, and their statistics, are in the shards on the workers.
_SHARD_ROWS = text(
    "SELECT coalesce(sum(split_part(result, ',', 1)::bigint), 0), "
    "coalesce(sum(split_part(result, ',', 2)::bigint), 0) "
    "FROM run_command_on_shards('blocks', $$SELECT n_live_tup || ',' || n_dead_tup "
    "FROM pg_stat_user_tables WHERE relid = '%s'::regclass$$) WHERE success"
)


def hot_table_rows(conn: Connection) -> tuple[int, int] | None:
    """The live and dead rows of ``blocks`` by Postgres's statistics (summed over the
    shards on Citus), or None when they are not kept."""
    sharded = placed(conn).get("blocks") == "by run"
    row = conn.execute(_SHARD_ROWS if sharded else _LOCAL_ROWS).first()
    return None if row is None else (int(row[0]), int(row[1]))


def vacuum_hot_table(sessions: sessionmaker[Session]) -> tuple[int, float] | None:
    """``VACUUM`` the ``blocks`` table when its dead rows pass autovacuum's own trigger
    (50,000 + 0.2 × the live rows, by the statistics Postgres keeps); the dead rows it
    found and the seconds it took, or None when nothing was due (or not on Postgres).

    Every point passes through ``blocks`` once, so the table deletes about as many rows as
    it takes in. Autovacuum (on by default) reclaims them; where it is off or falls behind,
    the dead rows piled up (2.6 GB for 3M live rows after 10 minutes of the soak) and made
    every insert and read of the table dearer. The compactor, which made the dead rows,
    then vacuums the table itself, throttled the way autovacuum is (cost delay 2 ms), and
    skips it while another vacuum holds it. Where autovacuum keeps up, this never comes due.
    On Citus the statistics are summed over the shards, and the ``VACUUM`` reaches them all.
    """
    with sessions() as session:
        engine = session.get_bind()
    if not isinstance(engine, Engine) or engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        row = hot_table_rows(conn)
        conn.rollback()
    if row is None or not vacuum_due(row[0], row[1]):
        return None
    t0 = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"SET vacuum_cost_delay = {VACUUM_COST_DELAY_MS}"))
        try:
            conn.execute(text("VACUUM (SKIP_LOCKED) blocks"))
        finally:
            conn.execute(text("RESET vacuum_cost_delay"))
    return int(row[1]), time.perf_counter() - t0
