"""a note on each run, written by the project's admins

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 15:20:00

``runs.notes``: a short text an admin keeps on a run (what it tried, why it was stopped),
shown in the runs list; NULL for a run without one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("notes", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("notes")
