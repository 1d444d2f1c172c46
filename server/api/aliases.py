"""Metric-name aliases: the presets, and a project's choice of them (admin to change)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from ..schemas.aliases import AliasesIn, AliasesOut, PresetOut
from ..services import aliases as alias_service
from .deps import Admin, Reader, SessionDep
from .errors import API, documented

router = APIRouter(prefix="/api/v1", tags=["aliases"], responses=documented(*API))

ProjectPath = Annotated[str, Path(min_length=1, max_length=128, description="The project.")]


@router.get("/aliases/presets", response_model=list[PresetOut])
def list_presets(who: Reader) -> list[PresetOut]:
    """The alias presets of known trainers: each one's names, canonical names and source."""
    return alias_service.list_presets()


@router.get("/projects/{project}/aliases", response_model=AliasesOut)
def get_aliases(project: ProjectPath, session: SessionDep, who: Reader) -> AliasesOut:
    """The project's presets, its own pairs, and every alias in effect."""
    return alias_service.get_aliases(session, who, project)


@router.put("/projects/{project}/aliases", response_model=AliasesOut)
def put_aliases(
    project: ProjectPath, body: AliasesIn, session: SessionDep, who: Admin
) -> AliasesOut:
    """Replace the project's aliases. Series reads, derived series, alert rules and the
    dashboard then resolve a canonical name the run did not store to its stored alias."""
    out = alias_service.set_aliases(session, who, project, body)
    session.commit()
    return out
