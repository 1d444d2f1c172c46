"""API tokens in the storage layer: scopes, expiry, listing, revocation, rotation, and the
cache that trusts a token for a short while.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from normwatch.server.auth import (
    TokenCache,
    TokenRevoked,
    authenticate,
    create_token,
    get_token,
    list_tokens,
    principal_for_token_id,
    revoke_token,
    rotate_token,
)
from normwatch.server.db import session_factory
from normwatch.server.models import ApiToken, utcnow
from tests.helpers.principals import principal


def project_name() -> str:
    return f"tok-{uuid.uuid4().hex[:10]}"


def test_an_expired_token_is_refused(db_session: Session) -> None:
    now = utcnow()
    secret, row = create_token(
        db_session, project_name(), "read", expires_at=now + timedelta(hours=1)
    )
    assert row.expires_at == now + timedelta(hours=1)
    early = authenticate(db_session, secret, now + timedelta(minutes=59))
    assert early is not None and early.expires_at == now + timedelta(hours=1)
    assert authenticate(db_session, secret, now + timedelta(hours=1)) is None
    assert principal_for_token_id(db_session, row.id, now + timedelta(minutes=59)) == early
    assert principal_for_token_id(db_session, row.id, now + timedelta(hours=1, seconds=1)) is None


def test_expiry_is_kept_in_utc(db_session: Session) -> None:
    east = timezone(timedelta(hours=2))
    _, row = create_token(
        db_session, project_name(), "read", expires_at=datetime(2031, 5, 1, 14, tzinfo=east)
    )
    _, naive = create_token(db_session, project_name(), "read", expires_at=datetime(2031, 5, 1))
    db_session.expire_all()
    for token_id, expected in (
        (row.id, datetime(2031, 5, 1, 12)),
        (naive.id, datetime(2031, 5, 1)),
    ):
        info = get_token(db_session, token_id)
        assert info is not None and info.expires_at is not None
        assert info.expires_at.astimezone(UTC) == expected.replace(tzinfo=UTC)


def test_the_cache_trusts_a_token_no_longer_than_its_expiry(db_engine: Engine) -> None:
    sessions = session_factory(db_engine)
    start = utcnow()
    with sessions() as session, session.begin():
        secret, _ = create_token(
            session, project_name(), "ingest", expires_at=start + timedelta(seconds=2)
        )
    mono = [100.0]
    wall = [start]
    cache = TokenCache(5.0, clock=lambda: mono[0], wall=lambda: wall[0])
    assert cache.cached(secret) is None  # never looked up: the caller must ask the database
    who = cache.lookup(sessions, secret)
    assert who is not None and cache.cached(secret) == who
    mono[0] += 1.9
    wall[0] += timedelta(seconds=1.9)
    assert cache.lookup(sessions, secret) == who  # within the TTL and before the expiry
    assert cache.cached(secret) == who
    mono[0] += 0.2
    wall[0] += timedelta(seconds=0.2)
    assert cache.cached(secret) is None  # trusted no longer: back to the database
    assert cache.lookup(sessions, secret) is None  # within the TTL, but expired


def test_list_revoke_and_states(db_session: Session) -> None:
    project = project_name()
    now = utcnow()
    _, ingest = create_token(db_session, project, "ingest", "trainer")
    _, read = create_token(db_session, project, "read", expires_at=now - timedelta(seconds=1))
    _, admin = create_token(db_session, project, "admin", "ops")
    create_token(db_session, project_name(), "read")
    first = revoke_token(db_session, admin.id)
    assert first is not None and first.state == "revoked" and first.revoked_at is not None
    again = revoke_token(db_session, admin.id)
    assert again is not None and again.revoked_at == first.revoked_at  # idempotent
    assert revoke_token(db_session, 2**31 - 1) is None

    everything = list_tokens(db_session, project, active_only=False)
    assert [(t.id, t.scope, t.name, t.state) for t in everything] == [
        (ingest.id, "ingest", "trainer", "active"),
        (read.id, "read", "read token", "expired"),
        (admin.id, "admin", "ops", "revoked"),
    ]
    assert [t.id for t in list_tokens(db_session, project)] == [ingest.id]
    assert {t.project for t in list_tokens(db_session, None, active_only=False)} >= {project}


def test_rotation_revokes_or_keeps_the_old_token_for_a_grace_period(db_session: Session) -> None:
    project = project_name()
    old_secret, old = create_token(db_session, project, "ingest", "trainer")
    rotated = rotate_token(db_session, old.id, grace=timedelta(hours=1))
    assert rotated is not None
    secret, new, previous = rotated
    assert (new.project, new.scope, new.name, new.expires_at) == (
        project,
        "ingest",
        "trainer",
        None,
    )
    assert previous.id == old.id and previous.state == "active" and previous.revoked_at is None
    assert previous.expires_at is not None
    assert abs(previous.expires_at - (new.created_at + timedelta(hours=1))) < timedelta(seconds=1)
    assert authenticate(db_session, old_secret) is not None  # still, for the grace period
    assert authenticate(db_session, old_secret, utcnow() + timedelta(hours=1, seconds=1)) is None

    again = rotate_token(db_session, new.id)
    assert again is not None and again[2].state == "revoked"
    assert authenticate(db_session, secret) is None
    assert authenticate(db_session, again[0]) is not None
    with pytest.raises(TokenRevoked, match=f"token {new.id} is revoked"):
        rotate_token(db_session, new.id)
    assert rotate_token(db_session, 2**31 - 1) is None


def test_rotation_keeps_the_lifetime_and_never_extends_a_grace_past_expiry(
    db_session: Session,
) -> None:
    now = utcnow()
    _, old = create_token(db_session, project_name(), "read", expires_at=now + timedelta(days=30))
    old.created_at = now - timedelta(days=1)  # it has 29 days left of a 31-day lifetime
    rotated = rotate_token(db_session, old.id, grace=timedelta(days=90))
    assert rotated is not None
    _, new, previous = rotated
    assert new.expires_at is not None
    assert abs(new.expires_at - (new.created_at + timedelta(days=31))) < timedelta(seconds=1)
    assert previous.expires_at == now + timedelta(days=30)
    chosen = now + timedelta(days=2)
    third = rotate_token(db_session, new.id, expires_at=chosen)
    assert third is not None and third[1].expires_at == chosen


def test_read_token_scope(db_session: Session) -> None:
    who = principal(db_session, "read")
    assert who.can("read") and not who.can("ingest") and not who.can("admin")
    admin = principal(db_session, "admin")
    assert admin.can("read") and admin.can("ingest")


def test_token_cache_trusts_a_token_for_its_ttl_only(db_engine: Engine) -> None:
    sessions = session_factory(db_engine)
    with sessions() as session, session.begin():
        secret, row = create_token(session, "cache", "ingest")
        token_id = row.id
    now = [100.0]
    cache = TokenCache(5.0, clock=lambda: now[0])
    assert cache.lookup(sessions, "nw_not-a-token") is None
    who = cache.lookup(sessions, secret)
    assert who is not None and who.token_id == token_id
    with sessions() as session, session.begin():
        session.execute(update(ApiToken).where(ApiToken.id == token_id).values(revoked_at=utcnow()))
    now[0] += 4.9
    assert cache.lookup(sessions, secret) == who  # still trusted within the window
    now[0] += 0.2
    assert cache.lookup(sessions, secret) is None  # looked up again: revoked
    with sessions() as session, session.begin():
        fresh, _ = create_token(session, "cache", "ingest")
    never = TokenCache(0.0, clock=lambda: now[0])
    assert never.lookup(sessions, fresh) is not None
