"""What the run page asks of a run's trainer (checkpoint, stop), through the service layer,
for admins only (the API's rule: ``POST /api/v1/runs/{id}/control`` takes an admin token)."""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import Principal
from normwatch.server.schemas.control import ControlAction, ControlCreate, ControlOut
from normwatch.server.services import access, control

from .refusals import invalid

DOING = "asking a trainer to checkpoint or to stop"
"""What needs an admin token here (`access.authorize`'s words)."""


class ControlData:
    """The run-control half of `DashboardData` (which sets ``sessions``)."""

    sessions: sessionmaker[Session]

    def control_requests(self, who: Principal, run_id: str) -> list[ControlOut]:
        """The run's requests, newest first."""
        with self.sessions() as session:
            return control.list_requests(
                session, access.owned_run(session, who, run_id, hidden=True)[0]
            )

    def request_control(
        self, who: Principal, run_id: str, action: ControlAction, reason: str
    ) -> tuple[ControlOut, bool]:
        """Ask the run's trainer; ``(request, created)`` as `control.request_control`."""
        access.authorize(who, "admin", doing=DOING)
        try:
            body = ControlCreate(action=action, reason=reason)
        except ValidationError as exc:
            raise invalid(exc, "the reason") from None
        with self.sessions() as session, session.begin():
            return control.request_control(
                session,
                access.owned_run(session, who, run_id, hidden=True)[0],
                body,
                token_id=who.token_id,
            )
