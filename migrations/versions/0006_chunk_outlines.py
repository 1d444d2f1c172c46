"""chunk outlines

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 09:00:00

``chunks.outline``: per 64-point bucket the first and the largest point, uncompressed (see
``normwatch.server.storage.outline``), for reads that want one value a column from many
series at once. Chunks stored already get theirs from their bucket summaries, a few
thousand rows a statement.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from normwatch.server.storage import chunks, outline

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ROWS_PER_PASS = 2000


def upgrade() -> None:
    op.add_column("chunks", sa.Column("outline", sa.LargeBinary(), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        # Kept in line and uncompressed: reading it must cost no more than its bytes.
        op.execute("ALTER TABLE chunks ALTER COLUMN outline SET STORAGE PLAIN")
    select = sa.text(
        "SELECT run_key, metric_id, segment, seq, buckets FROM chunks "
        "WHERE (run_key, metric_id, segment, seq) > (:rk, :mid, :seg, :seq) "
        "ORDER BY run_key, metric_id, segment, seq LIMIT :n"
    )
    update = sa.text(
        "UPDATE chunks SET outline = :outline WHERE run_key = :rk AND metric_id = :mid "
        "AND segment = :seg AND seq = :seq"
    )
    after = {"rk": -1, "mid": -1, "seg": -1, "seq": -1}
    while True:
        rows = bind.execute(select, {**after, "n": _ROWS_PER_PASS}).all()
        if not rows:
            break
        bind.execute(
            update,
            [
                {
                    "rk": rk,
                    "mid": mid,
                    "seg": seg,
                    "seq": seq,
                    "outline": outline.encode(chunks.decode_buckets(bytes(blob))),
                }
                for rk, mid, seg, seq, blob in rows
            ],
        )
        rk, mid, seg, seq, _ = rows[-1]
        after = {"rk": rk, "mid": mid, "seg": seg, "seq": seq}


def downgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("outline")
