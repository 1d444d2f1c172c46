"""Every point a run stored, read straight from its tables (hot blocks and compacted chunks)."""

from __future__ import annotations

import psycopg

from normwatch.scratch import admin_dsn
from normwatch.server.storage import blocks, chunks

EXACT = {"NORMWATCH_COMPACTION_PRECISION": "float64"}
"""Server settings under which :func:`stored_once` gives back exactly what was logged (the
compactor may run at any moment): the lossless default, named so that these tests say what
they rely on."""


def stored_once(database_url: str, project: str, name: str) -> dict[tuple[str, int], float]:
    """Every stored point of the run, hot or compacted, asserting that each (metric, step)
    is stored once, all of them in segment 1. The server must compact in float64 (the
    default) for the values to come back exactly."""
    run_of = "JOIN runs r ON r.key = t.run_key JOIN projects j ON j.id = r.project_id"
    where = "WHERE j.name = %s AND r.name = %s"
    with psycopg.connect(admin_dsn(database_url)) as conn:
        hot = conn.execute(
            "SELECT m.name, t.segment, t.first_step, t.last_step, t.count, t.steps, t.data "
            f"FROM blocks t JOIN metrics m ON m.id = t.metric_id {run_of} {where}",
            (project, name),
        ).fetchall()
        compacted = conn.execute(
            f"SELECT m.name, t.segment, t.data FROM chunks t JOIN metrics m "
            f"ON m.id = t.metric_id {run_of} {where}",
            (project, name),
        ).fetchall()
    parts = [(m, seg, blocks.decode(*rest)) for m, seg, *rest in hot]
    parts += [(m, seg, chunks.decode(data)) for m, seg, data in compacted]
    rows = [
        (metric, segment, step, v)
        for metric, segment, points in parts
        for step, v in zip(points.steps.tolist(), points.values.tolist(), strict=True)
    ]
    assert {row[1] for row in rows} <= {1}, "a replay opened a segment of its own"
    points = {(metric, step): v for metric, _, step, v in rows}
    assert len(points) == len(rows), f"{len(rows) - len(points)} points stored twice"
    return points


def differences(
    stored: dict[tuple[str, int], float], expected: dict[tuple[str, int], float]
) -> str:
    """What sets ``stored`` apart from ``expected``, in a few lines ("" when equal).
    Comparing two dicts of a hundred thousand points with ``==`` inside an assert makes
    pytest diff their reprs, which takes minutes; this names counts and a few examples."""
    missing = sorted(expected.keys() - stored.keys(), key=lambda key: (key[1], key[0]))
    extra = sorted(stored.keys() - expected.keys(), key=lambda key: (key[1], key[0]))
    wrong = sorted(
        (key for key in stored.keys() & expected.keys() if stored[key] != expected[key]),
        key=lambda key: (key[1], key[0]),
    )
    lines = []
    for label, keys in (("missing", missing), ("unexpected", extra), ("wrong value", wrong)):
        if keys:
            steps = [step for _, step in keys]
            lines.append(
                f"{len(keys)} {label} (steps {min(steps)}..{max(steps)}), e.g. "
                + ", ".join(f"{key}: {stored.get(key)} vs {expected.get(key)}" for key in keys[:5])
            )
    return "\n".join(lines)


def assert_same(
    stored: dict[tuple[str, int], float], expected: dict[tuple[str, int], float]
) -> None:
    found = differences(stored, expected)
    assert not found, found
