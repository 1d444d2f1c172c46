"""Chunks and rollups stored in an earlier layout, rewritten in the current one.

Every layout a store ever held still reads (see :mod:`.chunks` and :mod:`.outline`), so
nothing has to happen at upgrade time; but a chunk keeps the bytes it was written with until
it is rewritten. The compactor calls `Recoder.step` when a pass had nothing to compact, and
each call rewrites up to a budget of rows, a run at a time, in transactions of
:data:`ROWS_PER_TRANSACTION`:

- a chunk whose values or uneven steps are byte-shuffled zlib (before pcodec), or whose
  bucket summary is one zlib stream: its points are decoded and packed again, giving data,
  summary and outline in the current layouts;
- a chunk whose outline holds float64 values though its values are float32 (before float32
  outlines): its outline is made again from its summary;
- a rollup row whose summary is one zlib stream: its summary is encoded again.

The points and every value a read gives back stay exactly the same: a float32 chunk is
packed from its float32 values, a float64 one from its float64 values, and a summary holds
the same buckets. A chunk keeps the precision it was written with, whatever compaction's
is now: a float64 chunk is never narrowed (that would lose what it kept), and a float32 one
(the earlier default, or the opt-in lossy setting) is not widened, since its values were
rounded when it was written and widening would only cost space. A row is rewritten only
if it still has the span and count it was read with, so a compaction that merged points
into it meanwhile (another server's compactor) wins. Each run's rows are looked at once per
process; one statement a run reads a few bytes of each of its rows (on a cluster sharded by
run, every statement stays on one shard).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from ..db import is_unavailable
from . import chunks, outline, summary_codec

log = logging.getLogger("normwatch.compaction")

ROWS_PER_TRANSACTION = 200
RUNS_PER_STEP = 50
"""Runs looked at in one step at most, so that a store of many runs that hold nothing old
does not keep the compactor from its own work."""


@dataclass
class Recoded:
    chunks: int = 0
    rollups: int = 0
    runs_done: int = 0

    @property
    def rows(self) -> int:
        return self.chunks + self.rollups


def chunk_is_old(head: bytes | None, summary_head: bytes, outline_head: bytes | None) -> bool:
    """Whether a chunk row is of an earlier layout, from the first bytes of its data (the
    header up to the value codec), summary and outline."""
    if head is not None and len(head) >= 4:
        if chunks.zlib_coded(head):
            return True
        if outline_head and chunks.holds_float32(head) and outline.first_layout(outline_head):
            return True
    return summary_codec.summary_is_zlib(summary_head)


def _repacked(data: bytes | None, summary: bytes) -> tuple[bytes | None, bytes, bytes]:
    """A chunk row's data, summary and outline in the current layouts."""
    if data is None:  # thinned by retention: only the summary is left
        buckets = summary_codec.decode_buckets(summary)
        return None, summary_codec.encode_buckets(buckets), outline.encode(buckets)
    points, narrow = chunks.decode_raw(data)
    packed, buckets = chunks.pack(points, "float32" if narrow else "float64")
    return packed, summary_codec.encode_buckets(buckets), outline.encode(buckets, narrow)


