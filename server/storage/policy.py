"""What compaction aims at (chunk size, precision, when a run is due) and what a pass did."""

from __future__ import annotations

from dataclasses import dataclass

from .chunks import FANOUT

NO_CUT = 2**63 - 1
"""A cut above every step: compact all of a series."""


@dataclass(frozen=True)
class Policy:
    chunk_points: int = 4096
    precision: str = "float64"
    """``float64`` (default, lossless) or ``float32`` (lossy, opt-in: values rounded to
    float32, for no saving on most series; see docs/storage.md)."""
    max_age_s: float = 300.0
    idle_s: float = 60.0
    metrics_per_transaction: int = 24
    """The fewest metrics a transaction takes; more while their points fit the next."""
    max_metrics_per_transaction: int = 2048
    """The most: a transaction's statements name each of its metrics (three bound
    parameters a metric in the largest), and a statement may carry at most 65,535."""
    points_per_transaction: int = 100_000
    lease_s: float = 300.0

    def __post_init__(self) -> None:
        if self.precision not in ("float32", "float64"):
            raise ValueError(f"precision must be float32 or float64, got {self.precision!r}")
        if self.chunk_points < FANOUT:
            raise ValueError(f"chunk_points must be at least {FANOUT}, got {self.chunk_points}")


@dataclass
class PassReport:
    """What one compaction pass did."""

    runs: int = 0
    series: int = 0
    points: int = 0
    chunks_written: int = 0
    errors: int = 0
    seconds: float = 0.0
