"""Bodies of the alerting API: rules, the alert history, silences and acknowledgements,
previews and test sends (pydantic models; bounded like every body, see the package)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
)

from ..alerts.conditions import MAX_STEPS, Condition
from . import (
    INT32_MAX,
    MAX_REPEAT_SECONDS,
    NAME_PATTERN,
    Tag,
    Text,
    json_document,
)


class RunSelector(BaseModel):
    """Which runs a rule watches: a name glob and tags that must all be present."""

    model_config = ConfigDict(extra="forbid")

    name: Text = Field(default="*", min_length=1, max_length=256)
    tags: list[Tag] = Field(default_factory=list, max_length=32)


Channel = Annotated[
    dict[str, Any], AfterValidator(lambda doc: json_document(doc, max_bytes=8 * 1024))
]
"""A notification channel as sent (``type``, ``url``, ``secret``); checked in full by
`alerts.delivery.validate_channel`."""


class AlertRuleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: Text | None = Field(default=None, max_length=128)
    name: Text = Field(min_length=1, max_length=128, pattern=NAME_PATTERN)
    metric: Text = Field(
        min_length=1,
        max_length=512,
        pattern=NAME_PATTERN,
        description="Metric name or glob: `*` stays within a path segment, `**` crosses `/`.",
    )
    condition: Condition
    channels: list[Channel] = Field(default_factory=list, max_length=10)
    runs: RunSelector = Field(default_factory=RunSelector)
    enabled: bool = True
    repeat_every_steps: int | None = Field(
        default=None,
        ge=0,
        le=MAX_STEPS,
        description="Send a still-firing alert again every this many logged steps, with "
        '`"repeat": n` and the worst value so far (0 or null: never).',
    )
    repeat_every_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_REPEAT_SECONDS,
        description="Send a firing alert again once it has gone this many seconds without a "
        "notification (its firing or a repeat), also while no steps come (a hung trainer): "
        "at least 60 (`NORMWATCH_ALERT_REPEAT_MIN_S`), at most a week (0 or null: never).",
    )
    group_wait_steps: int | None = Field(
        default=None,
        ge=0,
        le=MAX_STEPS,
        description="A glob rule's alerts on a run are one group: its first message waits "
        "this many steps for more metrics to fire (default 0).",
    )
    control: Literal["checkpoint", "stop"] | None = Field(
        default=None,
        description="What the rule asks of the run's trainer when it fires: save a checkpoint, "
        "or stop (see `POST /runs/{id}/control`). Not for `stale` rules, whose trainer has "
        "gone quiet and reads no answers.",
    )


class AlertRuleUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Text | None = Field(default=None, min_length=1, max_length=128, pattern=NAME_PATTERN)
    metric: Text | None = Field(default=None, min_length=1, max_length=512, pattern=NAME_PATTERN)
    condition: Condition | None = None
    channels: list[Channel] | None = Field(default=None, max_length=10)
    runs: RunSelector | None = None
    enabled: bool | None = None
    repeat_every_steps: int | None = Field(
        default=None, ge=0, le=MAX_STEPS, description="0 turns repeats off; null leaves them."
    )
    repeat_every_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_REPEAT_SECONDS,
        description="0 turns repeats by the clock off; null leaves them.",
    )
    group_wait_steps: int | None = Field(default=None, ge=0, le=MAX_STEPS)
    control: Literal["checkpoint", "stop", "none"] | None = Field(
        default=None, description='"none" stops asking the trainer; null leaves it.'
    )


class AlertRuleOut(BaseModel):
    id: int
    project: str
    name: str
    metric: str
    condition: dict[str, Any]
    channels: list[dict[str, Any]] = Field(description="Secrets and Slack URLs masked.")
    runs: RunSelector
    enabled: bool
    repeat_every_steps: int | None = None
    repeat_every_seconds: int | None = None
    group_wait_steps: int | None = None
    control: str | None = None
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
    repeat: int = Field(default=0, description="0 for a state change; n for the n-th repeat.")
    silenced_by: int | None = Field(
        default=None, description="The silence that held its notifications back."
    )
    members: list[dict[str, Any]] | None = Field(
        default=None,
        description="A glob rule's group message: each metric's state, step and value.",
    )
    acked: dict[str, Any] | None = Field(
        default=None,
        description="Who took the firing alert on, when and why (`at`, `by`, `comment`).",
    )
    worst: float | str | None = Field(
        default=None, description="The value furthest past the threshold since it fired."
    )
    created_at: datetime
    notifications: list[DeliveryOut]


class SilenceCreate(BaseModel):
    """What to silence (each matcher optional: none silences the project) and until when."""

    model_config = ConfigDict(extra="forbid")

    project: Text | None = Field(default=None, max_length=128)
    rule_id: int | None = Field(default=None, ge=1, le=INT32_MAX)
    run: Text | None = Field(default=None, max_length=64, description="A run's id.")
    metric: Text | None = Field(
        default=None, min_length=1, max_length=512, pattern=NAME_PATTERN, description="A glob."
    )
    ends_at: datetime | None = Field(default=None, description="In force until this time.")
    until_step: int | None = Field(
        default=None, ge=0, le=MAX_STEPS, description="In force for steps up to this one."
    )
    comment: Text = Field(min_length=1, max_length=2000, description="Why.")
    created_by: Text | None = Field(
        default=None, max_length=128, description="Who; the token's name when not given."
    )


class AckCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    comment: Text = Field(default="", max_length=2000)
    by: Text | None = Field(
        default=None, max_length=128, description="The token's name if not given."
    )


class SilenceOut(BaseModel):
    id: int
    project: str
    rule_id: int | None
    run: str | None
    metric: str | None
    ends_at: datetime | None
    until_step: int | None
    created_by: str
    comment: str
    created_at: datetime
    expired_at: datetime | None
    active: bool = Field(description="In force now (not expired, not past ends_at).")


class PreviewTransition(BaseModel):
    metric: str
    state: str
    step: int
    value: float | str
    threshold: float | None
    reason: str
    repeat: int = 0


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
