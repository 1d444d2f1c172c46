"""The metric id cache: lookups, what it remembers, its bound, one per database."""

from __future__ import annotations

import pytest

from normwatch.server.db import build_engine
from normwatch.server.storage.metric_ids import MetricIdCache, metric_id_cache


def test_metric_id_cache_lookup_remember_and_bound() -> None:
    cache = MetricIdCache(max_names=5)
    assert cache.lookup(1, ["a"]) == ({}, ["a"])
    cache.remember(1, {"a": 10, "b": 11})
    cache.remember(2, {"a": 20, "c": 21})
    assert cache.lookup(1, ["b", "x", "a"]) == ({"b": 11, "a": 10}, ["x"])
    assert len(cache) == 4
    cache.remember(3, {"d": 30, "e": 31})  # over the bound: run 2, least recently used, goes
    assert cache.lookup(2, ["a"]) == ({}, ["a"])
    assert cache.lookup(1, ["a", "b"]) == ({"a": 10, "b": 11}, [])
    assert len(cache) == 4
    cache.remember(4, {f"m{i}": i for i in range(9)})  # one run larger than the whole cache
    assert len(cache) == 5
    assert cache.lookup(4, ["m0", "m4", "m5"]) == ({"m0": 0, "m4": 4}, ["m5"])
    cache.forget_run(4)
    assert len(cache) == 0
    with pytest.raises(ValueError, match="max_names"):
        MetricIdCache(max_names=0)


def test_one_metric_id_cache_per_database(pg_url: str, sqlite_url: str) -> None:
    pg, lite = build_engine(pg_url, pool_size=1), build_engine(sqlite_url)
    try:
        assert metric_id_cache(pg) is metric_id_cache(pg)
        assert metric_id_cache(pg) is not metric_id_cache(lite)
    finally:
        pg.dispose()
        lite.dispose()
