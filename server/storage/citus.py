"""How the schema sits on a Citus cluster: what is sharded by run, what every node holds,
and what stays on the coordinator.

Three kinds of table (docs/operations.md, "Sharding with Citus", says why):

- **by run** (`BY_RUN`): hash-distributed on ``run_key`` and co-located, so that one run's
  hot points, chunks, summaries, series state and alert states sit in shards of one worker,
  and every statement of a hot path that names one run is a router (single-shard) plan.
- **everywhere** (`REFERENCE`): small tables read on every request and seldom written
  (projects, tokens, rules, aliases, the instance secret), copied to every node, so that the
  sharded tables keep their foreign keys to them and joins with them stay on one worker.
- **coordinator** (every other table): ``runs`` and what hangs off it, written on every batch
  (a run's lock moves ``last_step``). They stay on the coordinator, added to Citus's metadata
  as *citus local* tables: a write to them then runs through Citus's local executor, which
  makes the batch's transaction a two-phase commit together with its worker, so that a crash
  between the two commits cannot keep points whose run row never moved (a plain local table
  would commit after the worker, separately).

A sharded table cannot keep a foreign key to a coordinator table, so ``alert_states`` loses
its key to ``runs``; the code that forgets a run deletes its alert states by hand, as it
already does for the series tables.

`distribute` and `undistribute` are idempotent and run in the caller's transaction; the
migration that places the tables (0012) and ``normwatch db distribute`` both call them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, text

BY_RUN = ("blocks", "chunks", "rollups", "series", "alert_states")
REFERENCE = ("projects", "api_tokens", "alert_rules", "metric_aliases", "instance_secrets")
SHARD_COUNT = 32
_ANCHOR = BY_RUN[0]
# The foreign keys a sharded table cannot keep, as (table, name, definition).
DROPPED_KEYS = (
    (
        "alert_states",
        "fk_alert_states_run_key_runs",
        "FOREIGN KEY (run_key) REFERENCES runs(key) ON DELETE CASCADE",
    ),
)


class NotACluster(RuntimeError):
    """The database has the citus extension but not the nodes the layout needs."""


@dataclass
class Placement:
    """What `distribute` or `undistribute` changed (empty when there was nothing to do)."""

    by_run: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)
    coordinator: list[str] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.by_run or self.reference or self.coordinator or self.undone)


def has_citus(conn: Connection) -> bool:
    """Whether the database is a Citus coordinator (the extension is created in it)."""
    if conn.dialect.name != "postgresql":
        return False
    found = conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


_SHARDED: WeakKeyDictionary[Engine, bool] = WeakKeyDictionary()


def one_connection_a_node(conn: Connection) -> None:
    """On Citus, before a statement that reaches several shards in a transaction that then
    writes coordinator tables: run this transaction's shard statements over one connection
    a node. Citus refuses a write to a coordinator table linked to reference tables by
    foreign keys (``alerts``, say) once parallel connections have read shards. Elsewhere,
    nothing (the answer is kept a database)."""
    engine = conn.engine
    sharded = _SHARDED.get(engine)
    if sharded is None:
        sharded = _SHARDED[engine] = has_citus(conn)
    if sharded:
        conn.execute(text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))


def placed(conn: Connection) -> dict[str, str]:
    """Every table in Citus's metadata, by name, with its kind: 'by run', 'everywhere' or
    'coordinator' (none on a database without Citus)."""
    if not has_citus(conn):
        return {}
    rows = conn.execute(
        text("SELECT logicalrelid::regclass::text, partmethod, repmodel FROM pg_dist_partition")
    )
    kinds = {}
    for name, method, model in rows:
        if method == "h":
            kinds[name] = "by run"
        elif model == "t":
            kinds[name] = "everywhere"
        else:
            kinds[name] = "coordinator"
    return kinds


def _tables(conn: Connection) -> list[str]:
    rows = conn.execute(
        text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
            "AND c.relname <> 'alembic_version' ORDER BY c.relname"
        )
    )
    return [name for (name,) in rows]


def _check_nodes(conn: Connection) -> None:
    coordinator = conn.execute(
        text("SELECT count(*) FROM pg_dist_node WHERE groupid = 0")
    ).scalar_one()
    workers = conn.execute(
        text(
            "SELECT count(*) FROM pg_dist_node "
            "WHERE groupid <> 0 AND isactive AND shouldhaveshards AND noderole = 'primary'"
        )
    ).scalar_one()
    if not coordinator:
        raise NotACluster(
            "the coordinator is not in the cluster's metadata: run "
            "SELECT citus_set_coordinator_host('<its host>', <its port>) on it first"
        )
    if not workers:
        raise NotACluster(
            "the cluster has no worker to hold shards: add them with "
            "SELECT citus_add_node('<host>', <port>) first"
        )


def _sequential(conn: Connection) -> None:
    # One connection a worker for the whole transaction: the tables created here are used
    # at once by the next statements, which parallel connections could not see. Citus's
    # notices (one a table linked by foreign keys) say nothing the caller needs.
    conn.execute(text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))
    conn.execute(text("SET LOCAL client_min_messages TO warning"))


def distribute(conn: Connection) -> Placement:
    """Place every table of the schema that is not placed yet (tables the schema does not
    have yet are left for the migration that creates them)."""
    done = Placement()
    if not has_citus(conn):
        return done
    existing = set(_tables(conn))
    before = placed(conn)
    want = {t: "by run" for t in BY_RUN} | {t: "everywhere" for t in REFERENCE}
    if all(before.get(t) == want.get(t, "coordinator") for t in existing):
        return done
    _check_nodes(conn)
    _sequential(conn)
    for table, name, _ in DROPPED_KEYS:
        if table in existing and before.get(table) != "by run":
            conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}"))
    # Every table into the metadata first, as a citus local table (each call takes the
    # tables linked to it by foreign keys along); then the kinds that differ.
    for table in sorted(existing):
        if table not in placed(conn):
            conn.execute(
                text(
                    "SELECT citus_add_local_table_to_metadata(:t, cascade_via_foreign_keys => true)"
                ),
                {"t": table},
            )
    for table in REFERENCE:
        if table in existing and placed(conn)[table] != "everywhere":
            conn.execute(text("SELECT create_reference_table(:t)"), {"t": table})
            done.reference.append(table)
    conn.execute(text(f"SET LOCAL citus.shard_count = {SHARD_COUNT}"))
    for table in BY_RUN:
        if table in existing and placed(conn)[table] != "by run":
            anchor = _ANCHOR if placed(conn).get(_ANCHOR) == "by run" else "none"
            conn.execute(
                text("SELECT create_distributed_table(:t, 'run_key', colocate_with => :c)"),
                {"t": table, "c": anchor},
            )
            # Rows the table held are copied into its shards; the coordinator's copy goes.
            conn.execute(
                text("SELECT truncate_local_data_after_distributing_table(:t)"), {"t": table}
            )
            done.by_run.append(table)
    done.coordinator = sorted(
        t for t, kind in placed(conn).items() if kind == "coordinator" and t not in before
    )
    return done


def undistribute(conn: Connection) -> Placement:
    """Turn every table back into a plain one, rows and all, with the foreign keys the
    layout dropped."""
    done = Placement()
    if not has_citus(conn):
        return done
    _sequential(conn)
    before = placed(conn)
    # The sharded ones first: undoing a table undoes those linked to it by foreign keys.
    for table in sorted(before, key=lambda t: before[t] != "by run"):
        if table in placed(conn):
            conn.execute(
                text("SELECT undistribute_table(:t, cascade_via_foreign_keys => true)"),
                {"t": table},
            )
    done.undone = sorted(before)
    existing = set(_tables(conn))
    for table, name, definition in DROPPED_KEYS:
        if table in existing and table in before:
            conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"))
    return done
