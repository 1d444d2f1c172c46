"""What the run page asks of a run's trainer (checkpoint, stop), through the service layer,
for admins only (the API's rule: ``POST /api/v1/runs/{id}/control`` takes an admin token)."""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server import errors
from normwatch.server.auth import Principal
from normwatch.server.models import Run
from normwatch.server.schemas.control import ControlAction, ControlCreate, ControlOut
from normwatch.server.services import control, runs


class ControlRefused(ValueError):
    """A request the service refused, or a run outside the viewer's project; the message
    says why, for the page."""


NEEDS_ADMIN = "asking a trainer to checkpoint or to stop needs an admin token"


class ControlData:
    """The run-control half of `DashboardData` (which sets ``sessions``)."""

    sessions: sessionmaker[Session]

    def control_requests(self, who: Principal, run_id: str) -> list[ControlOut]:
        """The run's requests, newest first."""
        with self.sessions() as session:
            return control.list_requests(session, _owned(session, who, run_id))

    def request_control(
        self, who: Principal, run_id: str, action: ControlAction, reason: str
    ) -> tuple[ControlOut, bool]:
        """Ask the run's trainer; ``(request, created)`` as `control.request_control`."""
        if not who.can("admin"):
            raise ControlRefused(NEEDS_ADMIN)
        try:
            body = ControlCreate(action=action, reason=reason)
        except ValidationError as exc:
            raise ControlRefused(f"the reason: {exc.errors()[0]['msg']}") from None
        with self.sessions() as session, session.begin():
            try:
                return control.request_control(
                    session, _owned(session, who, run_id), body, token_id=who.token_id
                )
            except errors.ServiceError as exc:
                raise ControlRefused(str(exc)) from None


def _owned(session: Session, who: Principal, run_id: str) -> Run:
    found = runs.get_run(session, run_id)
    if found is None or found[0].project_id != who.project_id:
        raise ControlRefused("no such run in your project")
    return found[0]
