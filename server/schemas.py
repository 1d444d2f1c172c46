"""Request and response bodies of the HTTP API (pydantic models)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .alerts.rules import Condition

NAME_PATTERN = r"^[^\x00-\x1f]+$"


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(
        default=None, max_length=128, description="Defaults to the token's project."
    )
    name: str = Field(min_length=1, max_length=256, pattern=NAME_PATTERN)
    config: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list, max_length=64)
    start_step: int | None = Field(
        default=None,
        ge=0,
        description="First step this trainer process will log; below the run's last step it "
        "opens a new segment (a restart from a checkpoint).",
    )


class RunUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["running", "finished", "failed"] | None = None
    tags: list[str] | None = Field(default=None, max_length=64)


class SegmentOut(BaseModel):
    segment: int
    start_step: int | None
    created_at: datetime


class RunOut(BaseModel):
    id: str
    project: str
    name: str
    status: str
    segment: int
    config: dict[str, Any]
    tags: list[str]
    last_step: int | None
    last_seen: datetime
    created_at: datetime
    segments: list[SegmentOut] | None = None


class MetricOut(BaseModel):
    name: str
    last_step: int | None
    last_value: float | str | None


class Accepted(BaseModel):
    accepted: int
    segment: int


class EventCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0)
    kind: str = Field(default="note", min_length=1, max_length=32, pattern=NAME_PATTERN)
    text: str = Field(min_length=1, max_length=4096)
    segment: int | None = Field(default=None, ge=1)


class EventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    step: int
    segment: int
    kind: str
    text: str
    created_at: datetime


class SeriesOut(BaseModel):
    metric: str
    steps: list[int]
    values: list[float | str]
    downsampled: bool
    total_points: int


class SeriesResponse(BaseModel):
    series: list[SeriesOut]


class Health(BaseModel):
    status: str
    database: str


class ErrorOut(BaseModel):
    detail: str


class RunSelector(BaseModel):
    """Which runs a rule watches: a name glob and tags that must all be present."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="*", min_length=1, max_length=256)
    tags: list[str] = Field(default_factory=list, max_length=32)


class AlertRuleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(default=None, max_length=128)
    name: str = Field(min_length=1, max_length=128, pattern=NAME_PATTERN)
    metric: str = Field(
        min_length=1,
        max_length=512,
        description="Metric name or glob: `*` stays within a path segment, `**` crosses `/`.",
    )
    condition: Condition
    channels: list[dict[str, Any]] = Field(default_factory=list, max_length=10)
    runs: RunSelector = Field(default_factory=RunSelector)
    enabled: bool = True


class AlertRuleUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=128, pattern=NAME_PATTERN)
    metric: str | None = Field(default=None, min_length=1, max_length=512)
    condition: Condition | None = None
    channels: list[dict[str, Any]] | None = Field(default=None, max_length=10)
    runs: RunSelector | None = None
    enabled: bool | None = None


class AlertRuleOut(BaseModel):
    id: int
    project: str
    name: str
    metric: str
    condition: dict[str, Any]
    channels: list[dict[str, Any]] = Field(description="Secrets and Slack URLs masked.")
    runs: RunSelector
    enabled: bool
    created_at: datetime
    updated_at: datetime


class DeliveryOut(BaseModel):
    channel: str
    status: str
    attempts: int
    delivered_at: datetime | None
    last_error: str | None


class AlertOut(BaseModel):
    id: int
    rule: dict[str, Any]
    run: dict[str, Any]
    metric: str
    state: str
    segment: int
    step: int | None
    value: float | str | None
    threshold: float | None
    reason: str
    created_at: datetime
    notifications: list[DeliveryOut]


class PreviewTransition(BaseModel):
    metric: str
    state: str
    step: int
    value: float | str
    threshold: float | None
    reason: str


class RulePreview(BaseModel):
    run: str
    metrics: int
    transitions: list[PreviewTransition]


class TestDelivery(BaseModel):
    channel: str
    ok: bool
    status_code: int | None
    error: str | None
    duration_ms: float


# API tokens. A token's name, like a run's, holds no control characters (it is printed in
# tables and logs); it may be empty, then the scope names the token.
TOKEN_NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
TEN_YEARS_S = 10 * 366 * 86_400


class TokenExpiry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expires_in_s: int | None = Field(
        default=None, ge=1, le=TEN_YEARS_S, description="Expire this many seconds from now."
    )
    expires_at: datetime | None = Field(
        default=None,
        description="Expire at this time (within ten years; without an offset it is UTC). "
        "Give this or expires_in_s, not both.",
    )


class TokenCreate(TokenExpiry):
    project: str | None = Field(
        default=None, max_length=128, description="Defaults to (and must be) the token's project."
    )
    scope: Literal["ingest", "read", "admin"]
    name: str = Field(default="", max_length=128, pattern=TOKEN_NAME_PATTERN)


class TokenRotate(TokenExpiry):
    """Without an expiry the new token is given the old one's lifetime (or none)."""

    grace_s: int = Field(
        default=0,
        ge=0,
        le=30 * 86_400,
        description="Seconds the old token keeps working (0: revoked at once).",
    )


class TokenOut(BaseModel):
    id: int
    project: str
    scope: str
    name: str
    prefix: str = Field(description="The secret's first characters, to recognise it by.")
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    state: Literal["active", "expired", "revoked"]


class TokenCreated(TokenOut):
    secret: str = Field(description="Shown this once; only its SHA-256 is stored.")


class TokenRotated(TokenCreated):
    replaces: TokenOut
