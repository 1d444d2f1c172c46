"""Helpers for writing statements: padded row counts, VALUES tables of bound parameters,
the psycopg connection under SQLAlchemy's, and the padded OR of composite keys."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

T = TypeVar("T")


@contextmanager
def psycopg_of(conn: Connection, statement: str) -> Iterator[psycopg.Connection[Any]]:
    """The psycopg connection under ``conn``, for what SQLAlchemy cannot send (``COPY``,
    a statement that must not be prepared).

    Its errors come out as SQLAlchemy's would (``OperationalError`` for a lost connection,
    which is then invalidated), so callers and the app's error handlers see one kind.
    """
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    try:
        yield driver
    except psycopg.Error as exc:
        lost = driver.broken or driver.closed
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            statement, None, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc


def padded(items: Sequence[T]) -> Sequence[T]:
    """``items`` with the last repeated up to a power of two (at least one item).

    For statements written for a number of items (a ``VALUES`` list, an ``OR`` of keys):
    SQLAlchemy caches a compiled statement by its text, psycopg prepares a text it has seen
    a few times, and one text for every count filled those caches with hundreds of large
    statements (a compactor grew by 100 MB in minutes, nearly all of it cached SQL). Padded,
    a statement has at most a dozen shapes. Only for statements that a repeated item leaves
    unchanged (a condition OR'ed twice, a row of ``UPDATE … FROM`` that matches twice).
    """
    if not items:
        raise ValueError("nothing to pad")
    size = 1 << (len(items) - 1).bit_length()
    return items if size == len(items) else [*items, *[items[-1]] * (size - len(items))]


def values_table(
    types: Sequence[str], rows: Sequence[Sequence[object]]
) -> tuple[str, dict[str, object]]:
    """``VALUES (...), ...`` of ``rows`` as bound parameters, each column cast to its SQL
    type (what both Postgres and SQLite take as a table in a ``WITH`` clause), and the
    parameters. The rows are `padded`: the table may hold the last row more than once."""
    params: dict[str, object] = {}
    tuples = []
    for i, row in enumerate(padded(rows)):
        cells = []
        for j, (kind, value) in enumerate(zip(types, row, strict=True)):
            params[f"v{i}_{j}"] = value
            cells.append(f"CAST(:v{i}_{j} AS {kind})")
        tuples.append("(" + ", ".join(cells) + ")")
    return "VALUES " + ", ".join(tuples), params


KEYS_PER_QUERY = 512
"""Most keys OR'ed in one statement (a power of two: see `padded`)."""


def any_key(
    columns: Sequence[str], keys: Sequence[tuple[int, ...]]
) -> tuple[str, dict[str, object]]:
    """``a IN (:k0_0, …) AND ((a = :k0_0 AND b = :k0_1) OR …)`` for ``keys`` (`padded`),
    and its parameters.

    The ``IN`` on the first column says nothing the ``OR`` does not, but the planner can
    use it as an index condition: without it, on a table whose statistics lag behind (the
    first compaction of a new run with thousands of metrics), Postgres read the whole run's
    rows and tested every one against every key, 140 ms a statement where this takes 6.
    """
    params: dict[str, object] = {}
    terms = []
    firsts = []
    for i, key in enumerate(padded(keys)):
        parts = []
        for j, (column, value) in enumerate(zip(columns, key, strict=True)):
            params[f"k{i}_{j}"] = value
            parts.append(f"{column} = :k{i}_{j}")
        terms.append("(" + " AND ".join(parts) + ")")
        firsts.append(f":k{i}_0")
    return f"{columns[0]} IN ({', '.join(firsts)}) AND ({' OR '.join(terms)})", params


_NAMED = re.compile(r"(?<!:):(\w+)")


def fetch(
    conn: Connection, sql: str, params: Mapping[str, object], *, prepare: bool | None = None
) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (``:name`` parameters), through the driver itself on Postgres.

    There they come in binary format, so summary and chunk blobs arrive as stored rather
    than as hex text: a zoomed-out read fetches a few hundred kilobytes of them, and the
    hex costs the server and the client about three times as long as the bytes. Errors come
    out as SQLAlchemy's would (``OperationalError`` for a lost connection, then invalidated).

    ``prepare=False`` keeps psycopg from preparing the statement once it has seen it a few
    times. A prepared statement may be given Postgres's generic plan, made without the
    values; for an `any_key` lookup in a table whose statistics lag, that plan read every
    row of the run (290 ms a statement, against 17 ms planned for the values).
    """
    if not isinstance(conn.connection.driver_connection, psycopg.Connection):
        return [tuple(r) for r in conn.execute(text(sql), params)]
    with psycopg_of(conn, sql) as driver, driver.cursor(binary=True) as cursor:
        cursor.execute(_pyformat(sql), params, prepare=prepare)
        return cursor.fetchall()


@functools.lru_cache(maxsize=256)
def _pyformat(sql: str) -> str:
    """``:name`` parameters as psycopg's ``%(name)s``."""
    return _NAMED.sub(r"%(\1)s", sql)
