"""Bodies of the metric-alias API: a project's presets and pairs in, the resolved map out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..aliases.resolution import MAX_NAME, MAX_PAIRS, MAX_PRESETS
from . import plain_text

PresetName = Annotated[str, AfterValidator(plain_text), Field(min_length=1, max_length=64)]
AliasName = Annotated[str, AfterValidator(plain_text), Field(min_length=1, max_length=MAX_NAME)]


class AliasesIn(BaseModel):
    """A project's aliases, replaced whole: presets in order of preference (an earlier
    preset's alias stands for a canonical name first), then its own pairs."""

    model_config = ConfigDict(extra="forbid")

    presets: list[PresetName] = Field(
        default_factory=list,
        max_length=MAX_PRESETS,
        description="Preset names, from `GET /api/v1/aliases/presets`.",
    )
    aliases: dict[AliasName, AliasName] = Field(
        default_factory=dict,
        max_length=MAX_PAIRS,
        description="The project's own `alias → canonical` pairs, e.g. "
        '`{"my/gnorm": "grad/norm/total"}`.',
    )


class AliasOut(BaseModel):
    alias: str
    canonical: str
    origin: str
    """The preset the pair comes from, or ``custom``."""


class AliasesOut(BaseModel):
    project: str
    presets: list[str]
    aliases: dict[str, str]
    """The project's own pairs, as saved."""
    resolved: list[AliasOut]
    """Every alias in effect, in order of preference."""
    revision: int
    """0 while the project never set aliases; grows with every change."""
    updated_by: str | None = None
    updated_at: datetime | None = None


class AliasPair(BaseModel):
    alias: str
    canonical: str


class PresetOut(BaseModel):
    name: str
    title: str
    source: str
    aliases: list[AliasPair]
