"""The compactor: a thread that runs compaction passes and retention sweeps on their clocks."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from .. import memory
from ..config import Settings
from ..db import is_unavailable
from ..storage import retention
from ..storage.policy import PassReport, Policy
from ..storage.recode import Recoder
from ..storage.schedule import compact_pass
from ..storage.vacuum import vacuum_hot_table

log = logging.getLogger("normwatch.compaction")


MAX_PAUSE_S = 5.0
"""Longest rest between two routine runs of a pass."""


class Compactor:
    """Runs :func:`compact_pass` every ``interval_s`` in a daemon thread.

    Between two runs of a pass that were due by their clock it rests ``pace`` times as long
    as the first took (0: no rest); runs that piled up points are taken back to back.

    With ``retention`` (days, mode) it also sweeps old runs (see
    :mod:`..storage.retention`) every ``retention_every_s``.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        policy: Policy,
        *,
        interval_s: float = 5.0,
        pace: float = 1.0,
        retention: tuple[float, str] | None = None,
        retention_every_s: float = 3600.0,
    ) -> None:
        self._sessions = sessions
        self._policy = policy
        self._interval = interval_s
        self._pace = pace
        self._retention = retention
        self._retention_every = retention_every_s
        self._next_sweep = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_report: PassReport | None = None
        self.recoder = Recoder()
        """Rewrites rows of earlier layouts when a pass had nothing to compact."""

    @classmethod
    def from_settings(cls, sessions: sessionmaker[Session], settings: Settings) -> Compactor:
        """The compactor that ``settings`` describe (policy, interval, retention)."""
        return cls(
            sessions,
            Policy(
                chunk_points=settings.compaction_chunk_points,
                precision=settings.compaction_precision,
                max_age_s=settings.compaction_max_age_s,
                idle_s=settings.compaction_idle_s,
            ),
            interval_s=settings.compaction_interval_s,
            pace=settings.compaction_pace,
            retention=None
            if settings.retention_days is None
            else (settings.retention_days, settings.retention_mode),
        )

    @property
    def policy(self) -> Policy:
        return self._policy

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="normwatch-compactor", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                report = compact_pass(
                    self._sessions, self._policy, pause=self._pause if self._pace > 0 else None
                )
            except Exception as exc:  # the database is down, say: try again next tick
                if is_unavailable(exc):
                    log.warning("compaction pass: database unavailable (%s); next tick", exc)
                else:
                    log.exception("compaction pass failed")
                continue
            self.last_report = report
            # Statistics reach the dead-row count a moment after the pass that made them:
            # look every pass, not only after one that compacted something.
            self._vacuum_if_bloated()
            if report.points:
                memory.trim()
                log.info(
                    "compacted %d points of %d series in %d runs (%d chunks) in %.2f s",
                    report.points,
                    report.series,
                    report.runs,
                    report.chunks_written,
                    report.seconds,
                )
            if not report.points and not self.recoder.finished:
                self._recode()
            if self._retention is not None and time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + self._retention_every
                self._sweep(*self._retention)

    def _pause(self, took_s: float) -> bool:
        """Rest ``pace`` times as long as a routine run took (at most ``MAX_PAUSE_S``), so
        runs that come due together are spread over a few seconds instead of taking the
        CPU from reads and ingest in one burst; False once stopping."""
        return not self._stop.wait(min(took_s * self._pace, MAX_PAUSE_S))

    def _recode(self) -> None:
        try:
            self.recoder.step(self._sessions)
        except Exception as exc:
            if is_unavailable(exc):
                log.warning("rewriting old chunks: database unavailable (%s); next tick", exc)
            else:
                log.exception("rewriting old chunks failed; it will be retried")

    def _vacuum_if_bloated(self) -> None:
        try:
            vacuumed = vacuum_hot_table(self._sessions)
        except Exception:
            log.exception("vacuum of the hot table failed; it will be retried")
            return
        if vacuumed is not None:
            log.info("vacuumed the hot table (%d dead rows) in %.1f s", *vacuumed)

    def _sweep(self, days: float, mode: str) -> None:
        try:
            swept = retention.sweep(
                self._sessions, days, "drop" if mode == "drop" else "summaries", self._policy
            )
        except Exception:
            log.exception("retention sweep failed; it will be retried")
            return
        if swept.runs:
            log.info("retention (%s, %g days): %d runs", mode, days, swept.runs)
