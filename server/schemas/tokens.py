"""Bodies of the token API: what creating and rotating a token take and give (pydantic
models)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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
