"""The relational schema. Alembic migrations own it; this module describes it.

Every table below ``runs`` carries ``run_key`` as the leading key column, so that a
distributed Postgres can shard all of a run's rows together and every query stays on
one shard.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an INTEGER PRIMARY KEY, so wide keys narrow there.
BigKey = BigInteger().with_variant(Integer(), "sqlite")
JsonDoc = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite drops the offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class ApiToken(Base):
    """A bearer token; only the SHA-256 of the secret is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    scope: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # NULL: never; past: refused like a revoked token (a rotated token's grace period ends).
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    key: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(256))
    config: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    tags: Mapped[list[str]] = mapped_column(JsonDoc, default=list)
    status: Mapped[str] = mapped_column(String(16), default="running")
    segment: Mapped[int] = mapped_column(SmallInteger, default=1)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    notes: Mapped[str | None] = mapped_column(Text)
    """An admin's note on the run (None: none), at most `schemas.MAX_NOTES` characters."""


class Segment(Base):
    """A stretch of a run between restarts; a restart from an earlier step opens a new one."""

    __tablename__ = "segments"

    run_key: Mapped[int] = mapped_column(
        ForeignKey("runs.key", ondelete="CASCADE"), primary_key=True
    )
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    start_step: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class ClockMark(Base):
    """When a run's trainer reached a step (unix seconds): the time the batch that brought
    the step says, else the time it arrived. One a batch that moves the run on; the x axis
    by wall time interpolates between them."""

    __tablename__ = "run_clock"

    run_key: Mapped[int] = mapped_column(
        ForeignKey("runs.key", ondelete="CASCADE"), primary_key=True
    )
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    at: Mapped[float] = mapped_column(Double)


class Metric(Base):
    """A metric name within a run, with its latest value for listings."""

    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("run_key", "name"),)

    id: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    run_key: Mapped[int] = mapped_column(ForeignKey("runs.key", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(512))
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    last_value: Mapped[float | None] = mapped_column(Double)


class Block(Base):
    """One series' points from one batch, not compacted yet (see :mod:`.blocks`).

    The key (run, metric, segment, first step) orders a series' blocks by step; their
    points never share a step. ``last_value`` NULL means NaN, as in every value column.
    """

    __tablename__ = "blocks"

    run_key: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    metric_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    first_step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    last_step: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer)
    last_value: Mapped[float | None] = mapped_column(Double)
    steps: Mapped[bytes | None] = mapped_column(LargeBinary)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Chunk(Base):
    """Consecutive compacted points of one series (see :mod:`normwatch.server.storage.chunks`).

    ``data`` holds the points; ``buckets`` their summary (first/last/min/max/first NaN of
    every run of 64 points), and ``outline`` the part of it that reads across many series
    use, uncompressed (see :mod:`normwatch.server.storage.outline`). Retention may drop
    ``data`` and keep the rest: the chart then still shows every spike at any zoom, from
    the summaries alone.
    """

    __tablename__ = "chunks"

    run_key: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    metric_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    first_step: Mapped[int] = mapped_column(BigInteger)
    last_step: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes | None] = mapped_column(LargeBinary)
    buckets: Mapped[bytes] = mapped_column(LargeBinary)
    outline: Mapped[bytes | None] = mapped_column(LargeBinary)


class Rollup(Base):
    """A summary row of the read pyramid: one bucket per child (chunk, or rollup below).

    Level 1 row ``seq`` summarises chunks ``64·seq … 64·seq + 63``; level 2 row ``seq``
    summarises level-1 rows ``64·seq … 64·seq + 63``.
    """

    __tablename__ = "rollups"

    run_key: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    metric_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    first_step: Mapped[int] = mapped_column(BigInteger)
    last_step: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(BigInteger)
    buckets: Mapped[bytes] = mapped_column(LargeBinary)


