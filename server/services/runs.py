"""Runs: create, resume (opening a segment on restarts), list, update; what a runs table
shows of many runs' metrics at once."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from .. import errors
from ..auth import Principal, get_or_create_project
from ..models import Run, Segment, utcnow
from ..schemas import (
    MAX_TAGS,
    SEGMENT_MAX,
    RunCreate,
    RunOut,
    RunUpdate,
    SegmentOut,
    json_document,
)
from ..storage.run_stats import SeriesStats, run_stats
from ..storage.runs import (
    insert_run,
    logged_names,
    open_segment,
    run_by_id,
    run_for_update,
    run_keys,
    runs_of_project,
    segment_start,
    segments,
)
from ..storage.runs import update_run as update_stored_run
from . import control
from .access import own_project


def to_out(run: Run, project: str, segments: list[Segment] | None = None) -> RunOut:
    return RunOut(
        id=run.id,
        project=project,
        name=run.name,
        status=run.status,
        segment=run.segment,
        config=run.config or {},
        tags=run.tags or [],
        last_step=run.last_step,
        last_seen=run.last_seen,
        created_at=run.created_at,
        notes=run.notes,
        segments=None
        if segments is None
        else [
            SegmentOut(segment=s.segment, start_step=s.start_step, created_at=s.created_at)
            for s in segments
        ],
    )


def create_or_resume(session: Session, who: Principal, body: RunCreate) -> RunOut:
    """Create the run, or resume it when the project already has one of that name.

    A ``start_step`` at or below the run's last logged step means the trainer restarted
    from an earlier checkpoint: a new segment opens and every stored point is kept.
    """
    project_name = own_project(who, body.project)
    project = get_or_create_project(session, project_name)
    run = run_for_update(session, project.id, body.name)
    if run is None:
        run = insert_run(
            session, project.id, body.name, body.config, sorted(set(body.tags)), body.start_step
        )
        if run is None:  # lost a race with a concurrent create of the same name
            return create_or_resume(session, who, body)
        return to_out(run, project.name, segments(session, run.key))

    reference = run.last_step
    if reference is None:
        reference = segment_start(session, run.key, run.segment)
    if body.start_step is not None and reference is not None and body.start_step <= reference:
        if run.segment >= SEGMENT_MAX:
            raise errors.Conflict(
                f"run {run.name!r} has restarted {SEGMENT_MAX - 1} times, the most it may; "
                "start a run of another name"
            )
        open_segment(session, run, body.start_step)
    values: dict[str, object] = {"status": "running", "last_seen": utcnow()}
    if body.config:
        config = {**(run.config or {}), **body.config}
        try:
            json_document(config)
        except ValueError as exc:
            raise errors.Invalid(f"config: merged with the run's, it {exc}") from None
        values["config"] = config
    if body.tags:
        tags = sorted(set(run.tags or []) | set(body.tags))
        if len(tags) > MAX_TAGS:
            raise errors.Invalid(
                f"tags: the run would have {len(tags)} tags; a run may have at most {MAX_TAGS}"
            )
        values["tags"] = tags
    update_stored_run(session, run, values)
    return to_out(run, project.name, segments(session, run.key))


def get_run(session: Session, run_id: str) -> tuple[Run, str] | None:
    """The run and its project's name, or None."""
    return run_by_id(session, run_id)


def describe(session: Session, run: Run, project: str) -> RunOut:
    return to_out(run, project, segments(session, run.key))


def list_runs(session: Session, project: str, *, limit: int = 1000) -> list[RunOut]:
    """The project's runs, most recently active first, at most ``limit`` of them."""
    return [to_out(run, name) for run, name in runs_of_project(session, project, limit)]


def update_run(
    session: Session, run: Run, project: str, body: RunUpdate, *, control_read: int | None = None
) -> RunOut:
    """Set the run's status, tags or note (an empty note, or one of spaces only, removes
    it). ``control_read``: the newest control request the
    trainer read (see `control.for_trainer`), acknowledged before a finished run's unread
    requests expire."""
    if control_read is not None:
        control.acknowledge(session, run.key, control_read)
    values: dict[str, object] = {}
    if body.status is not None:
        values["status"] = body.status
    if body.tags is not None:
        values["tags"] = sorted(set(body.tags))
    if body.notes is not None:
        values["notes"] = body.notes.strip() or None
    if values:
        update_stored_run(session, run, values)
    if body.status in ("finished", "failed"):
        control.expire_unread(session, run)
    return describe(session, run, project)


MAX_TABLE_NAMES = 1000
"""Metric names a runs table offers as columns at most."""


def metric_stats(
    session: Session, project: str, run_ids: Sequence[str], names: Sequence[str]
) -> dict[str, dict[str, SeriesStats]]:
    """Each of ``names`` that each of the project's runs ``run_ids`` logged, by run id and
    name: its last value, minimum and maximum over the run (`storage.run_stats`), in a few
    statements for all of them. A run outside the project, or a name it never logged, is
    absent."""
    found = run_keys(session, project, run_ids)
    ids = {key: run_id for run_id, key, _ in found}
    stats = run_stats(session, [(key, seg) for _, key, seg in found], names)
    out: dict[str, dict[str, SeriesStats]] = {}
    for (key, name), value in stats.items():
        out.setdefault(ids[key], {})[name] = value
    return out


def project_metric_names(session: Session, project: str, *, runs: int = 200) -> list[str]:
    """The metric names the project's ``runs`` most recently active runs logged, sorted
    (at most `MAX_TABLE_NAMES`): what a runs table suggests as columns."""
    return logged_names(session, project, runs=runs, limit=MAX_TABLE_NAMES)
