"""token expiry

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 10:00:00

``api_tokens.expires_at``: a token may end by itself (a rotated token's grace period, or
one created with ``--expires-in``). NULL, as for every token created before, never expires.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # SQLite drops a column by copying the table: batch mode does that there.
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("expires_at")
