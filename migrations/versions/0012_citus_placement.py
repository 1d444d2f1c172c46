"""on a Citus coordinator: shard the series tables by run

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 17:10:00

Nothing changes on plain PostgreSQL or SQLite. On a database with the citus extension, the
series tables and alert states are distributed by ``run_key`` (co-located, 32 shards), the
small tables every request reads become reference tables, and the rest stay on the
coordinator as citus local tables (:mod:`normwatch.server.storage.citus` says why). A database that
got Citus after it was migrated is placed with ``normwatch db distribute``. The downgrade
turns every table back into a plain one, rows and all.
"""

from __future__ import annotations

from alembic import op

from normwatch.server.storage.citus import distribute, undistribute

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    distribute(op.get_bind())


def downgrade() -> None:
    undistribute(op.get_bind())
