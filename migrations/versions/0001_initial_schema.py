"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:55:19.579715
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instance_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=256), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_instance_secrets")),
    )
    op.create_table(
        "points",
        sa.Column("run_key", sa.BigInteger(), nullable=False),
        sa.Column("metric_id", sa.BigInteger(), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("run_key", "metric_id", "segment", "step", name=op.f("pk_points")),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("name", name=op.f("uq_projects_name")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_api_tokens_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "runs",
        sa.Column(
            "key",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_runs_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_runs")),
        sa.UniqueConstraint("id", name=op.f("uq_runs_id")),
        sa.UniqueConstraint("project_id", "name", name=op.f("uq_runs_project_id")),
    )
    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_key", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_key"], ["runs.key"], name=op.f("fk_events_run_key_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index("ix_events_run_key_step", "events", ["run_key", "step"], unique=False)
    op.create_table(
        "metrics",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_key", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=512), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("last_value", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_key"], ["runs.key"], name=op.f("fk_metrics_run_key_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metrics")),
        sa.UniqueConstraint("run_key", "name", name=op.f("uq_metrics_run_key")),
    )
    op.create_table(
        "segments",
        sa.Column("run_key", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("start_step", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_key"], ["runs.key"], name=op.f("fk_segments_run_key_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_key", "segment", name=op.f("pk_segments")),
    )


def downgrade() -> None:
    op.drop_table("segments")
    op.drop_table("metrics")
    op.drop_index("ix_events_run_key_step", table_name="events")
    op.drop_table("events")
    op.drop_table("runs")
    op.drop_table("api_tokens")
    op.drop_table("projects")
    op.drop_table("points")
    op.drop_table("instance_secrets")
