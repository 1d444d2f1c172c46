"""What the alerts page changes for the people on call: silences and acknowledgements,
through the service layer, for admins only (the API's rule: ``POST /api/v1/silences`` and
``/alerts/{id}/ack`` take an admin token)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from normwatch.server import errors
from normwatch.server.auth import Principal
from normwatch.server.schemas import AckCreate, SilenceCreate, SilenceOut
from normwatch.server.services import silences


class OnCallRefused(ValueError):
    """A silence or acknowledgement the service refused; the message says why, for the page."""


NEEDS_ADMIN = "silencing and acknowledging alerts needs an admin token"


class OnCallData:
    """The silence and acknowledgement half of `DashboardData` (which sets ``sessions``)."""

    sessions: sessionmaker[Session]

    def silences(self, who: Principal) -> list[SilenceOut]:
        """The project's silences, newest first, those in force and those that ended."""
        with self.sessions() as session:
            return silences.list_silences(session, who)

    def create_silence(self, who: Principal, body: SilenceCreate) -> SilenceOut:
        _admin(who)
        with self.sessions() as session, session.begin():
            try:
                return silences.create_silence(session, who, body)
            except errors.ServiceError as exc:
                raise OnCallRefused(str(exc)) from None

    def expire_silence(self, who: Principal, silence_id: int) -> None:
        _admin(who)
        with self.sessions() as session, session.begin():
            try:
                silences.expire_silence(session, who, silence_id)
            except errors.ServiceError as exc:
                raise OnCallRefused(str(exc)) from None

    def acknowledge(self, who: Principal, alert_id: int, comment: str = "") -> None:
        """Take the firing alert ``alert_id`` on (the one that opened its episode)."""
        _admin(who)
        with self.sessions() as session, session.begin():
            try:
                silences.acknowledge(session, who, alert_id, AckCreate(comment=comment))
            except errors.ServiceError as exc:
                raise OnCallRefused(str(exc)) from None


def _admin(who: Principal) -> None:
    if not who.can("admin"):
        raise OnCallRefused(NEEDS_ADMIN)
