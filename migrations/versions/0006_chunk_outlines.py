"""chunk outlines

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 09:00:00

``chunks.outline``: per 64-point bucket the first and the largest point, uncompressed (see
``normwatch.server.storage.outline``), for reads that want one value a column from many
series at once. Chunks stored already get theirs from their bucket summaries, a few
thousand rows a statement. Both formats are written out here as they are at this
revision, so the migration does not change when the storage code does. A summary of a later
layout (a store downgraded below this revision after newer code wrote to it) is left
without an outline: reads then open that chunk's points, as for any chunk without one.
"""

from __future__ import annotations

import zlib

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ROWS_PER_PASS = 2000

# A bucket summary: per 64 points these fields, byte-shuffled then zlib-compressed.
_BUCKET = np.dtype(
    [
        ("first_step", "<i8"),
        ("last_step", "<i8"),
        ("min_step", "<i8"),
        ("max_step", "<i8"),
        ("nan_step", "<i8"),
        ("count", "<i8"),
        ("first", "<f8"),
        ("last", "<f8"),
        ("min", "<f8"),
        ("max", "<f8"),
    ]
)
_NO_STEP = np.iinfo(np.int64).min
_U32_MAX = int(np.iinfo(np.uint32).max)
_ZLIB_FIRST_BYTE = b"\x78"


def _buckets(blob: bytes) -> np.ndarray:
    width = _BUCKET.itemsize
    shuffled = np.frombuffer(zlib.decompress(blob), dtype=np.uint8).reshape(width, -1)
    return np.frombuffer(np.ascontiguousarray(shuffled.T).tobytes(), dtype=_BUCKET)


def _outline(buckets: np.ndarray) -> bytes:
    """Kind byte (0: uint32 step offsets from the first, 1: int64 steps), then the largest
    points' steps and values, then the first points' steps and values."""
    firsts = buckets["first_step"].astype(np.int64)
    maxes = np.where(buckets["max_step"] == _NO_STEP, firsts, buckets["max_step"])
    base = int(firsts[0])
    narrow = int(max(firsts.max(), maxes.max())) - base <= _U32_MAX
    steps_type, shift = ("<u4", base) if narrow else ("<i8", 0)
    return b"".join(
        (
            bytes((0 if narrow else 1,)),
            (maxes - shift).astype(steps_type).tobytes(),
            buckets["max"].astype("<f8").tobytes(),
            (firsts - shift).astype(steps_type).tobytes(),
            buckets["first"].astype("<f8").tobytes(),
        )
    )


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
        known = [r for r in rows if bytes(r[4])[:1] == _ZLIB_FIRST_BYTE]
        if known:
            bind.execute(
                update,
                [
                    {
                        "rk": rk,
                        "mid": mid,
                        "seg": seg,
                        "seq": seq,
                        "outline": _outline(_buckets(bytes(blob))),
                    }
                    for rk, mid, seg, seq, blob in known
                ],
            )
        rk, mid, seg, seq, _ = rows[-1]
        after = {"rk": rk, "mid": mid, "seg": seg, "seq": seq}


def downgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("outline")
