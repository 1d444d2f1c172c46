"""A deliverer allowed to reach the local receiver, for the delivery tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from normwatch.server.alerts.delivery import Deliverer
from normwatch.server.alerts.targets import parse_allow
from tests.helpers.notifications import NOW


@pytest.fixture
def deliverer() -> Iterator[Deliverer]:
    """Allowed to post to 127.0.0.1 (where `receiver` listens), its clock stopped at `NOW`."""
    with Deliverer(allow=parse_allow("127.0.0.1"), clock=lambda: NOW) as d:
        yield d
