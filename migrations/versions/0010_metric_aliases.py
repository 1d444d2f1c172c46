"""metric-name aliases

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 14:10:00

``metric_aliases``: one row a project, the alias presets it chose (``presets``, in order
of preference) and its own ``alias → canonical`` pairs (``pairs``). Stored names are never
renamed; reads and rules resolve a canonical name to a stored alias through this row.
``revision`` grows with every change, so that a worker's cached copy knows it is stale.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_UTC_TIME = sa.DateTime(timezone=True)
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "metric_aliases",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("presets", _JSON, nullable=False),
        sa.Column("pairs", _JSON, nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", _UTC_TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_metric_aliases_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_metric_aliases")),
    )


def downgrade() -> None:
    op.drop_table("metric_aliases")
