"""A project's metric-name aliases: read, replace, and the checked map reads resolve by.

Reads (series, analyses, the dashboard) load the project's one row per request: a lookup
by primary key, and the map is built once per distinct content (`aliases.build` caches
it). Rule evaluation inside ingest reads nothing extra: the aliases' revision is part of
the rule fingerprint that every batch reads under its run's lock (see
`storage.runs.LockedRun.rules`), and `alerting.RuleCache` reloads both together.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from ..aliases import EMPTY, PRESETS, AliasError, AliasMap, build
from ..auth import Principal
from ..errors import Invalid
from ..models import MetricAliases
from ..schemas.aliases import AliasesIn, AliasesOut, AliasOut, AliasPair, PresetOut
from ..storage.aliases import aliases_row, save_aliases
from ..storage.tokens import token_name
from .access import own_project


def project_aliases(session: Session, project_id: int) -> AliasMap:
    """The map a project's reads resolve names by (`EMPTY` when it set none).

    A stored row that no longer builds (a preset renamed in a later release) resolves
    nothing rather than failing every read; saving the aliases again says what is wrong.
    """
    row = aliases_row(session, project_id)
    if row is None:
        return EMPTY
    try:
        return build(list(row.presets or ()), dict(row.pairs or {}))
    except AliasError:
        return EMPTY


def list_presets() -> list[PresetOut]:
    return [
        PresetOut(
            name=p.name,
            title=p.title,
            source=p.source,
            aliases=[AliasPair(alias=a, canonical=c) for a, c in p.pairs],
        )
        for p in PRESETS.values()
    ]


def get_aliases(session: Session, who: Principal, project: str) -> AliasesOut:
    own_project(who, project)
    row = aliases_row(session, who.project_id)
    if row is None:
        return AliasesOut(project=project, presets=[], aliases={}, resolved=[], revision=0)
    return _out(row, project, project_aliases(session, who.project_id))


def set_aliases(session: Session, who: Principal, project: str, body: AliasesIn) -> AliasesOut:
    """Replace the project's aliases whole; `Invalid` (422) says what cannot resolve."""
    own_project(who, project)
    try:
        aliases = build(body.presets, body.aliases)
    except AliasError as exc:
        raise Invalid(str(exc)) from None
    row = save_aliases(
        session,
        who.project_id,
        body.presets,
        body.aliases,
        updated_by=token_name(session, who.token_id) or "token",
    )
    return _out(row, project, aliases)


def _out(row: MetricAliases, project: str, aliases: AliasMap) -> AliasesOut:
    return AliasesOut(
        project=project,
        presets=list(row.presets or ()),
        aliases=dict(row.pairs or {}),
        resolved=[AliasOut(alias=a, canonical=c, origin=o) for a, c, o in aliases.pairs()],
        revision=row.revision,
        updated_by=row.updated_by,
        updated_at=row.updated_at,
    )
