"""The ingest fast path: binary COPY, the metric id cache and the set-based latest values.

The COPY stream is checked against an independent decoder written from the format's
description, and by a real round trip through Postgres. Ingest runs on both backends
through a rolled-back session; concurrency and re-sending go through a real server.
"""

from __future__ import annotations

import math
import struct
import threading
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
from normwatch.server.auth import Principal, authenticate, create_token
from normwatch.server.batch import parse_batch
from normwatch.server.db import build_engine, session_factory
from normwatch.server.models import Run
from normwatch.server.schemas import RunCreate
from normwatch.server.services import ingest, runs
from normwatch.server.storage import blocks, pgcopy
from normwatch.server.storage.metric_ids import (
    MetricIdCache,
    metric_id_cache,
    metric_ids_by_name,
    resolve_metric_ids,
)
from normwatch.server.storage.points import latest_values, read_points, write_points
from normwatch.server.storage.runs import lineage_of, segments_of
from sqlalchemy import make_url, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from tests.conftest import Tenant

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
AWKWARD_VALUES = [1.5, math.nan, math.inf, -math.inf, 1.7976931348623157e308, 5e-324, -0.0]

Row = tuple[int, int, int, int, float | None]


def decode_reference(payload: bytes) -> list[Row]:
    """Rows of a binary COPY stream, read field by field with ``struct`` (NULL → None)."""
    assert payload[:11] == b"PGCOPY\n\xff\r\n\x00"
    flags, extension = struct.unpack_from(">ii", payload, 11)
    assert (flags, extension) == (0, 0)
    at = 19
    rows: list[Row] = []
    while True:
        (fields,) = struct.unpack_from(">h", payload, at)
        at += 2
        if fields == -1:
            assert at == len(payload), "nothing may follow the trailer"
            return rows
        assert fields == 5
        row: list[Any] = []
        for kind in ("q", "q", "h", "q", "d"):
            (length,) = struct.unpack_from(">i", payload, at)
            at += 4
            if length == -1:
                row.append(None)
                continue
            assert length == struct.calcsize(kind)
            row.append(struct.unpack_from(">" + kind, payload, at)[0])
            at += length
        rows.append((row[0], row[1], row[2], row[3], row[4]))


def same_float(a: float | None, b: float | None) -> bool:
    """Equal bit for bit in meaning: NaN equals NaN, and -0.0 differs from 0.0."""
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def test_encode_points_matches_the_reference_decoder() -> None:
    mids = np.array([1, 2, INT64_MAX, 7, 8, 9, 10], dtype=np.int64)
    steps = np.array([0, -1, INT64_MAX, INT64_MIN, 5, 6, 7], dtype=np.int64)
    values = np.array(AWKWARD_VALUES, dtype=np.float64)
    for run_key, segment in ((42, 1), (INT64_MAX, 32767), (1, -32768)):
        rows = decode_reference(pgcopy.encode_points(run_key, segment, mids, steps, values))
        assert [r[:4] for r in rows] == [
            (run_key, int(m), segment, int(s)) for m, s in zip(mids, steps, strict=True)
        ]
        expected = [None if math.isnan(v) else v for v in AWKWARD_VALUES]
        assert all(same_float(r[4], v) for r, v in zip(rows, expected, strict=True))


def test_encode_points_all_null_and_empty() -> None:
    nan = np.full(3, math.nan)
    rows = decode_reference(pgcopy.encode_points(3, 2, np.arange(3), np.arange(3), nan))
    assert rows == [(3, 0, 2, 0, None), (3, 1, 2, 1, None), (3, 2, 2, 2, None)]
    empty = np.empty(0, dtype=np.int64)
    payload = pgcopy.encode_points(3, 2, empty, empty, np.empty(0))
    assert payload == pgcopy.HEADER + pgcopy.TRAILER


def test_encode_points_rejects_bad_input() -> None:
    one = np.ones(1, dtype=np.int64)
    with pytest.raises(ValueError, match="one length"):
        pgcopy.encode_points(1, 1, one, np.ones(2, dtype=np.int64), np.ones(1))
    with pytest.raises(ValueError, match="smallint"):
        pgcopy.encode_points(1, 2**15, one, one, np.ones(1))


