"""Who may do what: the one place that decides, for the API and the dashboard alike.

A principal (a token's project and scope, :class:`~normwatch.server.auth.Principal`) acts
within its own project and within its scope: ``read`` reads, ``ingest`` reads and writes
runs, ``admin`` does everything. Each check raises a refusal of
:mod:`normwatch.server.errors` (`Forbidden`, `NotFound`, `RunNotFound`) with the message the
caller sees.

The API tells a run of another project (403) from a missing one (404); the dashboard does
not (``hidden=True``): a viewer learns nothing of other projects' run ids.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from ..auth import Principal, Scope
from ..errors import Forbidden, RunNotFound
from ..models import Run
from ..storage.runs import run_by_id

OwnedRun = tuple[Run, str]
"""A run and its project's name, as `owned_run` gives them."""

MAX_RUN_ID = 64
"""Run ids are 32 hex digits; longer ones name no run (and are not echoed back)."""


def authorize(who: Principal, scope: Scope, *, doing: str | None = None) -> None:
    """Refuse unless ``who``'s scope covers ``scope``. ``doing`` names the action for the
    message ("changing alert rules needs an admin token"); without it the message names
    the scopes."""
    if who.can(scope):
        return
    if doing is not None:
        article = "an" if scope[0] in "aeiou" else "a"
        raise Forbidden(f"{doing} needs {article} {scope} token")
    raise Forbidden(f"this token's scope is '{who.scope}'; '{scope}' is needed")


def own_project(who: Principal, project: str | None) -> str:
    """The project a request names (``who``'s own when it names none); another project's
    name is refused."""
    if project is None or project == who.project:
        return who.project
    raise Forbidden(f"this token belongs to project {who.project!r}, not {project!r}")


def owns(who: Principal, project_id: int, what: str) -> None:
    """Refuse an object (``what``: "rule", "token"...) of another project than ``who``'s."""
    if project_id != who.project_id:
        raise Forbidden(f"this {what} belongs to another project")


def owned_run(session: Session, who: Principal, run_id: str, *, hidden: bool = False) -> OwnedRun:
    """The run ``run_id`` and its project's name, if ``who``'s project has it.

    `RunNotFound` when no run has that id; a run of another project is `Forbidden`, or,
    with ``hidden``, not found either.
    """
    if len(run_id) > MAX_RUN_ID:
        raise RunNotFound("no run with that id", run_id)
    found = run_by_id(session, run_id)
    if found is None or (hidden and found[0].project_id != who.project_id):
        raise RunNotFound(f"no run with id {run_id!r}", run_id)
    owns(who, found[0].project_id, "run")
    return found
