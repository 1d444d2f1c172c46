"""Runs in storage: the lineage of a run's restarts."""

from __future__ import annotations

from normwatch.server.storage.runs import lineage_of


def test_lineage_of_restarts() -> None:
    assert lineage_of([(1, None)]).ranges == ((1, None, None),)
    assert lineage_of([(1, 0), (2, 500), (3, 300)]).ranges == ((3, 300, None), (1, 0, 300))
    assert lineage_of([(1, 0), (2, 500), (3, 700)]).ranges == (
        (3, 700, None),
        (2, 500, 700),
        (1, 0, 500),
    )
