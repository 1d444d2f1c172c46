"""One settings object, read from ``NORMWATCH_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service configuration.

    Every field maps to ``NORMWATCH_<FIELD>`` in the environment (or a ``.env`` file).
    """

    model_config = SettingsConfigDict(env_prefix="NORMWATCH_", env_file=".env", extra="ignore")

    database_url: str = Field(
        default="sqlite:///normwatch.db",
        description="SQLAlchemy URL; an SQLite file in the working directory by default.",
    )
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = Field(
        default=None, description="Base URL used in links sent out (alerts, login links)."
    )
    webhook_allow: str = Field(
        default="",
        description="Comma-separated hosts that alert URLs may target even when private.",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="Signs dashboard session cookies; generated and kept in the database if unset.",
    )
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        description="Largest request body accepted, measured after gzip decompression.",
    )
    max_batch_points: int = Field(
        default=2_000_000, description="Largest number of points one metrics batch may carry."
    )
    max_request_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Largest request body of every other route (runs, events, rules, "
        "dashboard callbacks); a larger declared Content-Length is refused (413) unread.",
    )
    max_batch_metrics: int = Field(
        default=20_000,
        ge=1,
        description="Most metric names one metrics batch may carry (413 beyond).",
    )
    max_run_metrics: int = Field(
        default=20_000,
        ge=1,
        description="Most metric names a run may have; a batch that would add more is "
        "refused (422). Concurrent first batches may pass it by one batch's new names.",
    )
    db_pool_size: int = Field(
        default=20,
        ge=1,
        description="Connections a worker keeps open (as many again under bursts). Keep it "
        "above NORMWATCH_INGEST_CONCURRENCY: connections opened past it are closed again "
        "when returned, and opening one costs more than the batch it serves.",
    )
    db_pool_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest a request waits for a pooled connection before a 503 with "
        "Retry-After (admission keeps requests below the pool, so this is a last resort).",
    )
    db_ping_idle_s: float = Field(
        default=5.0,
        ge=0,
        description="A pooled Postgres connection idle longer than this is pinged before use.",
    )
    dispatch_tick_s: float = Field(
        default=1.0,
        gt=0,
        description="How often the alert dispatcher looks for due retries and stale runs.",
    )
    dispatch_lease_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="How long a notification a worker took to send is its own: one whose "
        "worker died while sending it is sent by another this long after.",
    )
    alert_repeat_min_s: int = Field(
        default=60,
        ge=1,
        description="The shortest repeat_every_seconds an alert rule may be given.",
    )
    retry_max_delay_s: float = Field(
        default=300.0,
        gt=0,
        description="Longest wait between two tries of an undelivered alert notification.",
    )
    ingest_concurrency: int = Field(
        default=16,
        ge=1,
        description="Metric batches handled at once per worker; more wait for a slot.",
    )
    ingest_wait_s: float = Field(
        default=1.0,
        ge=0,
        description="Longest a batch waits for an ingest slot before a 503 with Retry-After.",
    )
    read_concurrency: int = Field(
        default=16,
        ge=1,
        description="Requests other than metric batches (API reads, dashboard pages and "
        "callbacks) handled at once per worker; more wait for a slot.",
    )
    read_per_caller: int = Field(
        default=0,
        ge=0,
        description="Read slots one caller (a token, a dashboard session, an address) may "
        "hold at once per worker; its other reads wait in a line of their own. 0: half of "
        "NORMWATCH_READ_CONCURRENCY (at least 1).",
    )
    read_wait_s: float = Field(
        default=10.0,
        ge=0,
        description="Longest such a request waits for a slot before a 503 with Retry-After.",
    )
    admission_queue: int = Field(
        default=512,
        ge=0,
        description="Requests that may wait for a slot per worker (reads and batches "
        "each); one more is answered 503 at once.",
    )
    interactive_first_s: float = Field(
        default=0.1,
        ge=0,
        description="Longest a metric batch stands aside, at each stage, for a dashboard or "
        "API read in progress in its worker; 0 turns this off.",
    )
    small_batch_bytes: int = Field(
        default=16_384,
        ge=0,
        description="A metric batch whose declared Content-Length (as sent, compressed or "
        "not) is at most this many bytes goes ahead of larger ones in its worker, as reads "
        "do: a trainer's latest steps, which an alert may hang on, do not queue behind bulk "
        "uploads; 0 turns this off.",
    )
    session_max_age_s: int = 14 * 24 * 3600
    live_max_watches: int = Field(
        default=1000,
        ge=1,
        description="Run pages a worker keeps told of their run's changes at once (each an "
        "open WebSocket); one more is refused 503 with Retry-After and polls instead.",
    )
    token_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="How long an authenticated bearer token is trusted without a database "
        "look-up (a revoked token stops working within this); 0 looks up every request.",
    )
    workers: int = Field(
        default=1,
        ge=1,
        description="Worker processes `normwatch serve` starts (`--workers` overrides it).",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="When set, GET /metrics needs 'Authorization: Bearer <this>'; open otherwise.",
    )
    compaction: bool = Field(
        default=True, description="Run the background compactor in this process."
    )
    compaction_interval_s: float = Field(
        default=5.0, gt=0, description="How often the compactor looks for runs that are due."
    )
    compaction_pace: float = Field(
        default=1.0,
        ge=0,
        description="After compacting a run that was due by its clock, rest this many times "
        "as long as it took before the next (1: routine compaction works at most half the "
        "time); runs that piled up points are taken back to back. 0: no rest.",
    )
    compaction_chunk_points: int = Field(
        default=4096, ge=64, description="Points per compacted chunk of one series."
    )
    compaction_precision: Literal["float32", "float64"] = Field(
        default="float64",
        description="How compacted values are kept: float64 (the default: lossless, every "
        "value reads back bit for bit) or float32 (LOSSY: a value is rounded to float32 "
        "about a minute after it is logged, 1e-50 reads 0.0; it saves no space on most "
        "series, see docs/storage.md). NaN and ±Infinity are exact either way.",
    )
    compaction_max_age_s: float = Field(
        default=300.0, gt=0, description="Longest a live run's points wait before compaction."
    )
    compaction_idle_s: float = Field(
        default=60.0, gt=0, description="A run quiet this long is compacted to its last step."
    )
    retention_days: float | None = Field(
        default=None,
        gt=0,
        description="Apply retention to runs quiet for this many days (unset: keep everything).",
    )
    retention_mode: Literal["summaries", "drop"] = Field(
        default="summaries",
        description="summaries: keep only the chunks' summaries of old runs (spikes stay "
        "visible); drop: delete old runs entirely.",
    )

    @property
    def base_url(self) -> str:
        """The URL people reach the service at, without a trailing slash."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"
