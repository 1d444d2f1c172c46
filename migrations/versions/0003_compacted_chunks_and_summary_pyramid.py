"""compacted chunks and summary pyramid

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 15:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_RUN_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "chunks",
        sa.Column("run_key", sa.BigInteger(), nullable=False),
        sa.Column("metric_id", sa.BigInteger(), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=True),
        sa.Column("buckets", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("run_key", "metric_id", "segment", "seq", name=op.f("pk_chunks")),
    )
    op.create_table(
        "rollups",
        sa.Column("run_key", sa.BigInteger(), nullable=False),
        sa.Column("metric_id", sa.BigInteger(), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("level", sa.SmallInteger(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("buckets", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_key", "metric_id", "segment", "level", "seq", name=op.f("pk_rollups")
        ),
    )
    op.create_table(
        "series",
        sa.Column("run_key", sa.BigInteger(), nullable=False),
        sa.Column("metric_id", sa.BigInteger(), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("through", sa.BigInteger(), nullable=True),
        sa.Column("tail_count", sa.Integer(), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_key", "metric_id", "segment", name=op.f("pk_series")),
    )
    op.create_table(
        "compactions",
        sa.Column("run_key", _RUN_KEY, nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("through", sa.BigInteger(), nullable=True),
        sa.Column("compacted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_key"], ["runs.key"], name=op.f("fk_compactions_run_key_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_key", name=op.f("pk_compactions")),
    )
    if op.get_bind().dialect.name == "postgresql":
        # The chunk and summary blobs are compressed already: keep Postgres from trying again.
        op.execute("ALTER TABLE chunks ALTER COLUMN data SET STORAGE EXTERNAL")
        op.execute("ALTER TABLE chunks ALTER COLUMN buckets SET STORAGE EXTERNAL")
        op.execute("ALTER TABLE rollups ALTER COLUMN buckets SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_table("compactions")
    op.drop_table("series")
    op.drop_table("rollups")
    op.drop_table("chunks")