class SeriesState(Base):
    """How far one series is compacted: chunk count, last compacted step, tail chunk size."""

    __tablename__ = "series"

    run_key: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    metric_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    chunks: Mapped[int] = mapped_column(Integer, default=0)
    through: Mapped[int | None] = mapped_column(BigInteger)
    tail_count: Mapped[int] = mapped_column(Integer, default=0)
    points: Mapped[int] = mapped_column(BigInteger, default=0)


class Compaction(Base):
    """A run's compaction progress and the lease of the worker compacting it now."""

    __tablename__ = "compactions"

    run_key: Mapped[int] = mapped_column(
        ForeignKey("runs.key", ondelete="CASCADE"), primary_key=True
    )
    segment: Mapped[int] = mapped_column(SmallInteger, default=1)
    through: Mapped[int | None] = mapped_column(BigInteger)
    """Every hot point of ``segment`` at or below this step has been compacted (once)."""
    compacted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (Index("ix_events_run_key_step", "run_key", "step"),)

    id: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    run_key: Mapped[int] = mapped_column(ForeignKey("runs.key", ondelete="CASCADE"))
    segment: Mapped[int] = mapped_column(SmallInteger)
    step: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(32))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class InstanceSecret(Base):
    """Secrets generated once per installation (e.g. the cookie signing key)."""

    __tablename__ = "instance_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class AlertRule(Base):
    """A project's rule: which runs and metrics, the condition, and where to notify.

    Channel secrets are kept as given (they sign outgoing requests) and masked in every
    response.
    """

    __tablename__ = "alert_rules"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    metric: Mapped[str] = mapped_column(String(512))
    condition: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    channels: Mapped[list[dict[str, Any]]] = mapped_column(JsonDoc, default=list)
    run_name: Mapped[str] = mapped_column(String(256), default="*")
    run_tags: Mapped[list[str]] = mapped_column(JsonDoc, default=list)
    repeat_every_steps: Mapped[int | None] = mapped_column(BigInteger)
    """A still-firing alert is sent again every this many logged steps (None: never)."""
    repeat_every_seconds: Mapped[int | None] = mapped_column(Integer)
    """A firing alert that went this many seconds without a notification is sent again by
    the dispatcher's clock (None: never), also while no steps come."""
    group_wait_steps: Mapped[int | None] = mapped_column(BigInteger)
    """A glob rule's first message waits this many steps for more metrics to fire."""
    control: Mapped[str | None] = mapped_column(String(16))
    """What the rule asks of the run's trainer when it fires: "checkpoint", "stop" or None."""
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class AlertState(Base):
    """Evaluation state of one rule on one metric of one run (metric 0: the run itself)."""

    __tablename__ = "alert_states"
    __table_args__ = (
        # The few firing states, which the clock of repeat_every_seconds looks through on
        # every tick of every dispatcher.
        Index(
            "ix_alert_states_firing",
            "rule_id",
            postgresql_where=text("state = 'firing'"),
            sqlite_where=text("state = 'firing'"),
        ),
    )

    run_key: Mapped[int] = mapped_column(
        ForeignKey("runs.key", ondelete="CASCADE"), primary_key=True
    )
    rule_id: Mapped[int] = mapped_column(
        ForeignKey("alert_rules.id", ondelete="CASCADE"), primary_key=True
    )
    metric_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    segment: Mapped[int] = mapped_column(SmallInteger)
    state: Mapped[str] = mapped_column(String(16))
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Alert(Base):
    """One state change of a rule on a run's metric: the alert history."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_run_key_id", "run_key", "id"),)

    id: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    run_key: Mapped[int] = mapped_column(ForeignKey("runs.key", ondelete="CASCADE"))
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rules.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(512))
    state: Mapped[str] = mapped_column(String(16))
    segment: Mapped[int] = mapped_column(SmallInteger)
    step: Mapped[int | None] = mapped_column(BigInteger)
    value: Mapped[float | None] = mapped_column(Double)
    threshold: Mapped[float | None] = mapped_column(Double)
    reason: Mapped[str] = mapped_column(Text, default="")
    repeat: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    """0 for a state change; n for the n-th notification of a still-firing alert."""
    worst: Mapped[float | None] = mapped_column(Double)
    """The measured value furthest past the threshold since the alert fired."""
    silenced_by: Mapped[int | None] = mapped_column(ForeignKey("silences.id", ondelete="SET NULL"))
    """The silence that held this alert's notifications back (recorded, not sent)."""
    members: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonDoc)
    """A glob rule's group message: the metrics of the episode, each with its state, step
    and value (None for an alert about one metric)."""
    acked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    """When someone took this firing alert on: its repeats are recorded and not sent."""
    acked_by: Mapped[str | None] = mapped_column(String(128))
    ack_comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Silence(Base):
    """Notifications of a project matching a rule, a run and a metric glob (each optional:
    none given silences the whole project) are recorded and not sent, until ``ends_at``
    or past ``until_step`` (at least one is set), or until expired by hand."""

    __tablename__ = "silences"
    __table_args__ = (Index("ix_silences_project_id", "project_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    rule_id: Mapped[int | None] = mapped_column(ForeignKey("alert_rules.id", ondelete="CASCADE"))
    run_key: Mapped[int | None] = mapped_column(ForeignKey("runs.key", ondelete="CASCADE"))
    metric: Mapped[str | None] = mapped_column(String(512))
    ends_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    until_step: Mapped[int | None] = mapped_column(BigInteger)
    created_by: Mapped[str] = mapped_column(String(128))
    comment: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expired_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class MetricAliases(Base):
    """A project's metric-name aliases: the presets it chose, in order of preference, and
    its own ``alias → canonical`` pairs. Stored names stay as logged; reads and rules
    resolve through these. ``revision`` grows with every change (cached copies compare it)."""

    __tablename__ = "metric_aliases"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    presets: Mapped[list[str]] = mapped_column(JsonDoc, default=list)
    pairs: Mapped[dict[str, str]] = mapped_column(JsonDoc, default=dict)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    updated_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Workspace(Base):
    """A project's run-page workspace: which metric panels are pinned, hidden, in which
    order, and the expression panels it added (`schemas.workspace.WorkspaceLayout`, as
    JSON). One row a project, shared by everyone who views its runs; ``revision`` grows
    with every save."""

    __tablename__ = "workspaces"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    layout: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    updated_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Notification(Base):
    """The outbox: one row per alert and channel, written with the state change."""

    __tablename__ = "notifications"
    __table_args__ = (Index("ix_notifications_status_due", "status", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"))
    channel_index: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class DeliveryAttempt(Base):
    """Every try to deliver a notification, successful or not."""

    __tablename__ = "delivery_attempts"
    __table_args__ = (Index("ix_delivery_attempts_notification_id", "notification_id"),)

    id: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    notification_id: Mapped[int] = mapped_column(ForeignKey("notifications.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[float] = mapped_column(Double)


class ControlRequest(Base):
    """An admin's or a rule's request that a run's trainer checkpoint or stop.

    The trainer reads open requests in the answers to its metric batches and tells, in the
    next batch, how far it has read: ``delivered_at`` is the first answer that carried it,
    ``seen_at`` the batch that acknowledged it. One the run finished without reading
    expires then."""

    __tablename__ = "control_requests"
    __table_args__ = (
        Index("ix_control_requests_run_key_id", "run_key", "id"),
        # The few unread requests, which every metric batch of the run looks up.
        Index(
            "ix_control_requests_open",
            "run_key",
            postgresql_where=text("seen_at IS NULL AND expired_at IS NULL"),
            sqlite_where=text("seen_at IS NULL AND expired_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    run_key: Mapped[int] = mapped_column(ForeignKey("runs.key", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))
    """"admin" (the dashboard or the API) or "rule"."""
    requested_by: Mapped[str] = mapped_column(String(128))
    rule_id: Mapped[int | None] = mapped_column(ForeignKey("alert_rules.id", ondelete="SET NULL"))
    segment: Mapped[int] = mapped_column(SmallInteger)
    step: Mapped[int | None] = mapped_column(BigInteger)
    """The run's last step when the request was made."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    seen_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    expired_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
