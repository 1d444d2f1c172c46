"""hot points as one block a series and batch

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 07:30:00

Uncompacted points move from ``points`` (a row a point) into ``blocks`` (a row a series and
batch; see ``normwatch.server.storage.blocks``). Points stored already become one block a series.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SERIES_PER_PASS = 500


def upgrade() -> None:
    op.create_table(
        "blocks",
        sa.Column("run_key", sa.BigInteger(), nullable=False),
        sa.Column("metric_id", sa.BigInteger(), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("last_value", sa.Double(), nullable=True),
        sa.Column("steps", sa.LargeBinary(), nullable=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_key", "metric_id", "segment", "first_step", name=op.f("pk_blocks")
        ),
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        # Raw float8 and int8 bytes do not compress: keep Postgres from trying.
        op.execute("ALTER TABLE blocks ALTER COLUMN steps SET STORAGE EXTERNAL")
        op.execute("ALTER TABLE blocks ALTER COLUMN data SET STORAGE EXTERNAL")
        op.execute(
            "INSERT INTO blocks (run_key, metric_id, segment, first_step, last_step, count, "
            "last_value, steps, data) SELECT run_key, metric_id, segment, min(step), max(step), "
            "count(*), (array_agg(value ORDER BY step DESC))[1], "
            "string_agg(int8send(step), ''::bytea ORDER BY step), "
            "string_agg(float8send(coalesce(value, 'NaN'::float8)), ''::bytea ORDER BY step) "
            "FROM points GROUP BY run_key, metric_id, segment"
        )
    else:
        insert = sa.text(
            "INSERT INTO blocks (run_key, metric_id, segment, first_step, last_step, count, "
            "last_value, steps, data) VALUES (:rk, :mid, :seg, :first, :last, :count, :lv, "
            ":steps, :data)"
        )
        for rows in _series_of_points(bind):
            bind.execute(insert, rows)
    op.drop_table("points")


def _series_of_points(bind: sa.Connection) -> Iterator[list[dict[str, object]]]:
    """The points table as one block row a series, a few hundred series at a time."""
    keys = bind.execute(
        sa.text("SELECT DISTINCT run_key, metric_id, segment FROM points ORDER BY 1, 2, 3")
    ).all()
    for i in range(0, len(keys), _SERIES_PER_PASS):
        rows = []
        for rk, mid, seg in keys[i : i + _SERIES_PER_PASS]:
            pts = bind.execute(
                sa.text(
                    "SELECT step, value FROM points WHERE run_key = :rk AND metric_id = :mid "
                    "AND segment = :seg ORDER BY step"
                ),
                {"rk": rk, "mid": mid, "seg": seg},
            ).all()
            steps = np.array([p[0] for p in pts], dtype=">i8")
            values = np.array([np.nan if p[1] is None else p[1] for p in pts], dtype=">f8")
            rows.append(
                {
                    "rk": rk,
                    "mid": mid,
                    "seg": seg,
                    "first": int(steps[0]),
                    "last": int(steps[-1]),
                    "count": len(pts),
                    "lv": pts[-1][1],
                    "steps": steps.tobytes(),
                    "data": values.tobytes(),
                }
            )
        yield rows


def downgrade() -> None:
    op.create_table(
        "points",
        sa.Column("run_key", sa.BigInteger(), nullable=False),
        sa.Column("metric_id", sa.BigInteger(), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("run_key", "metric_id", "segment", "step", name=op.f("pk_points")),
    )
    bind = op.get_bind()
    insert = sa.text(
        "INSERT INTO points (run_key, metric_id, segment, step, value) "
        "VALUES (:rk, :mid, :seg, :step, :value)"
    )
    blocks = bind.execute(
        sa.text(
            "SELECT run_key, metric_id, segment, first_step, last_step, count, steps, data "
            "FROM blocks ORDER BY run_key, metric_id, segment, first_step"
        )
    ).all()
    for rk, mid, seg, first, last, count, steps, data in blocks:
        values = np.frombuffer(bytes(data), dtype=">f8").astype(np.float64)
        if steps is not None:
            at = np.frombuffer(bytes(steps), dtype=">i8").astype(np.int64)
        elif count == 1:
            at = np.array([first], dtype=np.int64)
        else:
            at = np.arange(first, last + 1, (last - first) // (count - 1), dtype=np.int64)
        bind.execute(
            insert,
            [
                {"rk": rk, "mid": mid, "seg": seg, "step": s, "value": None if v != v else v}
                for s, v in zip(at.tolist(), values.tolist(), strict=True)
            ],
        )
    op.drop_table("blocks")
