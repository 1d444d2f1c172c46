"""Tests that need a Citus cluster: ``make test-citus`` starts one (scripts/citus-cluster)
and points ``NORMWATCH_TEST_DATABASE_URL`` at its coordinator. They are collected only when
named (``pytest tests/citus``); the default suite runs on plain Postgres."""

from __future__ import annotations

import pytest

from normwatch.scratch import citus_nodes
from tests.helpers.databases import base_url


@pytest.fixture(scope="session", autouse=True)
def citus_cluster() -> list[tuple[str, int, int]]:
    """The cluster's nodes; a database that is no Citus coordinator fails every test here."""
    nodes = citus_nodes(base_url())
    if nodes is None or len(nodes) < 2:
        pytest.fail(
            f"{base_url()} is not the coordinator of a Citus cluster with workers: run "
            "`make test-citus`, or point NORMWATCH_TEST_DATABASE_URL at `scripts/citus-cluster url`"
        )
    return nodes