def test_copy_stream_round_trips_through_postgres(pg_url: str) -> None:
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    rng = np.random.default_rng(7)
    count = 10_000
    mids = rng.integers(INT64_MIN, INT64_MAX, size=count, dtype=np.int64)
    steps = rng.integers(INT64_MIN, INT64_MAX, size=count, dtype=np.int64)
    values = rng.normal(size=count)
    values[: len(AWKWARD_VALUES)] = AWKWARD_VALUES
    values[rng.random(count) < 0.1] = math.nan
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE TEMP TABLE points (run_key bigint, metric_id bigint, segment smallint, "
            "step bigint, value float8, seq serial)"
        )
        with conn.cursor() as cur, cur.copy(pgcopy.COPY_POINTS) as copy:
            copy.write(pgcopy.encode_points(INT64_MAX, 3, mids, steps, values))
        stored = conn.execute(
            "SELECT run_key, metric_id, segment, step, value FROM points ORDER BY seq"
        ).fetchall()
    assert len(stored) == count
    assert {(r[0], r[2]) for r in stored} == {(INT64_MAX, 3)}
    assert [r[1] for r in stored] == mids.tolist()
    assert [r[3] for r in stored] == steps.tolist()
    expected = [None if math.isnan(v) else v for v in values.tolist()]
    assert all(same_float(r[4], v) for r, v in zip(stored, expected, strict=True))


def decode_array_reference(payload: bytes) -> list[int | float | None]:
    """A one-dimensional binary ``bigint[]``/``float8[]``, read with ``struct``."""
    ndim, has_null, oid = struct.unpack_from(">iii", payload)
    if ndim == 0:
        assert len(payload) == 12
        return []
    count, lower = struct.unpack_from(">ii", payload, 12)
    assert (ndim, lower, oid in (20, 701)) == (1, 1, True)
    at = 20
    out: list[int | float | None] = []
    for _ in range(count):
        (length,) = struct.unpack_from(">i", payload, at)
        at += 4
        if length == -1:
            out.append(None)
            continue
        out.append(struct.unpack_from(">q" if oid == 20 else ">d", payload, at)[0])
        at += 8
    assert at == len(payload) and has_null == (None in out)
    return out


def test_encode_array_matches_the_reference_and_postgres(pg_url: str) -> None:
    ints = np.array([0, -1, INT64_MIN, INT64_MAX, 42], dtype=np.int64)
    floats = np.array(AWKWARD_VALUES + [math.nan], dtype=np.float64)
    expected_floats = [None if math.isnan(v) else v for v in floats.tolist()]
    assert decode_array_reference(pgcopy.encode_array(ints)) == ints.tolist()
    decoded = decode_array_reference(pgcopy.encode_array(floats))
    assert all(same_float(a, b) for a, b in zip(decoded, expected_floats, strict=True))
    assert decode_array_reference(pgcopy.encode_array(np.empty(0))) == []
    with pytest.raises(ValueError, match="1-D int64 or float64"):
        pgcopy.encode_array(np.ones((2, 2)))
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        for values, oid, sql_type in (
            (ints, pgcopy.INT8_ARRAY_OID, "bigint[]"),
            (floats, pgcopy.FLOAT8_ARRAY_OID, "float8[]"),
            (np.empty(0, dtype=np.int64), pgcopy.INT8_ARRAY_OID, "bigint[]"),
        ):
            # Sent in binary by libpq itself, read back as Postgres prints it.
            result = conn.pgconn.exec_params(
                b"SELECT $1::text", [pgcopy.encode_array(values)], [oid], [1]
            )
            assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
            text_form = result.get_value(0, 0)
            assert text_form is not None
            stored = conn.execute(f"SELECT %s::{sql_type}", [text_form.decode()]).fetchone()
            assert stored is not None
            want = [None if isinstance(v, float) and math.isnan(v) else v for v in values.tolist()]
            assert all(same_float(a, b) for a, b in zip(stored[0], want, strict=True))


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