def recode_run(session: Session, run_key: int, budget: int) -> tuple[Recoded, bool]:
    """Rewrite up to ``budget`` old rows of one run; what was done, and whether none is left."""
    conn = session.connection()
    done = Recoded()
    heads = conn.execute(
        text(
            "SELECT metric_id, segment, seq, first_step, last_step, count, substr(data, 1, 4), "
            "substr(buckets, 1, 1), substr(outline, 1, 1) FROM chunks WHERE run_key = :rk"
        ),
        {"rk": run_key},
    ).all()
    old = [
        r[:6]
        for r in heads
        if chunk_is_old(
            None if r[6] is None else bytes(r[6]),
            bytes(r[7] or b""),
            None if r[8] is None else bytes(r[8]),
        )
    ]
    for mid, seg, seq, first, last, count in old[:budget]:
        key = {"rk": run_key, "mid": mid, "seg": seg, "seq": seq}
        row = conn.execute(
            text(
                "SELECT data, buckets FROM chunks WHERE run_key = :rk AND metric_id = :mid "
                "AND segment = :seg AND seq = :seq AND first_step = :first "
                "AND last_step = :last AND count = :count"
            ),
            {**key, "first": first, "last": last, "count": count},
        ).first()
        if row is None:
            continue  # rewritten or deleted meanwhile
        data, summary, shape = _repacked(None if row[0] is None else bytes(row[0]), bytes(row[1]))
        conn.execute(
            text(
                "UPDATE chunks SET data = :data, buckets = :buckets, outline = :outline "
                "WHERE run_key = :rk AND metric_id = :mid AND segment = :seg AND seq = :seq "
                "AND first_step = :first AND last_step = :last AND count = :count"
            ),
            {
                **key,
                "first": first,
                "last": last,
                "count": count,
                "data": data,
                "buckets": summary,
                "outline": shape,
            },
        )
        done.chunks += 1
        if done.chunks % ROWS_PER_TRANSACTION == 0:
            session.commit()
            conn = session.connection()
    left = budget - done.chunks
    rollups = conn.execute(
        text(
            "SELECT metric_id, segment, level, seq, buckets FROM rollups WHERE run_key = :rk "
            "AND substr(buckets, 1, 1) = :zlib"
        ),
        {"rk": run_key, "zlib": bytes((summary_codec.ZLIB_SUMMARY,))},
    ).all()
    for mid, seg, level, seq, blob in rollups[: max(left, 0)]:
        buckets = summary_codec.decode_buckets(bytes(blob))
        conn.execute(
            text(
                "UPDATE rollups SET buckets = :buckets WHERE run_key = :rk AND metric_id = :mid "
                "AND segment = :seg AND level = :level AND seq = :seq AND buckets = :old"
            ),
            {
                "rk": run_key,
                "mid": mid,
                "seg": seg,
                "level": level,
                "seq": seq,
                "buckets": summary_codec.encode_buckets(buckets),
                "old": bytes(blob),
            },
        )
        done.rollups += 1
    session.commit()
    # Every old row was tried (one that failed its span check is rewritten already, by
    # compaction): the run is not looked at again by this process.
    finished = len(old) <= budget and len(rollups) <= max(left, 0)
    return done, finished


@dataclass
class Recoder:
    """Walks every run once per process, rewriting old rows a budget at a time."""

    pending: list[int] | None = None
    """Run keys still to look at (None: not listed yet)."""
    total: Recoded = field(default_factory=Recoded)

    @property
    def finished(self) -> bool:
        return self.pending == []

    def step(
        self,
        sessions: sessionmaker[Session],
        budget: int = 4 * ROWS_PER_TRANSACTION,
        runs: int = RUNS_PER_STEP,
    ) -> Recoded:
        """Rewrite up to ``budget`` old rows of at most ``runs`` runs; what was done."""
        done = Recoded()
        looked = 0
        with sessions() as session:
            if self.pending is None:
                keys = session.execute(text("SELECT key FROM runs ORDER BY key DESC")).all()
                self.pending = [int(k) for (k,) in keys]
            while self.pending and done.rows < budget and looked < runs:
                run_key = self.pending[-1]
                looked += 1
                try:
                    got, finished = recode_run(session, run_key, budget - done.rows)
                except Exception as exc:
                    session.rollback()
                    if is_unavailable(exc):
                        raise
                    # A row that does not decode stays as it is (reads report it); the
                    # other runs go on.
                    log.exception("rewriting run %d's old chunks failed; skipped", run_key)
                    got, finished = Recoded(), True
                done.chunks += got.chunks
                done.rollups += got.rollups
                if finished:
                    self.pending.pop()
                    done.runs_done += 1
        self.total.chunks += done.chunks
        self.total.rollups += done.rollups
        self.total.runs_done += done.runs_done
        if done.rows:
            log.info(
                "rewrote %d chunks and %d rollup rows of an earlier layout",
                done.chunks,
                done.rollups,
            )
        return done
