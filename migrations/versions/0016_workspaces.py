"""run-page workspaces

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 15:10:00

``workspaces``: one row a project, the layout of its run pages' metric panels as JSON
(pinned, hidden, their order, the expression panels added, the groups folded), checked and
bounded by the API before it is stored. ``revision`` grows with every save.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_UTC_TIME = sa.DateTime(timezone=True)
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "workspaces",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("layout", _JSON, nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", _UTC_TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_workspaces_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_workspaces")),
    )


def downgrade() -> None:
    op.drop_table("workspaces")
