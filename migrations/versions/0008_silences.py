"""silences, acknowledgements and alert groups

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 15:00:00

``silences``: a project's notifications matching a rule, a run and a metric glob (each
optional) are recorded and not sent, until a time or a step, with who and why.
``alerts.silenced_by``: the silence that held an alert's notifications back;
``alerts.members``: the metrics a glob rule's group message lists, and
``alert_rules.group_wait_steps``: how long its first message waits for more;
``alerts.acked_at``/``acked_by``/``ack_comment``: someone took a firing alert on (its
repeats are then recorded and not sent).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_UTC_TIME = sa.DateTime(timezone=True)
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.Integer(), nullable=True),
        sa.Column("run_key", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("metric", sa.String(length=512), nullable=True),
        sa.Column("ends_at", _UTC_TIME, nullable=True),
        sa.Column("until_step", sa.BigInteger(), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_at", _UTC_TIME, nullable=False),
        sa.Column("expired_at", _UTC_TIME, nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_silences_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["rule_id"],
            ["alert_rules.id"],
            name=op.f("fk_silences_rule_id_alert_rules"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_key"], ["runs.key"], name=op.f("fk_silences_run_key_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_silences")),
    )
    op.create_index("ix_silences_project_id", "silences", ["project_id"])
    op.add_column("alert_rules", sa.Column("group_wait_steps", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(sa.Column("silenced_by", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("members", _JSON, nullable=True))
        batch.add_column(sa.Column("acked_at", _UTC_TIME, nullable=True))
        batch.add_column(sa.Column("acked_by", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("ack_comment", sa.Text(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_alerts_silenced_by_silences"),
            "silences",
            ["silenced_by"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_constraint(op.f("fk_alerts_silenced_by_silences"), type_="foreignkey")
        batch.drop_column("ack_comment")
        batch.drop_column("acked_by")
        batch.drop_column("acked_at")
        batch.drop_column("members")
        batch.drop_column("silenced_by")
    with op.batch_alter_table("alert_rules") as batch:
        batch.drop_column("group_wait_steps")
    op.drop_index("ix_silences_project_id", table_name="silences")
    op.drop_table("silences")
