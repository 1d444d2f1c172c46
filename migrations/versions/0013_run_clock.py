"""when a run reached its steps: the clock the x axis by wall time reads

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 04:00:00

``run_clock``: one row a metric batch that moves a run on, the batch's last step and the
unix time it was logged (the batch's ``time``, else when it arrived). On a Citus
coordinator the table joins the others on the coordinator, next to ``runs``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from normwatch.server.storage.citus import distribute

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_BIG_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "run_clock",
        sa.Column(
            "run_key",
            _BIG_KEY,
            sa.ForeignKey("runs.key", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("segment", sa.SmallInteger(), primary_key=True),
        sa.Column("step", sa.BigInteger(), primary_key=True),
        sa.Column("at", sa.Double(), nullable=False),
    )
    distribute(op.get_bind())


def downgrade() -> None:
    op.drop_table("run_clock")
