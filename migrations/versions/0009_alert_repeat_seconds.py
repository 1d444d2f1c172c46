"""alert repeats by the wall clock

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 07:00:00

``alert_rules.repeat_every_seconds``: a firing alert that went that long without a
notification is sent again by the dispatcher's clock (NULL: never), which also repeats it
while a hung trainer sends no steps. ``ix_alert_states_firing``: the firing states, which
that clock looks through on every tick.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_FIRING = sa.text("state = 'firing'")


def upgrade() -> None:
    op.add_column("alert_rules", sa.Column("repeat_every_seconds", sa.Integer(), nullable=True))
    op.create_index(
        "ix_alert_states_firing",
        "alert_states",
        ["rule_id"],
        postgresql_where=_FIRING,
        sqlite_where=_FIRING,
    )


def downgrade() -> None:
    op.drop_index("ix_alert_states_firing", table_name="alert_states")
    with op.batch_alter_table("alert_rules") as batch:
        batch.drop_column("repeat_every_seconds")
