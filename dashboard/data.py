"""What the dashboard reads, through the service layer (never SQL), scoped to the viewer."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.alerts.delivery import Deliverer
from normwatch.server.analytics import spikes as spike_finder
from normwatch.server.analytics.transitions import Fit, fit_transition
from normwatch.server.auth import Principal
from normwatch.server.db import begin_snapshot
from normwatch.server.errors import Conflict, Invalid
from normwatch.server.schemas import MAX_NOTES, EventOut, MetricOut, RunOut, RunUpdate
from normwatch.server.schemas.alerts import (
    AlertOut,
    AlertRuleCreate,
    AlertRuleOut,
    AlertRuleUpdate,
    RulePreview,
    TestDelivery,
)
from normwatch.server.schemas.analytics import CompareOut
from normwatch.server.services import (
    access,
    alert_rules,
    aliases,
    analytics,
    full_resolution,
    layers,
    query,
    runs,
)
from normwatch.server.services import export as exporter
from normwatch.server.services.access import OwnedRun
from normwatch.server.services.analytics import SpikeReport, full_series
from normwatch.server.services.attribution import Attribution
from normwatch.server.services.attribution import attribution as group_shares
from normwatch.server.services.export_formats import written
from normwatch.server.services.layers import LayerGrid
from normwatch.server.services.transitions import Transitions, run_transitions
from normwatch.server.storage.run_stats import SeriesStats

from .control import ControlData
from .figures import AlertMark, Line, Marker
from .oncall import OnCallData
from .workspace import WorkspaceData


@dataclass(frozen=True)
class DashboardData(OnCallData, ControlData, WorkspaceData):
    """Reads for one viewer; a run of another project looks exactly like a missing one."""

    sessions: sessionmaker[Session]
    deliverer: Deliverer | None = None
    webhook_allow: Collection[str] = ()
    base_url: str = ""

    def runs(self, who: Principal, *, limit: int = 1000) -> list[RunOut]:
        """The project's runs, most recently active first, at most ``limit`` of them."""
        with self.sessions() as session:
            return runs.list_runs(session, who.project, limit=limit)

    def set_tags(self, who: Principal, run_id: str, tags: Sequence[str]) -> RunOut:
        """Replace the run's tags, validated as ``PATCH /api/v1/runs/{id}`` validates them
        (`Invalid` saying why; `Forbidden` for a viewer without an admin token)."""
        return self._retag(who, run_id, lambda _: list(tags))

    def remove_tag(self, who: Principal, run_id: str, tag: str) -> RunOut:
        """Take ``tag`` off the run (`Forbidden` for a viewer without an admin token)."""
        return self._retag(who, run_id, lambda current: [t for t in current if t != tag])

    def _retag(self, who: Principal, run_id: str, edit: Callable[[list[str]], list[str]]) -> RunOut:
        access.authorize(who, "admin", doing="changing tags")
        with self.sessions() as session, session.begin():
            run, project = self._owned(session, who, run_id)
            try:
                body = RunUpdate(tags=edit(list(run.tags or [])))
            except ValidationError as exc:
                raise Invalid(_tag_errors(exc)) from None
            return runs.update_run(session, run, project, body)

    def set_notes(self, who: Principal, run_id: str, notes: str) -> RunOut:
        """Set the run's note (an empty one removes it), validated as ``PATCH
        /api/v1/runs/{id}`` validates it (`Invalid` saying why; `Forbidden` for a viewer
        without an admin token)."""
        access.authorize(who, "admin", doing="changing notes")
        with self.sessions() as session, session.begin():
            run, project = self._owned(session, who, run_id)
            try:
                body = RunUpdate(notes=notes)
            except ValidationError:
                raise Invalid(_notes_error(notes)) from None
            return runs.update_run(session, run, project, body)

    def metric_stats(
        self, who: Principal, run_ids: Sequence[str], names: Sequence[str]
    ) -> dict[str, dict[str, SeriesStats]]:
        """Each of ``names`` that each of the viewer's runs ``run_ids`` logged, by run id
        and name: its last value, minimum and maximum over the run, read for all of them
        at once (`services.runs.metric_stats`)."""
        with self.sessions() as session:
            begin_snapshot(session)
            return runs.metric_stats(session, who.project, run_ids, names)

    def logged_names(self, who: Principal) -> list[str]:
        """The metric names the project's recent runs logged, sorted: a runs table's
        suggestions for its metric columns."""
        with self.sessions() as session:
            return runs.project_metric_names(session, who.project)

    def run(self, who: Principal, run_id: str) -> RunOut:
        with self.sessions() as session:
            run, project = self._owned(session, who, run_id)
            return runs.describe(session, run, project)

    def export_csv(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        start: int | None,
        end: int | None,
    ) -> tuple[str, Iterator[bytes]]:
        """The run's name, and the CSV of every stored point of ``metrics`` in ``[start,
        end]`` as `services.export` streams it (read in a snapshot of its own as the bytes
        are taken). `Invalid` for a name the export will not take, at once."""
        with self.sessions() as session:
            run, _ = self._owned(session, who, run_id)
            known = aliases.project_aliases(session, run.project_id)
            columns = exporter.columns(session, run, metrics, known)
            name, key = run.name, run.key
        pages = exporter.streamed(self.sessions, key, columns, known, start, end)
        return name, written("csv", columns, pages)

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
        """Each of ``metrics`` (names or derived expressions) over ``[start, end]``, as the
        chart draws it; a refusal for an expression the service will not read."""
        with self.sessions() as session:
            begin_snapshot(session)
            run, _ = self._owned(session, who, run_id)
            series = query.read_series(session, run, metrics, start=start, end=end, points=points)
        return {
            s.metric: Line(
                s.metric,
                s.steps.tolist(),
                s.values.tolist(),
                s.downsampled,
                s.total_points,
                s.source,
            )
            for s in series
        }

    def clock(self, who: Principal, run_id: str) -> tuple[list[int], list[float]]:
        """When the run reached its steps: steps ascending and their unix times."""
        with self.sessions() as session:
            run, _ = self._owned(session, who, run_id)
            steps, at = query.run_clock(session, run)
        return steps.tolist(), at.tolist()

    def markers(self, who: Principal, run_id: str) -> list[Marker]:
        return [Marker(e.step, e.text, e.kind) for e in self.events(who, run_id)]

    def alerts(self, who: Principal, run_id: str | None = None, limit: int = 100) -> list[AlertOut]:
        """The project's alerts, newest first; one run's when ``run_id`` is given
        (`RunNotFound` when the viewer's project has no such run)."""
        with self.sessions() as session:
            return alert_rules.list_alerts(session, who, run_id=run_id, limit=limit, hidden=True)

    def firing(self, who: Principal) -> list[AlertOut]:
        with self.sessions() as session:
            return alert_rules.firing_now(session, who)

    def alert_marks(self, who: Principal, run_id: str) -> list[AlertMark]:
        """The run's alert state changes, oldest first, as chart markers."""
        return [
            AlertMark(
                a.step,
                a.state,
                f"{a.rule['name']} · {a.metric} = {_value_text(a.value)} · {a.reason}",
                a.metric or "",
            )
            for a in reversed(self.alerts(who, run_id, limit=500))
            if a.step is not None
        ]

    def rules(self, who: Principal) -> list[AlertRuleOut]:
        with self.sessions() as session:
            return alert_rules.list_rules(session, who)

    def create_rule(self, who: Principal, body: AlertRuleCreate) -> AlertRuleOut:
        self._admin(who)
        with self.sessions() as session, session.begin():
            return alert_rules.create_rule(session, who, body, self.webhook_allow)

    def set_enabled(self, who: Principal, rule_id: int, enabled: bool) -> AlertRuleOut:
        self._admin(who)
        body = AlertRuleUpdate(enabled=enabled)
        with self.sessions() as session, session.begin():
            return alert_rules.update_rule(session, who, rule_id, body, self.webhook_allow)

    def update_rule(self, who: Principal, rule_id: int, body: AlertRuleUpdate) -> AlertRuleOut:
        """Change the given fields of a rule; the service restarts evaluation where needed."""
        self._admin(who)
        with self.sessions() as session, session.begin():
            return alert_rules.update_rule(session, who, rule_id, body, self.webhook_allow)

    def delete_rule(self, who: Principal, rule_id: int) -> None:
        self._admin(who)
        with self.sessions() as session, session.begin():
            alert_rules.delete_rule(session, who, rule_id)

    def preview(self, who: Principal, rule_id: int, run_id: str) -> RulePreview:
        with self.sessions() as session:
            begin_snapshot(session)
            return alert_rules.preview_rule(session, who, rule_id, run_id)

    def test_rule(self, who: Principal, rule_id: int) -> list[TestDelivery]:
        """Send the sample notification to each of the rule's channels now."""
        self._admin(who)
        if self.deliverer is None:
            raise Conflict("test sends are not available here: no deliverer configured")
        with self.sessions() as session:
            rule = alert_rules.get_rule(session, who, rule_id)
            return alert_rules.send_test(rule, who.project, self.base_url, self.deliverer)

    def compare(
        self,
        who: Principal,
        run_ids: Sequence[str],
        metric: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
    ) -> CompareOut:
        """``metric`` (a name or a derived expression) of the viewer's runs ``run_ids`` on
        one step axis, a summary of each over ``[start, end]``, and the config keys that
        differ; `RunNotFound` for a run outside the viewer's project, a refusal for a
        metric the service will not read."""
        with self.sessions() as session:
            begin_snapshot(session)
            found = [self._owned(session, who, run_id)[0] for run_id in dict.fromkeys(run_ids)]
            return analytics.compare_runs(
                session, found, metric, start=start, end=end, points=points
            )

    def metric_names(self, who: Principal, run_id: str) -> list[str]:
        """The run's metric names, sorted: no values, so cheap for a run of thousands."""
        with self.sessions() as session:
            run, _ = self._owned(session, who, run_id)
            return full_resolution.Reader(session, run, None, None).names()

    def layer_grid(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
        at: int | None = None,
    ) -> LayerGrid:
        """The layer × step grid of the metrics under ``prefix`` (`services.layers`);
        a refusal for a prefix with more layers than a grid may have."""
        with self.sessions() as session:
            begin_snapshot(session)
            run, _ = self._owned(session, who, run_id)
            return layers.layer_grid(
                session, run, prefix, start=start, end=end, points=points, at=at
            )

    def layer_profile(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        at: int | None,
        radius: int,
        relative: bool = False,
        baseline_end: int | None = None,
    ) -> LayerGrid | None:
        """The layers under ``prefix`` with their depth profile at step ``at`` (the run's
        last step when None): each layer's value at its logged step nearest ``at``, within
        about ``radius`` steps; ``relative``: over the layer's own baseline before
        ``baseline_end`` (default the profile's step). None while the run has no step."""
        with self.sessions() as session:
            begin_snapshot(session)
            run, _ = self._owned(session, who, run_id)
            step = run.last_step if at is None else at
            if step is None:
                return None
            end = baseline_end if baseline_end is not None and baseline_end <= step else None
            return layers.layer_profile(
                session,
                run,
                prefix,
                at=step,
                radius=radius,
                relative_to="baseline" if relative else None,
                baseline_end=end,
            )

    def spike_report(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        optional: Sequence[str] = (),
        start: int | None,
        end: int | None,
        threshold: float = spike_finder.THRESHOLD,
    ) -> SpikeReport:
        """Spikes of ``metrics`` and of those of ``optional`` the run has logged
        (`services.analytics.spike_report`: found over the whole run at ``threshold`` noise
        SDs, listed where they overlap ``[start, end]``); a refusal for a metric the
        service will not read."""
        with self.sessions() as session:
            begin_snapshot(session)
            run, _ = self._owned(session, who, run_id)
            names = full_resolution.Reader(session, run, None, None).names()
            # A canonical name that a stored alias stands for counts as logged.
            logged = set(aliases.project_aliases(session, run.project_id).visible(names))
            chosen = [*metrics, *(m for m in optional if m in logged)]
            return analytics.spike_report(
                session, run, chosen, start=start, end=end, threshold=threshold
            )

    def transitions(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        start: int | None,
        end: int | None,
        window: int | None = None,
    ) -> Transitions:
        """The run's events and detected change points in ``[start, end]``, each with every
        metric's slopes before and after it, largest slope change first
        (`services.transitions.run_transitions`); a refusal for metrics the service
        will not read."""
        with self.sessions() as session:
            begin_snapshot(session)
            run, _ = self._owned(session, who, run_id)
            return run_transitions(session, run, list(metrics), start=start, end=end, window=window)

    def transition_fits(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        at: int,
        start: int | None,
        end: int | None,
        window: int,
    ) -> dict[str, Fit]:
        """Each metric's least-squares lines on the ``window`` steps before ``at`` and from it
        on, from every stored point in ``[start, end]`` (a metric without two points on a
        side has none); a refusal for metrics the service will not read."""
        with self.sessions() as session:
            begin_snapshot(session)
            run, _ = self._owned(session, who, run_id)
            reader = full_resolution.Reader(
                session, run, start, end, aliases=aliases.project_aliases(session, run.project_id)
            )
            series = {metric: full_series(reader, metric) for metric in dict.fromkeys(metrics)}
        fits = {m: fit_transition(s, v, at, max(1, window)) for m, (s, v) in series.items()}
        return {metric: fit for metric, fit in fits.items() if fit is not None}

    def attribution(
        self,
        who: Principal,
        run_id: str,
        prefix: str,
        *,
        start: int | None,
        end: int | None,
        points: int,
        by: str = "group",
    ) -> Attribution:
        """Each parameter group's (or part's, ``by="part"``) share of ``<prefix>/total``
        squared at sampled steps, and the steps where the shares do not add up
        (`services.attribution`); a refusal for a family the service refuses."""
        with self.sessions() as session:
            begin_snapshot(session)
            run, _ = self._owned(session, who, run_id)
            return group_shares(session, run, prefix, start=start, end=end, points=points, by=by)

    @staticmethod
    def _admin(who: Principal) -> None:
        access.authorize(who, "admin", doing="changing alert rules")

    @staticmethod
    def _owned(session: Session, who: Principal, run_id: str) -> OwnedRun:
        """The viewer's run: another project's is `RunNotFound` like a missing one."""
        return access.owned_run(session, who, run_id, hidden=True)


