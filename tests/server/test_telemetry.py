"""The service's instruments in process: pool gauges, collectors added at run time, and
the ingest route they count.
"""

from __future__ import annotations

from contextlib import ExitStack

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from normwatch.server.api.context import context_of
from normwatch.server.app import create_app
from normwatch.server.config import Settings
from normwatch.server.db import build_engine, session_factory
from normwatch.server.telemetry import INGEST_ROUTE, Sample, Telemetry


def pool_gauges(telemetry: Telemetry) -> tuple[float, float, float]:
    """(checked out, size, overflow) as a scrape renders them."""
    body, _ = telemetry.render()
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    return (
        samples["normwatch_db_pool_checked_out"],
        samples["normwatch_db_pool_size"],
        samples["normwatch_db_pool_overflow"],
    )


def test_pool_gauges_count_the_connections_in_use(pg_url: str) -> None:
    engine = build_engine(pg_url, pool_size=2)  # and up to 2 more beyond it
    # Read once, the database gauges wait for no connection while all of them are held.
    telemetry = Telemetry(engine, session_factory(engine), cache_s=60.0)
    try:
        assert pool_gauges(telemetry) == (0, 2, 0)
        with ExitStack() as held:
            for expected in [(1, 2, 0), (2, 2, 0), (3, 2, 1), (4, 2, 2)]:
                held.enter_context(engine.connect())
                assert pool_gauges(telemetry) == expected
        assert pool_gauges(telemetry) == (0, 2, 0)  # the overflow connections were closed
    finally:
        engine.dispose()


def test_collectors_added_at_run_time_are_scraped_and_cached(db_engine: Engine) -> None:
    telemetry = Telemetry(db_engine, session_factory(db_engine), cache_s=60.0)
    calls: list[int] = []

    def compaction_lag(session: Session) -> list[Sample]:
        calls.append(int(session.execute(text("SELECT 1")).scalar_one()))
        return [
            Sample("normwatch_compaction_lag_seconds", 12.5, "Oldest uncompacted point.", {}),
            Sample("normwatch_compaction_backlog", 3, "Runs waiting.", {"level": "0"}),
            Sample("normwatch_compaction_backlog", 4, "Runs waiting.", {"level": "1"}),
        ]

    def broken(session: Session) -> list[Sample]:
        raise RuntimeError("no such table")

    telemetry.add_collector(compaction_lag)
    telemetry.add_collector(broken, name="broken")
    body, content_type = telemetry.render()
    assert content_type.startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    assert samples[("normwatch_compaction_lag_seconds", ())] == 12.5
    assert samples[("normwatch_compaction_backlog", (("level", "0"),))] == 3
    assert samples[("normwatch_compaction_backlog", (("level", "1"),))] == 4
    up = "normwatch_scrape_collector_up"
    assert samples[(up, (("collector", "alert_backlog"),))] == 1
    qualname = compaction_lag.__qualname__
    assert samples[(up, (("collector", qualname),))] == 1
    assert samples[(up, (("collector", "broken"),))] == 0
    # The built-in collector is still read beside the added ones (its values follow the
    # outbox: see tests/server/api/test_prometheus.py).
    assert ("normwatch_alert_notifications_pending", ()) in samples
    telemetry.render()
    telemetry.render()
    assert calls == [1]  # read once within the cache period


def test_ingest_route_constant_matches_the_api(sqlite_url: str) -> None:
    app = create_app(Settings(database_url=sqlite_url), dashboard=False)
    paths = app.openapi()["paths"]
    context_of(app).engine.dispose()
    assert "post" in paths[INGEST_ROUTE]
    assert "get" in paths["/metrics"]
