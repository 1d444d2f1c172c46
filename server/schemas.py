"""Request and response bodies of the HTTP API (pydantic models)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