def _value_text(value: float | str | None) -> str:
    if value is None:
        return "—"
    return value if isinstance(value, str) else f"{value:.6g}"


def _notes_error(notes: str) -> str:
    """Why ``RunUpdate`` refused ``notes``, in words."""
    if len(notes) > MAX_NOTES:
        return f"a note has at most {MAX_NOTES:,} characters, not {len(notes):,}"
    return "a note must be plain text (no NUL character, no lone surrogate)"


def _tag_errors(exc: ValidationError) -> str:
    """What the validation of ``RunUpdate.tags`` found wrong, in words, one fault a tag:
    "tag 'x…' has 129 characters; at most 128"."""
    said = []
    for error in exc.errors():
        ctx = error.get("ctx") or {}
        if len(error["loc"]) < 2:  # the list itself
            if error["type"] == "too_long":
                most, count = ctx["max_length"], ctx["actual_length"]
                said.append(f"a run has at most {most} tags, not {count}")
            else:
                said.append(f"tags: {error['msg']}")
            continue
        tag = str(error.get("input", ""))
        shown = repr(tag if len(tag) <= 40 else tag[:40] + "…")
        if error["type"] == "too_long":
            why = f"has {ctx['actual_length']} characters; at most {ctx['max_length']}"
        elif error["type"] == "too_short":
            why = "is empty"
        elif error["type"] == "string_pattern_mismatch":
            why = "holds a control character"
        else:
            why = str(error["msg"]).removeprefix("Value error, ")
        said.append(f"tag {shown} {why}")
    return "; ".join(said)
