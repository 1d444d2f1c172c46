"""Webhook signatures: what `verify` refuses."""

from __future__ import annotations

from normwatch.server.alerts.signing import sign, verify
from tests.helpers.notifications import NOW

SECRET = "s3cret"


def test_verify_refuses_what_it_should() -> None:
    body = b'{"state":"firing"}'
    good = sign(SECRET, 1_700_000_000, body)
    assert verify(SECRET, "1700000000", good, body, now=NOW + 299)
    assert verify(SECRET, 1_700_000_000, f" {good} ", body, now=NOW)
    assert not verify("other", "1700000000", good, body, now=NOW)
    assert not verify(SECRET, "1700000000", good, body + b" ", now=NOW)
    assert not verify(SECRET, "1700000001", good, body, now=NOW)
    assert not verify(SECRET, "1700000000", good, body, now=NOW + 301)
    assert not verify(SECRET, "1700000000", good, body, now=NOW - 301)
    assert not verify(SECRET, "soon", good, body, now=NOW)
    assert not verify(SECRET, "1700000000", "sha256=zz", body, now=NOW)
    assert not verify(SECRET, "1700000000", "sha256=é", body, now=NOW)
