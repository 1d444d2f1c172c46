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
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
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


class Segment(Base):
    """A stretch of a run between restarts; a restart from an earlier step opens a new one."""

    __tablename__ = "segments"

    run_key: Mapped[int] = mapped_column(
        ForeignKey("runs.key", ondelete="CASCADE"), primary_key=True
    )
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    start_step: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Metric(Base):
    """A metric name within a run, with its latest value for listings."""

    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("run_key", "name"),)

    id: Mapped[int] = mapped_column(BigKey, primary_key=True, autoincrement=True)
    run_key: Mapped[int] = mapped_column(ForeignKey("runs.key", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(512))
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    last_value: Mapped[float | None] = mapped_column(Double)


class Point(Base):
    """One logged value. ``value`` NULL means NaN: "not logged" is never stored.

    The key (run, metric, segment, step) makes re-sent batches idempotent and groups
    consecutive steps of one series, the unit that compaction turns into chunks.
    """

    __tablename__ = "points"

    run_key: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    metric_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    segment: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    value: Mapped[float | None] = mapped_column(Double)


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
