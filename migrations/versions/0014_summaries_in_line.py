"""bucket summaries kept in line with their chunk row

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 14:00:00

A chunk's summary (under a kilobyte since summaries keep their values in pcodec) is kept in
the row beside its outline, out of line only if the row would not fit a page: ``STORAGE
MAIN``. Out of line, each summary took a TOAST row of its own and left part of a page
empty; in line, the chunks table is 0.1 bytes a point smaller (benchmarks/storage.py), and a
chart read finds a summary without a TOAST index lookup. Rows written before keep their
place until they are rewritten. Postgres only: SQLite has no TOAST.
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE chunks ALTER COLUMN buckets SET STORAGE MAIN")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE chunks ALTER COLUMN buckets SET STORAGE EXTENDED")
