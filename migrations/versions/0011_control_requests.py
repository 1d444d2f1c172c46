"""requests to a trainer: checkpoint or stop

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 14:20:00

``control_requests``: an admin (or an alert rule) asks a run's trainer to checkpoint or to
stop, with a reason. The trainer hears of it in the answers to its metric batches and says
how far it has read (``seen_at``); a request the run finished without reading expires.
``ix_control_requests_open``: the unread requests of a run, which every metric batch of
the run looks up. ``alert_rules.control``: what a rule asks of the trainer when it fires.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_OPEN = sa.text("seen_at IS NULL AND expired_at IS NULL")
_BIG_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "control_requests",
        sa.Column("id", _BIG_KEY, primary_key=True, autoincrement=True),
        sa.Column(
            "run_key", _BIG_KEY, sa.ForeignKey("runs.key", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column(
            "rule_id",
            sa.Integer(),
            sa.ForeignKey("alert_rules.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("segment", sa.SmallInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_control_requests_run_key_id", "control_requests", ["run_key", "id"])
    op.create_index(
        "ix_control_requests_open",
        "control_requests",
        ["run_key"],
        postgresql_where=_OPEN,
        sqlite_where=_OPEN,
    )
    op.add_column("alert_rules", sa.Column("control", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alert_rules") as batch:
        batch.drop_column("control")
    op.drop_index("ix_control_requests_open", table_name="control_requests")
    op.drop_index("ix_control_requests_run_key_id", table_name="control_requests")
    op.drop_table("control_requests")
