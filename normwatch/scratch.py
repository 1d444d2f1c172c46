"""Scratch Postgres databases for tests and benchmarks: made beside a given one, migrated
with Alembic as the service's own are, and dropped.

When the given database is a Citus coordinator (``scripts/citus-cluster url``), a scratch
database is a cluster of its own: Citus keeps its metadata a database, so the database is
made on the coordinator and on every worker the coordinator knows, with the extension in
each and the nodes added, and the migrations then shard its tables as they would a user's.
"""

from __future__ import annotations

import uuid

import psycopg
from sqlalchemy import make_url

__all__ = ["admin_dsn", "citus_nodes", "create_database", "drop_database"]

Node = tuple[str, int, int]
"""A Citus node: host, port, group (0: the coordinator)."""


def admin_dsn(url: str) -> str:
    """``url`` (SQLAlchemy's form) as a plain libpq DSN, for psycopg connections."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def citus_nodes(url: str) -> list[Node] | None:
    """Every node of the Citus cluster whose coordinator ``url`` names, the coordinator
    first; None when it is not a Citus coordinator."""
    with psycopg.connect(admin_dsn(url), autocommit=True, connect_timeout=5) as conn:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone() is None:
            return None
        rows = conn.execute(
            "SELECT nodename, nodeport, groupid FROM pg_dist_node "
            "WHERE noderole = 'primary' ORDER BY groupid"
        ).fetchall()
    return [(str(host), int(port), int(group)) for host, port, group in rows]


def _on_node(url: str, host: str, port: int, database: str) -> str:
    return admin_dsn(
        make_url(url).set(host=host, port=port, database=database).render_as_string(False)
    )


def create_database(base: str, prefix: str, *, migrate: bool = True) -> str:
    """Create a database beside ``base`` (a cluster's worth on Citus), migrated unless
    ``migrate`` is false; its URL. Raises RuntimeError when ``base`` does not answer."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(admin_dsn(base), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"Postgres at {base} does not answer ({exc}); run ./scripts/ensure-postgres"
        ) from exc
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    nodes = citus_nodes(base)
    if nodes is not None:
        for host, port, group in nodes:
            if group == 0:
                continue
            with psycopg.connect(_on_node(base, host, port, "postgres"), autocommit=True) as w:
                w.execute(f'CREATE DATABASE "{name}"')
            with psycopg.connect(_on_node(base, host, port, name), autocommit=True) as w:
                w.execute("CREATE EXTENSION citus")
        with psycopg.connect(admin_dsn(url), autocommit=True) as coordinator:
            coordinator.execute("SET client_min_messages TO warning")
            coordinator.execute("CREATE EXTENSION citus")
            for host, port, group in nodes:
                add = "citus_set_coordinator_host" if group == 0 else "citus_add_node"
                coordinator.execute(f"SELECT {add}(%s, %s)", (host, port))
    if migrate:
        from normwatch.server.db import build_engine
        from normwatch.server.migrate import upgrade

        engine = build_engine(url, pool_size=1)
        try:
            upgrade(engine)
        finally:
            engine.dispose()
    return url


def drop_database(base: str, url: str) -> None:
    """Drop the database `create_database` made (on every node of a Citus cluster)."""
    name = make_url(url).database
    nodes = citus_nodes(base) or []
    with psycopg.connect(admin_dsn(base), autocommit=True) as admin:
        # A test may have closed it to simulate an outage.
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    for host, port, group in nodes:
        if group != 0:
            with psycopg.connect(_on_node(base, host, port, "postgres"), autocommit=True) as w:
                w.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
