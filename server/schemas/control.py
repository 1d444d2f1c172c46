"""Bodies of the run-control endpoints: a request that a trainer checkpoint or stop."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from . import Text

ControlAction = Literal["checkpoint", "stop"]
"""What a trainer is asked to do: save a checkpoint now, or stop (after saving one)."""

ControlState = Literal["pending", "delivered", "seen", "expired"]


class ControlCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: ControlAction
    reason: Text = Field(
        default="", max_length=1000, description="Shown to the trainer and drawn on the chart."
    )
    by: Text | None = Field(
        default=None, max_length=128, description="Who asks; the token's name if not given."
    )


class ControlOut(BaseModel):
    """A request as the API and the dashboard show it."""

    id: int
    action: ControlAction
    reason: str
    source: Literal["admin", "rule"]
    requested_by: str
    rule_id: int | None
    segment: int
    step: int | None
    """The run's last step when the request was made."""
    state: ControlState
    """pending (not yet handed to the trainer), delivered (in an answer to a metric
    batch), seen (the trainer said it read it), expired (the run finished first)."""
    created_at: datetime
    delivered_at: datetime | None
    seen_at: datetime | None
    expired_at: datetime | None


class ControlForTrainer(BaseModel):
    """What the answer to a metric batch carries of a request (``"control": [...]``)."""

    id: int
    action: ControlAction
    reason: str
    source: Literal["admin", "rule"]
    step: int | None
