"""The hot table's dead rows: compaction deletes what it moves, and vacuums the table itself
when autovacuum is off or behind."""

from __future__ import annotations

import time

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

VACUUM_THRESHOLD = 50_000


VACUUM_SCALE = 0.2


VACUUM_COST_DELAY_MS = 2


def vacuum_due(live_rows: int, dead_rows: int) -> bool:
    """Whether the hot table's dead rows have passed autovacuum's own trigger."""
    return dead_rows >= VACUUM_THRESHOLD + VACUUM_SCALE * live_rows


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
    """
    with sessions() as session:
        engine = session.get_bind()
    if not isinstance(engine, Engine) or engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables "
                "WHERE relid = 'blocks'::regclass"
            )
        ).first()
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
