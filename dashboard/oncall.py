"""What the alerts page changes for the people on call: silences and acknowledgements,
through the service layer, for admins only (the API's rule: ``POST /api/v1/silences`` and
``/alerts/{id}/ack`` take an admin token)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import Principal
from normwatch.server.schemas.alerts import AckCreate, SilenceCreate, SilenceOut
from normwatch.server.services import access, silences

DOING = "silencing and acknowledging alerts"
"""What needs an admin token here (`access.authorize`'s words)."""


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
            return silences.create_silence(session, who, body)

    def expire_silence(self, who: Principal, silence_id: int) -> None:
        _admin(who)
        with self.sessions() as session, session.begin():
            silences.expire_silence(session, who, silence_id)

    def acknowledge(self, who: Principal, alert_id: int, comment: str = "") -> None:
        """Take the firing alert ``alert_id`` on (the one that opened its episode)."""
        _admin(who)
        with self.sessions() as session, session.begin():
            silences.acknowledge(session, who, alert_id, AckCreate(comment=comment))


def _admin(who: Principal) -> None:
    access.authorize(who, "admin", doing=DOING)
