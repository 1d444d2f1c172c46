"""alert repeats

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 12:00:00

``alert_rules.repeat_every_steps``: a still-firing alert is sent again that often (NULL:
never). ``alerts.repeat`` (0 for a state change, n for its n-th repeat) and ``alerts.worst``
(the value furthest past the threshold since it fired).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("alert_rules", sa.Column("repeat_every_steps", sa.BigInteger(), nullable=True))
    op.add_column(
        "alerts", sa.Column("repeat", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    op.add_column("alerts", sa.Column("worst", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_column("worst")
        batch.drop_column("repeat")
    with op.batch_alter_table("alert_rules") as batch:
        batch.drop_column("repeat_every_steps")
