"""Real server processes beyond `normwatch.testing`: a server alone on a database.

Every server process on a database compacts its runs and delivers its alert outbox; a test
that counts what one server did, or that stops the database, needs a database no other
server works on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from normwatch.testing import ServerProcess, running_server
from tests.helpers.databases import scratch_pg

ALERTING = {
    "NORMWATCH_WEBHOOK_ALLOW": "127.0.0.1",
    "NORMWATCH_DISPATCH_TICK_S": "0.2",
    "NORMWATCH_ALERT_REPEAT_MIN_S": "1",
}
"""Settings of a server that posts alerts to a local receiver, checking its outbox often
(and taking repeats by the clock every few seconds, which a test can wait for)."""


@contextmanager
def server_of_its_own(
    purpose: str, log_dir: Path, *, workers: int | None = None, **env: str
) -> Iterator[ServerProcess]:
    """A server on a fresh, migrated Postgres database of its own, stopped and the
    database dropped on the way out. ``workers`` and ``env`` as for `running_server`."""
    with (
        scratch_pg(purpose) as url,
        running_server(url, log_dir, workers=workers, **env) as server,
    ):
        yield server
