"""A project of its own for each test, with a token of each scope: no two tests share rows."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from normwatch.server.auth import create_token
from normwatch.server.db import build_engine, session_factory


@dataclass(frozen=True)
class Tenant:
    """A project of its own with a token of each scope."""

    project: str
    ingest: str
    read: str
    admin: str

    def headers(self, scope: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, scope)}"}


def make_tenant(database_url: str) -> Tenant:
    engine = build_engine(database_url, pool_size=1)
    project = f"proj-{uuid.uuid4().hex[:10]}"
    try:
        with session_factory(engine)() as session, session.begin():
            tokens = {s: create_token(session, project, s)[0] for s in ("ingest", "read", "admin")}
    finally:
        engine.dispose()
    return Tenant(project, tokens["ingest"], tokens["read"], tokens["admin"])
