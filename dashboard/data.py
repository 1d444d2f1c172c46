"""What the dashboard reads, through the service layer (never SQL), scoped to the viewer."""

from __future__ import annotations

from dataclasses import dataclass

from normwatch.server.auth import Principal
from normwatch.server.models import Run
from normwatch.server.schemas import EventOut, MetricOut, RunOut
from normwatch.server.services import query, runs
from sqlalchemy.orm import Session, sessionmaker

from .figures import Line, Marker


class RunNotFound(LookupError):
    """No such run in the viewer's project."""


@dataclass(frozen=True)
class DashboardData:
    """Reads for one viewer; a run of another project looks exactly like a missing one."""

    sessions: sessionmaker[Session]

    def runs(self, who: Principal) -> list[RunOut]:
        with self.sessions() as session:
            return runs.list_runs(session, who.project)

    def run(self, who: Principal, run_id: str) -> RunOut:
        with self.sessions() as session:
            run, project = self._owned(session, who, run_id)
            return runs.describe(session, run, project)

    def metrics(self, who: Principal, run_id: str) -> list[MetricOut]:
        with self.sessions() as session:
            run, _ = self._owned(session, who, run_id)
            return query.list_metrics(session, run)

    def events(self, who: Principal, run_id: str) -> list[EventOut]:
        with self.sessions() as session:
            run, _ = self._owned(session, who, run_id)
            return query.list_events(session, run)

    def lines(
        self,
        who: Principal,
        run_id: str,
        metrics: list[str],
        *,
        start: int | None,
        end: int | None,
        points: int,
    ) -> dict[str, Line]:
        with self.sessions() as session:
            run, _ = self._owned(session, who, run_id)
            series = query.read_series(session, run, metrics, start=start, end=end, points=points)
        return {
            s.metric: Line(
                s.metric, s.steps.tolist(), s.values.tolist(), s.downsampled, s.total_points
            )
            for s in series
        }

    def markers(self, who: Principal, run_id: str) -> list[Marker]:
        return [Marker(e.step, e.text, e.kind) for e in self.events(who, run_id)]

    @staticmethod
    def _owned(session: Session, who: Principal, run_id: str) -> tuple[Run, str]:
        found = runs.get_run(session, run_id)
        if found is None or found[0].project_id != who.project_id:
            raise RunNotFound(run_id)
        return found
