"""Callers of the services: a principal holding a fresh token, on the caller's session."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from normwatch.server.auth import Principal, Scope, authenticate, create_token


def principal(session: Session, scope: Scope = "admin", project: str | None = None) -> Principal:
    """Who holds a new ``scope`` token of ``project`` (default: a project of its own)."""
    name = project or f"p-{uuid.uuid4().hex[:10]}"
    secret, _ = create_token(session, name, scope)
    who = authenticate(session, secret)
    assert who is not None
    return who
