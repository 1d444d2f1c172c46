"""Projects, API tokens (their digests) and the instance's generated secrets."""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ..models import ApiToken, InstanceSecret, Project


def project_named(session: Session, name: str, *, create: bool = False) -> Project | None:
    """The project of that name; with ``create``, made when there is none."""
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None and create:
        project = Project(name=name)
        session.add(project)
        session.flush()
    return project


def add_token(session: Session, token: ApiToken) -> ApiToken:
    """Store a new token row and give it its id."""
    session.add(token)
    session.flush()
    return token


def _unexpired(now: datetime) -> ColumnElement[bool]:
    return or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now)


def active_token(
    session: Session, now: datetime, *, digest: str | None = None, token_id: int | None = None
) -> tuple[ApiToken, str] | None:
    """The token with that digest (or id) and its project's name, if neither revoked nor
    expired at ``now``."""
    query = (
        select(ApiToken, Project.name)
        .join(Project, Project.id == ApiToken.project_id)
        .where(ApiToken.revoked_at.is_(None), _unexpired(now))
    )
    if digest is not None:
        query = query.where(ApiToken.token_hash == digest)
    if token_id is not None:
        query = query.where(ApiToken.id == token_id)
    row = session.execute(query).first()
    return None if row is None else (row[0], row[1])


def touch_token(session: Session, token_id: int, now: datetime) -> None:
    """Record that the token was used at ``now``."""
    session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=now))


def token_rows(
    session: Session, project: str | None, now: datetime, *, active_only: bool
) -> list[tuple[ApiToken, str]]:
    """Tokens with their project's name, by project and id (``project`` None: all)."""
    query = select(ApiToken, Project.name).join(Project, Project.id == ApiToken.project_id)
    if project is not None:
        query = query.where(Project.name == project)
    if active_only:
        query = query.where(ApiToken.revoked_at.is_(None), _unexpired(now))
    return [(tok, name) for tok, name in session.execute(query.order_by(Project.name, ApiToken.id))]


def token_name(session: Session, token_id: int | None) -> str:
    """The token's name ("" for none, or no such token)."""
    if token_id is None:
        return ""
    return session.scalar(select(ApiToken.name).where(ApiToken.id == token_id)) or ""


def update_token(session: Session, token: ApiToken, values: dict[str, object]) -> None:
    """Set columns of the token and read it back."""
    session.execute(update(ApiToken).where(ApiToken.id == token.id).values(**values))
    session.refresh(token)


def token_row(session: Session, token_id: int) -> tuple[ApiToken, str] | None:
    """The token (whatever its state) and its project's name."""
    row = session.execute(
        select(ApiToken, Project.name)
        .join(Project, Project.id == ApiToken.project_id)
        .where(ApiToken.id == token_id)
    ).first()
    return None if row is None else (row[0], row[1])


def instance_secret(session: Session, name: str) -> str:
    """A random secret generated on first use and shared by every worker via the database.

    Workers starting together may race to create it; the insert ignores a conflict and
    everyone reads back the one row that won.
    """
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    session.execute(
        insert(InstanceSecret)
        .values(name=name, value=secrets.token_urlsafe(48))
        .on_conflict_do_nothing()
    )
    value = session.scalar(select(InstanceSecret.value).where(InstanceSecret.name == name))
    assert value is not None
    return value
