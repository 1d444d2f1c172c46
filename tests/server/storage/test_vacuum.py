"""The hot table vacuumed once the dead rows compaction leaves pile up."""

from __future__ import annotations

import time

from sqlalchemy import text

from normwatch.server.db import build_engine, session_factory
from normwatch.server.storage import vacuum


def test_the_compactor_vacuums_the_hot_table_once_its_dead_rows_pile_up(
    fresh_pg_url: str,
) -> None:
    """On a Postgres whose autovacuum does not keep up (here it is off), the dead rows that
    compaction leaves in ``blocks`` are vacuumed once they pass autovacuum's own trigger."""
    engine = build_engine(fresh_pg_url, pool_size=2)
    sessions = session_factory(engine)

    def dead_rows() -> int:
        with engine.connect() as conn:
            rows = vacuum.hot_table_rows(conn)
            assert rows is not None
            return rows[1]

    try:
        n = vacuum.VACUUM_THRESHOLD + 10_000
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO blocks (run_key, metric_id, segment, first_step, last_step, "
                    "count, last_value, steps, data) SELECT 1, g, 1, 0, 0, 1, 0, NULL, "
                    "'\\x3ff0000000000000'::bytea FROM generate_series(1, :n) g"
                ),
                {"n": n},
            )
        assert vacuum.vacuum_hot_table(sessions) is None  # nothing dead yet
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM blocks WHERE metric_id > 5000"))
        deadline = time.monotonic() + 10
        while dead_rows() < n - 5000:  # statistics reach the shared counters within a second
            assert time.monotonic() < deadline, dead_rows()
            time.sleep(0.1)
        vacuumed = vacuum.vacuum_hot_table(sessions)
        assert vacuumed is not None and vacuumed[0] >= n - 5000
        assert dead_rows() == 0
        assert vacuum.vacuum_hot_table(sessions) is None
    finally:
        engine.dispose()