def principal(session: Session) -> Principal:
    secret, _ = create_token(session, "fastpath-tests", "ingest")
    who = authenticate(session, secret)
    assert who is not None
    return who


def new_run(session: Session, name: str) -> Run:
    out = runs.create_or_resume(session, principal(session), RunCreate(name=name))
    found = runs.get_run(session, out.id)
    assert found is not None
    return found[0]


def stored_points(session: Session, run: Run) -> dict[tuple[str, int], float | None]:
    """Every hot point of the run (NaN as None), asserting none is stored twice."""
    rows = session.execute(
        text(
            "SELECT m.name, b.first_step, b.last_step, b.count, b.steps, b.data FROM blocks b "
            "JOIN metrics m ON m.id = b.metric_id WHERE b.run_key = :rk"
        ),
        {"rk": run.key},
    )
    out: dict[tuple[str, int], float | None] = {}
    for name, first, last, count, steps, data in rows:
        pts = blocks.decode(first, last, count, steps, data)
        for step, value in zip(pts.steps.tolist(), pts.values.tolist(), strict=True):
            assert (name, step) not in out, f"{name} at {step} stored twice"
            out[(name, step)] = None if value != value else value
    return out


def latest(session: Session, run: Run) -> dict[str, tuple[int | None, float | None]]:
    """Each metric's latest (step, value) as listings show it (NaN as None)."""
    return {
        name: (step, None if value is None or value != value else value)
        for name, step, value in latest_values(session, run.key)
    }


def batch_of(steps: list[int], metrics: dict[str, list[Any]]) -> Any:
    return parse_batch({"steps": steps, "metrics": metrics}, max_points=1_000_000)


def test_resent_batch_after_commit_stores_nothing_twice(db_session: Session) -> None:
    run = new_run(db_session, "resend")
    batch = batch_of([10, 11, 12], {"a": [1.0, 2.0, 3.0], "b": [4.0, None, 6.0]})
    assert ingest.ingest_batch(db_session, run.id, batch).points == 5
    db_session.commit()
    again = ingest.ingest_batch(db_session, run.id, batch)  # every key stored: COPY falls back
    assert again.points == 5
    db_session.commit()
    assert stored_points(db_session, run) == {
        ("a", 10): 1.0,
        ("a", 11): 2.0,
        ("a", 12): 3.0,
        ("b", 10): 4.0,
        ("b", 12): 6.0,
    }
    assert latest(db_session, run) == {"a": (12, 3.0), "b": (12, 6.0)}


def test_overlapping_batch_stores_only_new_points(db_session: Session) -> None:
    run = new_run(db_session, "overlap")
    ingest.ingest_batch(db_session, run.id, batch_of(list(range(10)), {"a": [0.0] * 10}))
    db_session.commit()
    # Steps 5..9 are stored already (with 0.0): the stored values win, 10..14 are new.
    b_values: list[Any] = [2.0] * 7 + ["NaN", "Infinity", "-Infinity"]  # steps 14..5
    overlap = batch_of(list(range(14, 4, -1)), {"a": [1.0] * 10, "b": b_values})
    ingest.ingest_batch(db_session, run.id, overlap)
    points = stored_points(db_session, run)
    assert {k: v for k, v in points.items() if k[0] == "a"} == {
        ("a", s): (0.0 if s < 10 else 1.0) for s in range(15)
    }
    assert {k: v for k, v in points.items() if k[0] == "b"} == {
        **{("b", s): 2.0 for s in range(8, 15)},
        ("b", 7): None,
        ("b", 6): math.inf,
        ("b", 5): -math.inf,
    }
    assert latest(db_session, run) == {"a": (14, 1.0), "b": (14, 2.0)}


def test_non_finite_values_round_trip_exactly(db_session: Session) -> None:
    run = new_run(db_session, "non-finite")
    values: list[Any] = [1.5, "NaN", None, "Infinity", "-Infinity", 1.7976931348623157e308]
    values += [5e-324, -2.5, math.nan, math.inf]  # (SQLite keeps no sign on -0.0)
    steps = [3, 1, 4, 15, 9, 2, 6, 5, 35, 8]
    ingest.ingest_batch(db_session, run.id, batch_of(steps, {"g": values}))
    got = stored_points(db_session, run)
    expected = {
        ("g", 3): 1.5,
        ("g", 1): None,
        ("g", 15): math.inf,
        ("g", 9): -math.inf,
        ("g", 2): 1.7976931348623157e308,
        ("g", 6): 5e-324,
        ("g", 5): -2.5,
        ("g", 35): None,
        ("g", 8): math.inf,
    }
    assert got.keys() == expected.keys()
    assert all(same_float(got[k], v) for k, v in expected.items())
    # Step 35 is the last logged one; its NaN is stored as NULL.
    assert latest(db_session, run) == {"g": (35, None)}
    metric_id = metric_ids_by_name(db_session, run.key, ["g"])["g"]
    lineage = lineage_of(segments_of(db_session, run.key))
    read_steps, read_values = read_points(db_session, run.key, metric_id, lineage, None, None)
    assert read_steps.tolist() == [1, 2, 3, 5, 6, 8, 9, 15, 35]
    assert all(
        same_float(float(v), e)
        for v, e in zip(
            read_values,
            [math.nan, 1.7976931348623157e308, 1.5, -2.5, 5e-324, math.inf]
            + [-math.inf, math.inf, math.nan],
            strict=True,
        )
    )


def test_latest_values_only_move_forward(db_session: Session) -> None:
    run = new_run(db_session, "latest")
    ingest.ingest_batch(
        db_session,
        run.id,
        batch_of([7, 9, 8], {"a": [7.0, 9.0, 8.0], "b": [1.0, None, 2.0], "c": [None] * 3}),
    )
    assert latest(db_session, run) == {"a": (9, 9.0), "b": (8, 2.0)}
    ingest.ingest_batch(db_session, run.id, batch_of([1, 2], {"a": [1.0, 2.0], "b": [3.0, 4.0]}))
    assert latest(db_session, run) == {"a": (9, 9.0), "b": (8, 2.0)}


def test_cache_serves_known_names_and_creates_new_ones(db_session: Session) -> None:
    run = new_run(db_session, "cache")
    cache = MetricIdCache()
    first = ingest.ingest_batch(
        db_session, run.id, batch_of([0], {"a": [1.0], "b": [2.0]}), known=cache
    )
    db_session.commit()
    cache.remember(run.key, first.metric_ids)
    # "c" appears for the first time: a miss, created and resolved in the database.
    second = ingest.ingest_batch(
        db_session, run.id, batch_of([1], {"c": [3.0], "a": [4.0], "b": [5.0]}), known=cache
    )
    assert second.metric_ids == metric_ids_by_name(db_session, run.key, ["a", "b", "c"])
    assert {k: second.metric_ids[k] for k in "ab"} == first.metric_ids
    assert cache.lookup(run.key, ["c"]) == ({}, ["c"]), "not remembered before a commit"
    assert stored_points(db_session, run) == {
        ("a", 0): 1.0,
        ("b", 0): 2.0,
        ("c", 1): 3.0,
        ("a", 1): 4.0,
        ("b", 1): 5.0,
    }


def test_rolled_back_batch_leaves_the_cache_correct(db_session: Session) -> None:
    run = new_run(db_session, "rollback")
    db_session.commit()
    cache = MetricIdCache()
    nested = db_session.begin_nested()
    ingest.ingest_batch(db_session, run.id, batch_of([0], {"gone": [1.0]}), known=cache)
    nested.rollback()  # the metric row is gone; nothing was remembered, so no id dangles
    assert cache.lookup(run.key, ["gone"]) == ({}, ["gone"])
    again = ingest.ingest_batch(db_session, run.id, batch_of([0], {"gone": [2.0]}), known=cache)
    assert again.metric_ids == metric_ids_by_name(db_session, run.key, ["gone"])
    assert stored_points(db_session, run) == {("gone", 0): 2.0}


def test_lost_connection_during_copy_is_an_operational_error(pg_url: str) -> None:
    engine = build_engine(pg_url, pool_size=1)
    try:
        with session_factory(engine)() as session:
            run = new_run(session, "lost")
            session.commit()
            batch = batch_of([0, 1], {"a": [1.0, 2.0]})
            ids = resolve_metric_ids(session, run.key, ["a"])
            pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
            admin_dsn = make_url(pg_url).set(drivername="postgresql")
            with psycopg.connect(admin_dsn.render_as_string(hide_password=False)) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
            with pytest.raises(OperationalError) as err:
                write_points(session, run.key, 1, batch, ids)
            assert err.value.connection_invalidated
    finally:
        engine.dispose()


def post(api: httpx.Client, tenant: Tenant, run_id: str, doc: dict[str, Any]) -> httpx.Response:
    return api.post(
        f"/api/v1/runs/{run_id}/metrics", json=doc, headers=tenant.headers("ingest"), timeout=60
    )


def test_concurrent_overlapping_batches_of_one_run(api: httpx.Client, tenant: Tenant) -> None:
    """Threads posting overlapping batches of one run, steps and names in different orders,
    new names appearing in several at once: every batch is accepted (no deadlock) and
    every point is stored once."""
    r = api.post("/api/v1/runs", json={"name": "concurrent"}, headers=tenant.headers("ingest"))
    assert r.status_code == 200, r.text
    run_id = r.json()["id"]
    names = [f"layer.{i}/grad_norm" for i in range(40)]

    def value(name: str, step: int) -> float:
        return step + names.index(name) / 100

    def doc(lo: int, flip: bool) -> dict[str, Any]:
        steps = list(range(lo, lo + 20))
        order = names[::-1] if flip else names
        if flip:
            steps.reverse()
        return {"steps": steps, "metrics": {n: [value(n, s) for s in steps] for n in order}}

    docs = [doc(lo, flip) for lo in range(0, 100, 10) for flip in (False, True)]
    statuses: list[int] = []
    lock = threading.Lock()

    def send(worker: int) -> None:
        with httpx.Client(base_url=str(api.base_url), timeout=60) as client:
            for d in docs[worker::4] + docs[::-1][worker::4]:
                code = post(client, tenant, run_id, d).status_code
                with lock:
                    statuses.append(code)

    threads = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert statuses == [202] * (2 * len(docs))
    read = {"Authorization": f"Bearer {tenant.read}"}
    got = api.get(
        f"/api/v1/runs/{run_id}/series",
        params={"metric": names[:3] + names[-1:], "points": 1000},
        headers=read,
    ).json()
    for s in got["series"]:
        assert s["steps"] == list(range(110))
        assert s["values"] == [value(s["metric"], step) for step in range(110)]
    listed = {m["name"]: m for m in api.get(f"/api/v1/runs/{run_id}/metrics", headers=read).json()}
    assert sorted(listed) == sorted(names)
    assert all(listed[n]["last_step"] == 109 for n in names)
    assert all(listed[n]["last_value"] == value(n, 109) for n in names)


def test_resent_and_extended_batches_over_http(api: httpx.Client, tenant: Tenant) -> None:
    r = api.post("/api/v1/runs", json={"name": "resend-http"}, headers=tenant.headers("ingest"))
    run_id = r.json()["id"]
    first = {"steps": [0, 1, 2], "metrics": {"a": [0.5, "NaN", None], "b": [1, 2, 3]}}
    for _ in range(2):
        r = post(api, tenant, run_id, first)
        assert (r.status_code, r.json()["accepted"]) == (202, 5)
    more = {"steps": [2, 3], "metrics": {"a": [9.0, 9.5], "new": ["-Infinity", 7.0]}}
    assert post(api, tenant, run_id, more).json()["accepted"] == 4
    read = {"Authorization": f"Bearer {tenant.read}"}
    got = api.get(
        f"/api/v1/runs/{run_id}/series", params={"metric": ["a", "b", "new"]}, headers=read
    ).json()
    by_name = {s["metric"]: (s["steps"], s["values"]) for s in got["series"]}
    assert by_name == {
        "a": ([0, 1, 2, 3], [0.5, "NaN", 9.0, 9.5]),
        "b": ([0, 1, 2], [1.0, 2.0, 3.0]),
        "new": ([2, 3], ["-Infinity", 7.0]),
    }
