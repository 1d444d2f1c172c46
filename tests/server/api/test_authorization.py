"""The authorization matrix: every route of the service and every dashboard callback, for
each kind of caller, on the caller's own project and on another project, against a real
server on Postgres.

Callers, all of project "own":

    none     no token, no session cookie
    revoked  an admin token, revoked (its dashboard session was opened before that)
    expired  an admin token past its expiry (likewise)
    ingest   an ingest token (it cannot open a dashboard session: its requests carry none)
    read     a read token, or a session opened with it
    admin    an admin token, or a session opened with it

Targets: the caller's own project's run, rule and token ("own"); another project's
("other": by id in the path, or named in a query or body); for id routes, an id that no
project has ("unknown").

The tables write out what each caller gets, from the contract and the code: 401 without
a token or with a bad, revoked or expired one; 403 for a scope too narrow (checked first)
or another project's objects; 404 for an unknown id. Dashboard pages without a session
redirect (303) to /login and callbacks answer 401. For callbacks a cell reads

    ok       answered (200), showing the caller's data; a change is made in the database
    refused  answered (200) with an error message, and nothing changes in the database
    kept     answered (200) with the change shown on the caller's page only, and a note
             saying why it was not saved; nothing changes in the database
    hidden   answered without error, showing nothing of the other project
             (for the page router: its not-found view)

Every answer, whoever asked, must hold nothing of the other project (its run's name, its
rule's name, its event's text, its metric's name), and every refusal, and every GET,
must leave the database as it was. The test also checks that the tables cover every route
the app has and every server-side callback the dashboard registers: a new one fails here
until someone writes its row.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.routing import Mount, WebSocketRoute
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from normwatch.dashboard.figures import run_color
from normwatch.dashboard.pages.run_panels_layout import NOT_SAVED
from normwatch.dashboard.refusals import NO_SUCH_RUN
from normwatch.server.api.context import context_of
from normwatch.server.app import create_app
from normwatch.server.auth import Scope, create_token, revoke_token
from normwatch.server.config import Settings
from normwatch.server.db import build_engine, session_factory
from normwatch.server.models import (
    Alert,
    AlertRule,
    ApiToken,
    Event,
    Metric,
    Project,
    Run,
    Silence,
    Workspace,
    utcnow,
)
from normwatch.testing import ServerProcess, running_server
from tests.helpers.tenants import Tenant, make_tenant

CALLERS = ("none", "revoked", "expired", "ingest", "read", "admin")
OK, REFUSED, HIDDEN, KEPT = "ok", "refused", "hidden", "kept"
Expect = int | str
Cells = tuple[Expect, Expect, Expect, Expect, Expect, Expect]
METRICS_TOKEN = "scrape-" + uuid.uuid4().hex


@dataclass(frozen=True)
class Row:
    """One request, and what each caller in `CALLERS` order gets for each target."""

    route: str
    """``METHOD /path`` as the app declares it (``WS`` for a websocket), or, for a
    callback, the callback's name in the dashboard's code."""
    what: str
    own: Cells | None
    other: Cells | None = None
    unknown: Cells | None = None


# --- the tables ---------------------------------------------------------------------------
# Cells in CALLERS order: (none, revoked, expired, ingest, read, admin).
# fmt: off

API = [
    Row("POST /api/v1/runs", "create or resume a run (other: body names the other project)",
        own=(401, 401, 401, 200, 403, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("GET /api/v1/runs", "list runs (other: ?project=other)",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("GET /api/v1/runs/{run_id}", "describe a run",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("PATCH /api/v1/runs/{run_id}", "replace a run's tags",
        own=(401, 401, 401, 200, 403, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 404, 403, 404)),
    Row("POST /api/v1/runs/{run_id}/metrics", "post a metric batch",
        own=(401, 401, 401, 202, 403, 202), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 404, 403, 404)),
    Row("GET /api/v1/runs/{run_id}/metrics", "list a run's metrics",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/runs/{run_id}/series", "read a series",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/runs/{run_id}/layers", "read a layer grid",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/runs/{run_id}/transitions", "read a run's transitions",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/runs/{run_id}/attribution", "read an attribution",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/runs/{run_id}/spikes", "read a run's spikes",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/runs/{run_id}/export", "export a run's points",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/compare", "compare runs",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("POST /api/v1/runs/{run_id}/events", "post an event",
        own=(401, 401, 401, 201, 403, 201), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 404, 403, 404)),
    Row("GET /api/v1/runs/{run_id}/events", "list a run's events",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("POST /api/v1/runs/{run_id}/control", "ask a run's trainer to checkpoint",
        own=(401, 401, 401, 403, 403, 201), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("GET /api/v1/runs/{run_id}/control", "list a run's control requests",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/alert-rules", "list rules (other: ?project=other, which it ignores)",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 200, 200)),
    Row("POST /api/v1/alert-rules", "create a rule (other: body names the other project)",
        own=(401, 401, 401, 403, 403, 201), other=(401, 401, 401, 403, 403, 403)),
    Row("GET /api/v1/alert-rules/{rule_id}", "describe a rule",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("PATCH /api/v1/alert-rules/{rule_id}", "enable a rule",
        own=(401, 401, 401, 403, 403, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("DELETE /api/v1/alert-rules/{rule_id}", "delete a rule (a fresh one each time)",
        own=(401, 401, 401, 403, 403, 204), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("GET /api/v1/alert-rules/{rule_id}/preview", "preview the target's rule on its run",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("GET /api/v1/alert-rules/{rule_id}/preview", "preview an own rule on the target's run",
        own=None, other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("POST /api/v1/alert-rules/{rule_id}/test", "test-send a rule (it has no channels)",
        own=(401, 401, 401, 403, 403, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("GET /api/v1/alerts", "alert history (other: ?project=other)",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("GET /api/v1/alerts", "alert history of one run (?run=)",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 404, 404)),
    Row("POST /api/v1/alerts/{alert_id}/ack", "acknowledge the target's firing alert",
        own=(401, 401, 401, 403, 403, 204), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("POST /api/v1/silences", "silence the target's rule on its run",
        own=(401, 401, 401, 403, 403, 201), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("GET /api/v1/silences", "list silences (other: ?project=other)",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("DELETE /api/v1/silences/{silence_id}", "expire a silence (a fresh one each time)",
        own=(401, 401, 401, 403, 403, 204), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("GET /api/v1/aliases/presets", "list the alias presets",
        own=(401, 401, 401, 403, 200, 200)),
    Row("GET /api/v1/projects/{project}/aliases", "read a project's aliases",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("PUT /api/v1/projects/{project}/aliases", "set a project's aliases",
        own=(401, 401, 401, 403, 403, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("GET /api/v1/projects/{project}/workspace", "read a project's panel layout",
        own=(401, 401, 401, 403, 200, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("PUT /api/v1/projects/{project}/workspace", "save a project's panel layout",
        own=(401, 401, 401, 403, 403, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("GET /api/v1/tokens", "list tokens (other: ?project=other)",
        own=(401, 401, 401, 403, 403, 200), other=(401, 401, 401, 403, 403, 403)),
    Row("POST /api/v1/tokens", "create a token (other: body names the other project)",
        own=(401, 401, 401, 403, 403, 201), other=(401, 401, 401, 403, 403, 403)),
    Row("DELETE /api/v1/tokens/{token_id}", "revoke a token (a fresh one each time)",
        own=(401, 401, 401, 403, 403, 204), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
    Row("POST /api/v1/tokens/{token_id}/rotate", "rotate a token (a fresh one each time)",
        own=(401, 401, 401, 403, 403, 201), other=(401, 401, 401, 403, 403, 403),
        unknown=(401, 401, 401, 403, 403, 404)),
]

# Outside /api: no project to name, except in a run page's URL. Bearer tokens are sent where
# a script would send one (/healthz, /metrics, the API's description and docs); dashboard
# paths get the caller's session cookie.
SITE = [
    Row("GET /healthz", "health",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /metrics", "scrape (NORMWATCH_METRICS_TOKEN is set; API tokens are not it)",
        own=(401, 401, 401, 401, 401, 401)),
    Row("GET /openapi.json", "the API description",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /docs", "Swagger UI",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /docs/oauth2-redirect", "Swagger UI's redirect",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /redoc", "ReDoc",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /docs/assets/{path}", "Swagger UI's and ReDoc's scripts, served offline",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /login", "the login form",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /login", "?token= of the caller, typed (no token: the form)",
        own=(200, 401, 401, 401, 303, 303)),
    Row("POST /login", "the form with the caller's token (none: empty)",
        own=(401, 401, 401, 401, 303, 303)),
    Row("GET /login/login.js", "the login script",
        own=(200, 200, 200, 200, 200, 200)),
    Row("POST /logout", "log out",
        own=(303, 303, 303, 303, 303, 303)),
    Row("GET /", "the runs page",
        own=(303, 303, 303, 303, 200, 200)),
    Row("GET /runs/{run_id}", "a run page (its data comes through the page router)",
        own=(303, 303, 303, 303, 200, 200), other=(303, 303, 303, 303, 200, 200)),
    Row("GET /runs/{run_id}/export.csv", "download a run's points from its page",
        own=(303, 303, 303, 303, 200, 200), other=(303, 303, 303, 303, 404, 404)),
    Row("GET /compare", "the compare page (its data comes through the page router)",
        own=(303, 303, 303, 303, 200, 200), other=(303, 303, 303, 303, 200, 200)),
    Row("GET /alerts", "the alerts page",
        own=(303, 303, 303, 303, 200, 200)),
    Row("GET /rules", "the rules page",
        own=(303, 303, 303, 303, 200, 200)),
    Row("GET /_dash-layout", "Dash's layout",
        own=(303, 303, 303, 303, 200, 200)),
    Row("GET /_dash-dependencies", "Dash's callbacks",
        own=(303, 303, 303, 303, 200, 200)),
    Row("GET /_reload-hash", "Dash's reload hash",
        own=(303, 303, 303, 303, 200, 200)),
    Row("GET /_dash-component-suites/{package_name}/{fingerprinted_path}", "a Dash script",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /assets/{path}", "the stylesheet",
        own=(200, 200, 200, 200, 200, 200)),
    Row("GET /_favicon.ico", "the icon",
        own=(200, 200, 200, 200, 200, 200)),
    Row("WS /_dash-ws-callback", "open Dash's websocket (same origin); 101: opened",
        own=(403, 403, 403, 403, 101, 101)),
    Row("WS /runs/{run_id}/live", "open a run page's live channel (same origin); 101: opened",
        own=(403, 403, 403, 403, 101, 101), other=(403, 403, 403, 403, 404, 404),
        unknown=(403, 403, 403, 403, 404, 404)),
]

# POST /_dash-update-component, by callback (each known by `callback_key`: CALLBACK_KEYS).
CALLBACKS = [
    Row("route", "open / (the runs list)",
        own=(401, 401, 401, 401, OK, OK)),
    Row("route", "open /runs/<id>",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("route", "open /alerts?run=<id>",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("route", "open /rules",
        own=(401, 401, 401, 401, OK, OK)),
    Row("runs.refresh", "refresh the runs list",
        own=(401, 401, 401, 401, OK, OK)),
    Row("runs.update_view", "search, filter or sort the runs list",
        own=(401, 401, 401, 401, OK, OK)),
    Row("runs.tags", "open the target's run's tag editor",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("runs.tags", "replace the target's run's tags from the editor",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("runs.tags", "remove a tag from the target's run",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("runs.columns", "add a metric column to the runs list",
        own=(401, 401, 401, 401, OK, OK)),
    Row("runs.notes", "open the target's run's note editor",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("runs.notes", "set the target's run's note from the editor",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("run_note.edit", "open the note editor on the view's run",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("run_note.edit", "set the view's run's note from the run page",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("run.update_view", "zoom on an event of the view's run",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run.draw", "draw the view's run",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run.tick", "refresh the view's run on a tick (metric names, chart, sections)",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("runs.pick", "tick runs to compare",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_layers.pin", "pin the depth profile by a click",
        own=(401, 401, 401, 401, OK, OK)),
    Row("run_layers.draw_grid", "draw the view's run's layer heatmap",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_layers.pin_text", "say where the profile is pinned",
        own=(401, 401, 401, 401, OK, OK)),
    Row("run_layers.draw_depth", "draw the view's run's layers",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_spikes.draw", "list the view's run's spikes",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_spikes.zoom", "zoom to a spike",
        own=(401, 401, 401, 401, OK, OK)),
    Row("run_transitions.draw", "list the view's run's transitions",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_transitions.zoom", "zoom to a transition",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_attribution.draw", "draw the view's run's attribution",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_aids.read", "read the view's run's thresholds",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_series.add_expression", "add a derived series",
        own=(401, 401, 401, 401, OK, OK)),
    Row("run_download.link", "point the download link at the view's series",
        own=(401, 401, 401, 401, OK, OK)),
    Row("run_control.act", "ask the view's run's trainer to stop, with a reason",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("run_control.act", "list the view's run's control requests",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_panels.change", "pin a panel (the project's layout: an admin saves it)",
        own=(401, 401, 401, 401, KEPT, OK)),
    Row("run_panels.change", "add an expression panel (likewise)",
        own=(401, 401, 401, 401, KEPT, OK)),
    Row("run_panels.arrange", "arrange the panels in their groups",
        own=(401, 401, 401, 401, OK, OK)),
    Row("run_panels.more", "show more panels of a group",
        own=(401, 401, 401, 401, OK, OK)),
    Row("run_panels.new_metrics", "read the view's run's metric names for its panels",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("run_panels.draw", "draw the view's run's panels in view",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("compare.update_view", "pick the compared metric",
        own=(401, 401, 401, 401, OK, OK)),
    Row("compare.draw", "draw a comparison",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("compare.title", "name the compared runs beside their lines' colours",
        own=(401, 401, 401, 401, OK, OK)),
    Row("alerts.refresh", "refresh the alerts of a run",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, HIDDEN, HIDDEN)),
    Row("oncall.submit", "silence the target's rule on its run from the form",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("oncall.act", "acknowledge the target's firing alert from the table",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("oncall.act", "expire a silence from the table (a fresh one each time)",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("oncall.refresh", "refresh the silences table",
        own=(401, 401, 401, 401, OK, OK)),
    Row("rule_form.show_fields", "show a kind's fields",
        own=(401, 401, 401, 401, OK, OK)),
    Row("rule_form.show_mode", "show the form's mode",
        own=(401, 401, 401, 401, OK, OK)),
    Row("rules.submit", "create a rule",
        own=(401, 401, 401, 401, REFUSED, OK)),
    Row("rules.submit", "save an edited rule",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("rules.edit", "load a rule into the form",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("rules.act", "disable a rule",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("rules.act", "delete a rule",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("rules.act", "test-send a rule (no channels)",
        own=(401, 401, 401, 401, REFUSED, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
    Row("rules.refresh", "refresh the rules table",
        own=(401, 401, 401, 401, OK, OK)),
    Row("rules.run_preview", "preview the target's rule on its run",
        own=(401, 401, 401, 401, OK, OK), other=(401, 401, 401, 401, REFUSED, REFUSED)),
]
# fmt: on

CALLBACK_KEYS = {
    "route": "page.children <- url.pathname",
    "runs.refresh": "runs-table.children <- runs-refresh.n_intervals",
    "runs.pick": 'compare-action.children <- {"run":["ALL"],"type":"compare-pick"}.value',
    "runs.update_view": "runs-view.data <- runs-search.value",
    "runs.tags": "runs-tag-editing.data <- runs-tag-click.data",
    "runs.columns": "runs-view.data <- runs-col-add-metric.n_clicks",
    "runs.notes": "runs-note-editing.data <- runs-note-click.data",
    "run_note.edit": "run-note-message.children <- run-note-edit.n_clicks",
    "run.update_view": "view.data <- left-metric.value",
    "run.draw": "overlay.figure <- view.data",
    "run.tick": "left-metric.options <- tick.n_intervals",
    "run_layers.pin": "layers-pin.data <- layer-heatmap.clickData",
    "run_layers.draw_grid": "layer-heatmap.figure <- view-drawn.data",
    "run_layers.pin_text": "pin-info.children <- layers-pin.data",
    "run_layers.draw_depth": "depth.figure <- layers-pin.data",
    "run_spikes.draw": "spike-table.children <- view-drawn.data",
    "run_spikes.zoom": "view.data <- spike-click.data",
    "run_transitions.draw": "transition-table.children <- view-drawn.data",
    "run_transitions.zoom": "view.data <- transition-click.data",
    "run_attribution.draw": "attribution-chart.figure <- view-drawn.data",
    "run_aids.read": "overlay-aids.data <- aids-key.data",
    "run_series.add_expression": "add-series.value <- add-expression.n_clicks",
    "run_download.link": "download-csv.href <- view.data",
    "run_control.act": "control-message.children <- control-checkpoint.n_clicks",
    "run_panels.change": "panel-layout.data <- panel-click.data",
    "run_panels.arrange": "panel-groups.children <- panel-layout.data",
    "run_panels.more": "panel-pages.data <- panel-click.data",
    "run_panels.new_metrics": "panel-names.data <- draw-tick.data",
    "run_panels.draw": '{"key":["ALL"],"type":"panel-body"}.children <- panels-seen.data',
    "compare.update_view": "compare-view.data <- compare-metric.value",
    "compare.draw": "compare-chart.figure <- compare-view.data",
    "compare.title": "compare-title.children <- compare-view.data",
    "alerts.refresh": "alerts-firing.children <- alerts-refresh.n_intervals",
    "oncall.submit": "oncall-message.children <- silence-create.n_clicks",
    "oncall.act": 'oncall-message.children <- {"alert":["ALL"],"type":"alert-ack"}.n_clicks',
    "oncall.refresh": "silences-table.children <- oncall-changed.data",
    "rule_form.show_fields": "rule-op-field.style <- rule-kind.value",
    "rule_form.show_mode": "rule-create.children <- rule-editing.data",
    "rules.submit": "rule-message.children <- rule-create.n_clicks",
    "rules.edit": 'rule-message.children <- {"rule":["ALL"],"type":"rule-edit"}.n_clicks',
    "rules.act": 'rule-message.children <- {"rule":["ALL"],"type":"rule-toggle"}.n_clicks',
    "rules.refresh": "rules-table.children <- rules-changed.data",
    "rules.run_preview": "preview-result.children <- preview-go.n_clicks",
}
"""Each server-side callback by `callback_key`, as /_dash-dependencies lists it."""


# --- the world: a server, two projects, the callers ---------------------------------------


@dataclass(frozen=True)
class Objects:
    """What a request can name: one project's run, rule and a spare token."""

    project: str
    run_id: str
    run_name: str
    rule_id: int
    rule_name: str
    token_id: int
    event_text: str
    metric: str


UNKNOWN = Objects("no-such-project", "f" * 32, "", 2**31 - 1, "", 2**31 - 1, "", "no/such/metric")


@dataclass
class World:
    server: ServerProcess
    http: httpx.Client
    """Every request of the matrix goes through it (a client made per request loads the CA
    bundle, 20 ms each); it keeps no cookie, so each request says its own."""
    sessions: sessionmaker[Session]
    own: Tenant
    other: Tenant
    objects: dict[str, Objects]
    tokens: dict[str, str | None]
    """Caller -> bearer token."""
    cookies: dict[str, str | None]
    """Caller -> dashboard session cookie."""
    callbacks: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: int = 0
    counter: int = 0

    def next(self) -> int:
        self.counter += 1
        return self.counter

    def tenant(self, target: str) -> Tenant:
        return self.other if target == "other" else self.own

    def fresh_rule(self, target: str) -> Objects:
        """A rule of its own for a request that deletes or changes one."""
        if target == "unknown":
            return UNKNOWN
        name = f"{target} fresh {self.next()}"
        rule = {
            "name": name,
            "metric": "grad/norm/total",
            "condition": {"kind": "non_finite"},
        }
        made = self.http.post(
            f"{self.server.url}/api/v1/alert-rules",
            json=rule,
            headers=self.tenant(target).headers("admin"),
            timeout=30,
        )
        assert made.status_code == 201, made.text
        return replace(self.objects[target], rule_id=made.json()["id"], rule_name=name)

    def firing_alert(self, target: str, objects: Objects) -> int:
        """The id of the firing alert `seed` made on the target's run (an unknown id for
        ``unknown``)."""
        if target == "unknown":
            return UNKNOWN.rule_id
        with self.sessions() as session:
            return int(
                session.scalars(
                    select(Alert.id)
                    .join(Run, Run.key == Alert.run_key)
                    .where(Run.id == objects.run_id, Alert.state == "firing")
                ).one()
            )

    def fresh_silence(self, target: str) -> int:
        """A silence of its own for a request that expires one (an unknown id for
        ``unknown``)."""
        if target == "unknown":
            return UNKNOWN.rule_id
        made = self.http.post(
            f"{self.server.url}/api/v1/silences",
            json={"until_step": 5, "comment": f"{target} fresh {self.next()}"},
            headers=self.tenant(target).headers("admin"),
            timeout=30,
        )
        assert made.status_code == 201, made.text
        return int(made.json()["id"])

    def fresh_token(self, target: str) -> Objects:
        if target == "unknown":
            return UNKNOWN
        token_id = add_token(self.sessions, self.objects[target].project, "read")[1]
        return replace(self.objects[target], token_id=token_id)


def add_token(
    sessions: sessionmaker[Session], project: str, scope: Scope, expires_in_s: float | None = None
) -> tuple[str, int]:
    """A token's secret and id, made as `normwatch token create` makes it."""
    expires = None if expires_in_s is None else utcnow() + timedelta(seconds=expires_in_s)
    with sessions() as session, session.begin():
        secret, row = create_token(session, project, scope, expires_at=expires)
        return secret, row.id


def seed(server: ServerProcess, tenant: Tenant, label: str) -> Objects:
    """A run with metrics, an event and an alert; a rule without channels."""
    tag = f"{label}-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=server.url, timeout=30) as api:
        ingest, admin = tenant.headers("ingest"), tenant.headers("admin")
        run = api.post("/api/v1/runs", json={"name": f"run {tag}", "start_step": 0}, headers=ingest)
        assert run.status_code == 200, run.text
        run_id = run.json()["id"]
        rule = {
            "name": f"rule {tag}",
            "metric": "grad/norm/total",
            "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
        }
        made = api.post("/api/v1/alert-rules", json=rule, headers=admin)
        assert made.status_code == 201, made.text
        metric = f"{label}/only"
        batch = {
            "steps": [0, 1, 2, 3, 4],
            "metrics": {
                "grad/norm/total": [0.3, 6.0, 0.4, 0.5, 0.6],
                "params/norm/final_norm.weight": [341.0, 341.5, 342.0, 342.5, 343.0],
                "grad/norm/layers.0": [0.1, 0.2, 0.1, 0.2, 0.1],
                metric: [1.0, 2.0, 3.0, 4.0, 5.0],
            },
        }
        assert (
            api.post(f"/api/v1/runs/{run_id}/metrics", json=batch, headers=ingest).status_code
            == 202
        )
        event = {"step": 2, "kind": "config", "text": f"event {tag}"}
        assert (
            api.post(f"/api/v1/runs/{run_id}/events", json=event, headers=ingest).status_code == 201
        )
        assert len(api.get("/api/v1/alerts", headers=admin).json()) == 2  # fired, resolved
        spare = api.post("/api/v1/tokens", json={"scope": "read", "name": "spare"}, headers=admin)
        assert spare.status_code == 201, spare.text
    return Objects(
        tenant.project,
        run_id,
        f"run {tag}",
        made.json()["id"],
        f"rule {tag}",
        spare.json()["id"],
        f"event {tag}",
        metric,
    )


def log_in(http: httpx.Client, server: ServerProcess, token: str) -> str:
    r = http.post(f"{server.url}/login", data={"token": token, "next": "/"}, timeout=30)
    assert r.status_code == 303, r.text
    return r.cookies["normwatch_session"]


@pytest.fixture
def world(fresh_pg_url: str, tmp_path: Path) -> Iterator[World]:
    engine = build_engine(fresh_pg_url, pool_size=1)
    sessions = session_factory(engine)

    def forget_cookies(response: httpx.Response) -> None:
        http.cookies.clear()

    http = httpx.Client(timeout=30, event_hooks={"response": [forget_cookies]})
    try:
        with running_server(
            fresh_pg_url,
            tmp_path,
            NORMWATCH_TOKEN_CACHE_S="0",  # a revoked token is refused at once
            NORMWATCH_METRICS_TOKEN=METRICS_TOKEN,
            # Nothing in the background may touch what a cell compares before and after.
            NORMWATCH_COMPACTION="false",
        ) as server:
            own, other = make_tenant(fresh_pg_url), make_tenant(fresh_pg_url)
            # Lives long enough to open a session; runs out while the rest is seeded.
            expiring, expiring_id = add_token(sessions, own.project, "admin", expires_in_s=3)
            expired_cookie = log_in(http, server, expiring)
            objects = {"own": seed(server, own, "own"), "other": seed(server, other, "other")}
            revoked, revoked_id = add_token(sessions, own.project, "admin")
            revoked_cookie = log_in(http, server, revoked)
            with sessions() as session, session.begin():
                assert revoke_token(session, revoked_id) is not None
                expires_at = session.get_one(ApiToken, expiring_id).expires_at
            assert expires_at is not None
            time.sleep(max(0.0, (expires_at - utcnow()).total_seconds() + 0.1))
            yield World(
                server,
                http,
                sessions,
                own,
                other,
                objects,
                tokens={
                    "none": None,
                    "revoked": revoked,
                    "expired": expiring,
                    "ingest": own.ingest,
                    "read": own.read,
                    "admin": own.admin,
                },
                cookies={
                    "none": None,
                    "revoked": revoked_cookie,
                    "expired": expired_cookie,
                    "ingest": None,  # an ingest token opens no session (the login rows check)
                    "read": log_in(http, server, own.read),
                    "admin": log_in(http, server, own.admin),
                },
            )
    finally:
        http.close()
        engine.dispose()


# --- requests -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    form: dict[str, str] | None = None


def _named(target: str, objects: Objects) -> dict[str, str]:
    """A body's ``project``: the other project named, or none (the token's own)."""
    return {"project": objects.project} if target == "other" else {}


def _listing(target: str, objects: Objects) -> dict[str, str] | None:
    return {"project": objects.project} if target == "other" else None


ApiRequest = Callable[[World, str, Objects], Request]
API_REQUESTS: dict[str, ApiRequest] = {
    "create or resume a run (other: body names the other project)": lambda w, t, o: Request(
        "POST", "/api/v1/runs", json={"name": f"made {w.next()}", **_named(t, o)}
    ),
    "list runs (other: ?project=other)": lambda w, t, o: Request(
        "GET", "/api/v1/runs", params=_listing(t, o)
    ),
    "describe a run": lambda w, t, o: Request("GET", f"/api/v1/runs/{o.run_id}"),
    "replace a run's tags": lambda w, t, o: Request(
        "PATCH", f"/api/v1/runs/{o.run_id}", json={"tags": [f"tag {w.next()}"]}
    ),
    "post a metric batch": lambda w, t, o: Request(
        "POST",
        f"/api/v1/runs/{o.run_id}/metrics",
        json={"steps": [100 + w.next()], "metrics": {"grad/norm/total": [0.5]}},
    ),
    "list a run's metrics": lambda w, t, o: Request("GET", f"/api/v1/runs/{o.run_id}/metrics"),
    "read a series": lambda w, t, o: Request(
        "GET", f"/api/v1/runs/{o.run_id}/series", params={"metric": ["grad/norm/total", o.metric]}
    ),
    "read a layer grid": lambda w, t, o: Request(
        "GET", f"/api/v1/runs/{o.run_id}/layers", params={"prefix": "grad/norm", "at": 1}
    ),
    "read a run's transitions": lambda w, t, o: Request(
        "GET", f"/api/v1/runs/{o.run_id}/transitions", params={"metric": "grad/norm/total"}
    ),
    "read an attribution": lambda w, t, o: Request(
        "GET", f"/api/v1/runs/{o.run_id}/attribution", params={"prefix": "grad/norm"}
    ),
    "read a run's spikes": lambda w, t, o: Request(
        "GET", f"/api/v1/runs/{o.run_id}/spikes", params={"metric": ["grad/norm/total", o.metric]}
    ),
    "export a run's points": lambda w, t, o: Request(
        "GET", f"/api/v1/runs/{o.run_id}/export", params={"metric": ["grad/norm/total", o.metric]}
    ),
    "compare runs": lambda w, t, o: Request(
        "GET", "/api/v1/compare", params={"run": o.run_id, "metric": "grad/norm/total"}
    ),
    "post an event": lambda w, t, o: Request(
        "POST", f"/api/v1/runs/{o.run_id}/events", json={"step": 3, "text": f"note {w.next()}"}
    ),
    "list a run's events": lambda w, t, o: Request("GET", f"/api/v1/runs/{o.run_id}/events"),
    "ask a run's trainer to checkpoint": lambda w, t, o: Request(
        "POST", f"/api/v1/runs/{o.run_id}/control", json={"action": "checkpoint"}
    ),
    "list a run's control requests": lambda w, t, o: Request(
        "GET", f"/api/v1/runs/{o.run_id}/control"
    ),
    "list rules (other: ?project=other, which it ignores)": lambda w, t, o: Request(
        "GET", "/api/v1/alert-rules", params=_listing(t, o)
    ),
    "create a rule (other: body names the other project)": lambda w, t, o: Request(
        "POST",
        "/api/v1/alert-rules",
        json={
            "name": f"made {w.next()}",
            "metric": "grad/norm/total",
            "condition": {"kind": "non_finite"},
            **_named(t, o),
        },
    ),
    "describe a rule": lambda w, t, o: Request("GET", f"/api/v1/alert-rules/{o.rule_id}"),
    "enable a rule": lambda w, t, o: Request(
        "PATCH", f"/api/v1/alert-rules/{o.rule_id}", json={"enabled": True}
    ),
    "delete a rule (a fresh one each time)": lambda w, t, o: Request(
        "DELETE", f"/api/v1/alert-rules/{w.fresh_rule(t).rule_id}"
    ),
    "preview the target's rule on its run": lambda w, t, o: Request(
        "GET", f"/api/v1/alert-rules/{o.rule_id}/preview", params={"run": o.run_id}
    ),
    "preview an own rule on the target's run": lambda w, t, o: Request(
        "GET",
        f"/api/v1/alert-rules/{w.objects['own'].rule_id}/preview",
        params={"run": o.run_id},
    ),
    "test-send a rule (it has no channels)": lambda w, t, o: Request(
        "POST", f"/api/v1/alert-rules/{o.rule_id}/test"
    ),
    "alert history (other: ?project=other)": lambda w, t, o: Request(
        "GET", "/api/v1/alerts", params=_listing(t, o)
    ),
    "alert history of one run (?run=)": lambda w, t, o: Request(
        "GET", "/api/v1/alerts", params={"run": o.run_id}
    ),
    "acknowledge the target's firing alert": lambda w, t, o: Request(
        "POST", f"/api/v1/alerts/{w.firing_alert(t, o)}/ack", json={"comment": "mine"}
    ),
    "silence the target's rule on its run": lambda w, t, o: Request(
        "POST",
        "/api/v1/silences",
        json={"rule_id": o.rule_id, "until_step": 10, "comment": f"quiet {w.next()}"},
    ),
    "list silences (other: ?project=other)": lambda w, t, o: Request(
        "GET", "/api/v1/silences", params=_listing(t, o)
    ),
    "expire a silence (a fresh one each time)": lambda w, t, o: Request(
        "DELETE", f"/api/v1/silences/{w.fresh_silence(t)}"
    ),
    "list the alias presets": lambda w, t, o: Request("GET", "/api/v1/aliases/presets"),
    "read a project's aliases": lambda w, t, o: Request(
        "GET", f"/api/v1/projects/{o.project}/aliases"
    ),
    "set a project's aliases": lambda w, t, o: Request(
        "PUT",
        f"/api/v1/projects/{o.project}/aliases",
        json={"presets": ["hf-trainer"], "aliases": {f"gn {w.next()}": "grad/norm/total"}},
    ),
    "read a project's panel layout": lambda w, t, o: Request(
        "GET", f"/api/v1/projects/{o.project}/workspace"
    ),
    "save a project's panel layout": lambda w, t, o: Request(
        "PUT",
        f"/api/v1/projects/{o.project}/workspace",
        json={"pinned": [f"grad/norm/layers.{w.next()}"], "collapsed": ["optim"]},
    ),
    "list tokens (other: ?project=other)": lambda w, t, o: Request(
        "GET", "/api/v1/tokens", params=_listing(t, o)
    ),
    "create a token (other: body names the other project)": lambda w, t, o: Request(
        "POST", "/api/v1/tokens", json={"scope": "read", **_named(t, o)}
    ),
    "revoke a token (a fresh one each time)": lambda w, t, o: Request(
        "DELETE", f"/api/v1/tokens/{w.fresh_token(t).token_id}"
    ),
    "rotate a token (a fresh one each time)": lambda w, t, o: Request(
        "POST", f"/api/v1/tokens/{w.fresh_token(t).token_id}/rotate"
    ),
}


def _login_link(w: World, caller: str) -> Request:
    token = w.tokens[caller]
    return Request("GET", "/login", params={"token": token, "next": "/"} if token else None)


def _script(w: World) -> str:
    """A fingerprinted Dash script the index page names (public, like every static file)."""
    page = w.http.get(f"{w.server.url}/", headers=_cookie(w.cookies["read"]), timeout=30).text
    found = re.search(r'src="(/_dash-component-suites/[^"]+)"', page)
    assert found is not None, page[:500]
    return found.group(1)


SiteRequest = Callable[[World, str, Objects], Request]
SITE_REQUESTS: dict[str, SiteRequest] = {
    "health": lambda w, c, o: Request("GET", "/healthz"),
    "scrape (NORMWATCH_METRICS_TOKEN is set; API tokens are not it)": lambda w, c, o: Request(
        "GET", "/metrics"
    ),
    "the API description": lambda w, c, o: Request("GET", "/openapi.json"),
    "Swagger UI": lambda w, c, o: Request("GET", "/docs"),
    "Swagger UI's redirect": lambda w, c, o: Request("GET", "/docs/oauth2-redirect"),
    "ReDoc": lambda w, c, o: Request("GET", "/redoc"),
    "Swagger UI's and ReDoc's scripts, served offline": lambda w, c, o: Request(
        "GET", "/docs/assets/redoc.standalone.js"
    ),
    "the login form": lambda w, c, o: Request("GET", "/login"),
    "?token= of the caller, typed (no token: the form)": lambda w, c, o: _login_link(w, c),
    "the form with the caller's token (none: empty)": lambda w, c, o: Request(
        "POST", "/login", form={"token": w.tokens[c] or "", "next": "/"}
    ),
    "the login script": lambda w, c, o: Request("GET", "/login/login.js"),
    "log out": lambda w, c, o: Request("POST", "/logout"),
    "the runs page": lambda w, c, o: Request("GET", "/"),
    "a run page (its data comes through the page router)": lambda w, c, o: Request(
        "GET", f"/runs/{o.run_id}"
    ),
    "download a run's points from its page": lambda w, c, o: Request(
        "GET", f"/runs/{o.run_id}/export.csv", params={"metric": "grad/norm/total"}
    ),
    "the compare page (its data comes through the page router)": lambda w, c, o: Request(
        "GET", "/compare", params={"run": o.run_id, "metric": "grad/norm/total"}
    ),
    "the alerts page": lambda w, c, o: Request("GET", "/alerts"),
    "the rules page": lambda w, c, o: Request("GET", "/rules"),
    "Dash's layout": lambda w, c, o: Request("GET", "/_dash-layout"),
    "Dash's callbacks": lambda w, c, o: Request("GET", "/_dash-dependencies"),
    "Dash's reload hash": lambda w, c, o: Request("GET", "/_reload-hash"),
    "a Dash script": lambda w, c, o: Request("GET", _script(w)),
    "the stylesheet": lambda w, c, o: Request("GET", "/assets/normwatch.css"),
    "the icon": lambda w, c, o: Request("GET", "/_favicon.ico"),
}
BEARER_PATHS = ("/healthz", "/metrics", "/openapi.json", "/docs", "/redoc")
"""Outside /api, where a script would send its bearer token: it is sent there too."""


def _cookie(cookie: str | None) -> dict[str, str]:
    return {"Cookie": f"normwatch_session={cookie}"} if cookie else {}


def send(w: World, request: Request, caller: str, *, bearer: bool, cookie: bool) -> httpx.Response:
    headers: dict[str, str] = {}
    token = w.tokens[caller]
    if bearer and token:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers.update(_cookie(w.cookies[caller]))
    w.requests += 1
    return w.http.request(
        request.method,
        f"{w.server.url}{request.path}",
        params=request.params,
        json=request.json,
        data=request.form,
        headers=headers,
        timeout=30,
    )


WEBSOCKET_PATHS: dict[str, Callable[[Objects], str]] = {
    "open Dash's websocket (same origin); 101: opened": lambda o: "/_dash-ws-callback",
    "open a run page's live channel (same origin); 101: opened": lambda o: f"/runs/{o.run_id}/live",
}


def websocket_status(w: World, caller: str, path: str) -> int:
    """101 when the handshake succeeds, else the status it was refused with."""
    url = w.server.url.replace("http://", "ws://") + path
    w.requests += 1
    try:
        with connect(
            url,
            origin=Origin(w.server.url),  # Dash refuses a websocket from another origin
            additional_headers=_cookie(w.cookies[caller]),
            open_timeout=10,
        ):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


# --- callbacks ----------------------------------------------------------------------------


def _split_output(spec: str) -> dict[str, str]:
    component, _, prop = spec.rpartition(".")
    return {"id": component, "property": prop}


def _pattern_key(component: dict[str, Any], prop: str) -> str:
    return json.dumps(component, separators=(",", ":"), sort_keys=True) + "." + prop


def callback_body(
    dependency: dict[str, Any], values: dict[str, Any], changed: list[str]
) -> dict[str, Any]:
    """The JSON the browser posts for ``dependency`` with ``values`` by ``id.property``;
    a pattern input (``{"rule":["ALL"],...}``) takes a list of (id, value) pairs, and so
    does a pattern output (the components it matches are those ids)."""

    def matched(spec: dict[str, str]) -> Any:
        if not spec["id"].startswith("{"):
            return spec
        key = f"{spec['id']}.{spec['property']}"
        return [{"id": i, "property": spec["property"]} for i, _ in values[key]]

    output = dependency["output"]
    outputs: Any = (
        [matched(_split_output(p)) for p in output[2:-2].split("...")]
        if output.startswith("..")
        else matched(_split_output(output))
    )

    def items(specs: list[dict[str, str]]) -> list[Any]:
        out: list[Any] = []
        for spec in specs:
            key = f"{spec['id']}.{spec['property']}"
            if spec["id"].startswith("{"):
                out.append(
                    [{"id": i, "property": spec["property"], "value": v} for i, v in values[key]]
                )
            elif key in values:
                out.append({"id": spec["id"], "property": spec["property"], "value": values[key]})
            else:  # a property the browser has no value for yet
                out.append({"id": spec["id"], "property": spec["property"]})
        return out

    return {
        "output": output,
        "outputs": outputs,
        "inputs": items(dependency["inputs"]),
        "state": items(dependency["state"]),
        "changedPropIds": changed,
    }


@dataclass(frozen=True)
class Callback:
    """A callback request, and how its answer and the database show it worked."""

    name: str
    values: dict[str, Any]
    changed: list[str]
    ok_text: str
    hidden_text: str | None = None
    effect: Callable[[State, State], bool] | None = None
    kept_text: str | None = None
    """What the answer shows when it keeps the change on the page only (`KEPT`)."""


@dataclass(frozen=True)
class State:
    """What the database holds that a request could change."""

    rules: dict[int, tuple[Any, ...]]
    tokens: dict[int, tuple[Any, ...]]
    runs: dict[str, tuple[Any, ...]]
    events: int
    metrics: dict[tuple[int, str], tuple[Any, ...]]
    silences: dict[int, tuple[Any, ...]]
    acks: dict[int, Any]
    workspaces: dict[str, tuple[Any, ...]]
    """Project name -> its panel layout and revision."""


def read_state(sessions: sessionmaker[Session]) -> State:
    """Rows as plain tuples (no ORM objects: this runs twice for most cells)."""
    with sessions() as s:

        def rows(*columns: Any) -> dict[Any, tuple[Any, ...]]:
            return {row[0]: tuple(row[1:]) for row in s.execute(select(*columns))}

        metrics = s.execute(
            select(Metric.run_key, Metric.name, Metric.last_step, Metric.last_value)
        )
        return State(
            rules=rows(
                AlertRule.id,
                AlertRule.project_id,
                AlertRule.name,
                AlertRule.enabled,
                AlertRule.metric,
                AlertRule.condition,
                AlertRule.updated_at,
            ),
            tokens=rows(ApiToken.id, ApiToken.revoked_at, ApiToken.expires_at),
            runs=rows(Run.id, Run.status, Run.tags, Run.config, Run.last_step, Run.notes),
            events=s.scalar(select(func.count()).select_from(Event)) or 0,
            metrics={(key, name): (step, value) for key, name, step, value in metrics},
            silences=rows(Silence.id, Silence.project_id, Silence.expired_at),
            acks={id_: acked for id_, acked in s.execute(select(Alert.id, Alert.acked_at))},
            workspaces={
                name: (layout, revision)
                for name, layout, revision in s.execute(
                    select(Project.name, Workspace.layout, Workspace.revision).join(
                        Workspace, Workspace.project_id == Project.id
                    )
                )
            },
        )


def _view(run_id: str) -> dict[str, Any]:
    return {
        "run": run_id,
        "left": "grad/norm/total",
        "right": "params/norm/final_norm.weight",
        "start": None,
        "end": None,
        "log": False,
    }


def _rule_form(name: str) -> dict[str, Any]:
    """The form's fields as a browser sends them: a threshold rule without channels."""
    fields = {
        "rule-name": name,
        "rule-metric": "grad/norm/total",
        "rule-kind": "threshold",
        "rule-op": ">",
        "rule-value": 5,
        "rule-channel-type": "webhook",
        "rule-channel-url": "",
        "rule-run-name": "*",
    }
    names = (
        "rule-factor rule-window rule-per-1k-steps rule-within-steps rule-seconds "
        "rule-for-steps rule-cooldown-steps rule-channel-secret"
    ).split()
    return {f"{k}.value": v for k, v in {**dict.fromkeys(names), **fields}.items()}


def _click(kind: str, rule_id: int) -> tuple[dict[str, Any], str]:
    component = {"rule": rule_id, "type": kind}
    return component, _pattern_key(component, "n_clicks")


def _act(kind: str, rule_id: int) -> tuple[dict[str, Any], list[str]]:
    values: dict[str, Any] = {}
    for button in ("rule-toggle", "rule-delete", "rule-test"):
        component, key = _click(button, rule_id)
        values[f'{{"rule":["ALL"],"type":"{button}"}}.n_clicks'] = [
            (component, 1 if button == kind else 0)
        ]
    values["rules-changed.data"] = 0
    return values, [_click(kind, rule_id)[1]]


def _route(path: str, search: str, ok: str, hidden: str | None = None) -> Callback:
    values = {"url.pathname": path, "url.search": search}
    return Callback("route", values, ["url.pathname"], ok, hidden)


def _zoom(o: Objects) -> Callback:
    # The event's zoom button as the browser's filter (`ROW_CLICK_JS`) puts it in the store.
    values = {
        "left-metric.value": "grad/norm/total",
        "right-metric.value": "params/norm/final_norm.weight",
        "log-scale.value": [],
        "reset-range.n_clicks": 0,
        "event-click.data": {"row": {"step": 2, "type": "event-zoom"}, "clicks": 1},
        "view.data": _view(o.run_id),
    }
    return Callback("run.update_view", values, ["event-click.data"], '"start":0,"end":202')


def _transition_zoom(o: Objects) -> Callback:
    # The row's click as the browser's filter (`ROW_CLICK_JS`) puts it in the table's store.
    click = {"row": {"step": 2, "type": "transition-row"}, "clicks": 1}
    values = {"transition-click.data": click, "view.data": _view(o.run_id)}
    return Callback("run_transitions.zoom", values, ["transition-click.data"], '"focus":2')


def _spike_zoom(o: Objects) -> Callback:
    row = {"end": 3, "metric": "grad/norm/total", "peak": 1, "start": 1, "type": "spike-row"}
    values = {
        "spike-click.data": {"row": row, "clicks": 1},
        "view.data": _view(o.run_id),
        "depth-family.options": [],
    }
    return Callback("run_spikes.zoom", values, ["spike-click.data"], '{"step":1,"since":1}')


def _submit(w: World, t: str, o: Objects, editing: bool) -> Callback:
    name = f"{t} form {w.next()}"
    target = w.fresh_rule(t) if editing else o
    values = {
        "rule-create.n_clicks": 1,
        "rules-changed.data": 0,
        "rule-editing.data": {"id": target.rule_id, "name": target.rule_name} if editing else None,
        **_rule_form(name),
    }

    def named(before: State, after: State) -> bool:
        if editing:
            return bool(after.rules[target.rule_id][1] == name)
        return [r[1] for i, r in after.rules.items() if i not in before.rules] == [name]

    ok = f"Saved rule {name}." if editing else f"Created rule {name}."
    return Callback("rules.submit", values, ["rule-create.n_clicks"], ok, effect=named)


def _toggle(w: World, t: str) -> Callback:
    rule = w.fresh_rule(t)
    values, changed = _act("rule-toggle", rule.rule_id)
    return Callback(
        "rules.act",
        values,
        changed,
        f"Rule {rule.rule_name} disabled.",
        effect=lambda b, a: b.rules[rule.rule_id][2] is True and a.rules[rule.rule_id][2] is False,
    )


def _delete(w: World, t: str) -> Callback:
    rule = w.fresh_rule(t)
    values, changed = _act("rule-delete", rule.rule_id)
    return Callback(
        "rules.act",
        values,
        changed,
        "Rule deleted.",
        effect=lambda b, a: set(b.rules) - set(a.rules) == {rule.rule_id},
    )


def _edit(o: Objects) -> Callback:
    component, key = _click("rule-edit", o.rule_id)
    values = {
        '{"rule":["ALL"],"type":"rule-edit"}.n_clicks': [(component, 1)],
        "rule-cancel.n_clicks": 0,
    }
    return Callback("rules.edit", values, [key], f'"name":"{o.rule_name}"')


def _control(
    o: Objects, trigger: str, ok: str, effect: Callable[[State, State], bool] | None = None
) -> Callback:
    values = {
        "control-checkpoint.n_clicks": 0,
        "control-stop.n_clicks": 0,
        "control-refresh.n_intervals": 0,
        "control-reason.value": "grad norm diverging",
        "view.data": _view(o.run_id),
    }
    key = f"{trigger}.n_intervals" if trigger == "control-refresh" else f"{trigger}.n_clicks"
    values[key] = 1
    return Callback("run_control.act", values, [key], ok, effect=effect)


def _silence_form(w: World, o: Objects) -> Callback:
    comment = f"quiet {w.next()}"
    values = {
        "silence-create.n_clicks": 1,
        "oncall-changed.data": 0,
        "silence-rule.value": o.rule_id,
        "silence-run.value": o.run_id,
        "silence-metric.value": None,
        "silence-hours.value": 1,
        "silence-steps.value": None,
        "silence-comment.value": comment,
        "silence-by.value": None,
    }

    def made(before: State, after: State) -> bool:
        return len(set(after.silences) - set(before.silences)) == 1

    ok = f"Silenced rule {o.rule_name}"  # then " · run <name> until <when>"
    return Callback("oncall.submit", values, ["silence-create.n_clicks"], ok, effect=made)


def _on_call_click(kind: str, key: str, target: int) -> Callback:
    """A click on an Acknowledge (``alert-ack``) or Expire (``silence-expire``) button."""
    values: dict[str, Any] = {"oncall-changed.data": 0}
    for button, name in (("alert-ack", "alert"), ("silence-expire", "silence")):
        component = {name: target if button == kind else 1, "type": button}
        pattern = _pattern_key({name: ["ALL"], "type": button}, "n_clicks")
        values[pattern] = [(component, 1 if button == kind else 0)]
    changed = [_pattern_key({key: target, "type": kind}, "n_clicks")]
    if kind == "alert-ack":
        return Callback(
            "oncall.act",
            values,
            changed,
            f"Alert {target} acknowledged",
            effect=lambda b, a: a.acks.get(target) is not None,
        )
    return Callback(
        "oncall.act",
        values,
        changed,
        f"Silence {target} expired.",
        effect=lambda b, a: b.silences[target][1] is None and a.silences[target][1] is not None,
    )


def _silences_refresh(w: World, t: str) -> Callback:
    w.fresh_silence(t)  # commented "<target> fresh <n>", n the counter now
    values = {"oncall-changed.data": 1, "alerts-refresh.n_intervals": 1}
    return Callback("oncall.refresh", values, ["oncall-changed.data"], f"{t} fresh {w.counter}")


def _pick(o: Objects) -> Callback:
    box = {"run": o.run_id, "type": "compare-pick"}
    values = {
        '{"run":["ALL"],"type":"compare-pick"}.value': [(box, [o.run_id])],
        '{"run":["ALL"],"type":"compare-pick"}.id': [(box, box)],
        "compare-ticked.data": [],
    }
    return Callback("runs.pick", values, [], "Tick two or more runs")


def _tag_values(**values: Any) -> dict[str, Any]:
    """The runs list's tag controls as the browser sends them: no button clicked."""
    return {
        "runs-tag-click.data": None,
        "runs-tag-save.n_clicks": 0,
        "runs-tag-input.n_submit": None,
        "runs-tag-cancel.n_clicks": 0,
        "runs-tag-editing.data": None,
        "runs-tag-input.value": "",
        "runs-changed.data": 0,
        **values,
    }


def _tag_click(
    component: dict[str, Any], ok: str, effect: Callable[[State, State], bool] | None = None
) -> Callback:
    """A click on a run's "edit tags" button or on a tag's ×, as its click store says it."""
    values = _tag_values(**{"runs-tag-click.data": {"row": component, "clicks": 1}})
    return Callback("runs.tags", values, ["runs-tag-click.data"], ok, effect=effect)


def _tag_save(w: World, o: Objects) -> Callback:
    tags = [f"kept {w.next()}", "second"]
    values = _tag_values(
        **{
            "runs-tag-save.n_clicks": 1,
            "runs-tag-editing.data": o.run_id,
            "runs-tag-input.value": ", ".join(tags),
        }
    )
    return Callback(
        "runs.tags",
        values,
        ["runs-tag-save.n_clicks"],
        f"Tags of {o.run_name}: {', '.join(sorted(tags))}.",
        effect=lambda b, a: a.runs[o.run_id][1] == sorted(tags),
    )


def _tag_removal(w: World, t: str, o: Objects) -> Callback:
    """The × of a tag the target's run is given first (through the API)."""
    tag = f"doomed {w.next()}"
    given = w.http.patch(
        f"{w.server.url}/api/v1/runs/{o.run_id}",
        json={"tags": [tag]},
        headers=w.tenant(t).headers("admin"),
        timeout=30,
    )
    assert given.status_code == 200, given.text
    return _tag_click(
        {"run": o.run_id, "tag": tag, "type": "run-tag-remove"},
        f"Removed tag {tag} from {o.run_name}.",
        effect=lambda b, a: tag in b.runs[o.run_id][1] and tag not in a.runs[o.run_id][1],
    )


def _note_values(**values: Any) -> dict[str, Any]:
    """The runs list's note controls as the browser sends them: no button clicked."""
    return {
        "runs-note-click.data": None,
        "runs-note-save.n_clicks": 0,
        "runs-note-cancel.n_clicks": 0,
        "runs-note-editing.data": None,
        "runs-note-input.value": "",
        "runs-changed.data": 0,
        **values,
    }


def _note_edit(o: Objects) -> Callback:
    button = {"run": o.run_id, "type": "run-note-edit"}
    values = _note_values(**{"runs-note-click.data": {"row": button, "clicks": 1}})
    return Callback("runs.notes", values, ["runs-note-click.data"], f"Note on {o.run_name}")


def _note_save(w: World, o: Objects) -> Callback:
    note = f"note {w.next()}"
    values = _note_values(
        **{
            "runs-note-save.n_clicks": 1,
            "runs-note-editing.data": o.run_id,
            "runs-note-input.value": note,
        }
    )
    return Callback(
        "runs.notes",
        values,
        ["runs-note-save.n_clicks"],
        f"Saved the note on {o.run_name}.",
        effect=lambda b, a: a.runs[o.run_id][4] == note,
    )


def _run_note_values(o: Objects, **values: Any) -> dict[str, Any]:
    """The run page's note controls as the browser sends them: no button clicked."""
    return {
        "run-note-edit.n_clicks": 0,
        "run-note-save.n_clicks": 0,
        "run-note-cancel.n_clicks": 0,
        "run-note-input.value": "",
        "view.data": _view(o.run_id),
        **values,
    }


def _run_note_edit(o: Objects) -> Callback:
    values = _run_note_values(o, **{"run-note-edit.n_clicks": 1})
    return Callback("run_note.edit", values, ["run-note-edit.n_clicks"], '"hidden":false')


def _run_note_save(w: World, o: Objects) -> Callback:
    note = f"page note {w.next()}"
    values = _run_note_values(o, **{"run-note-save.n_clicks": 1, "run-note-input.value": note})
    return Callback(
        "run_note.edit",
        values,
        ["run-note-save.n_clicks"],
        f"Saved the note on {o.run_name}.",
        effect=lambda b, a: a.runs[o.run_id][4] == note,
    )


def _add_column() -> Callback:
    values = {
        "runs-col-add-metric.n_clicks": 1,
        "runs-col-add-config.n_clicks": 0,
        "runs-group.value": None,
        '{"col":["ALL"],"type":"runs-col-remove"}.n_clicks': [],
        '{"col":["ALL"],"type":"runs-sort-col"}.n_clicks': [],
        "runs-group-click.data": None,
        "runs-col-metric.value": "grad/norm/total",
        "runs-col-stat.value": "min",
        "runs-view.data": {},
    }
    return Callback(
        "runs.columns", values, ["runs-col-add-metric.n_clicks"], '"col":["min:grad/norm/total"]'
    )


def _panel_change(w: World, o: Objects, act: str) -> Callback:
    """A panel pinned (``act`` "pin") or an expression panel added ("add") on a page whose
    layout is empty, each time a key of its own: an admin's layout is saved as the project's;
    a reader's is kept on the page, with a note that it was not saved."""
    n = w.next()
    metric = f"grad/norm/layers.{n}"
    if act == "pin":
        key, field, trigger = metric, "pinned", "panel-click.data"
    else:
        key, field, trigger = (
            f"ratio(grad/norm/total, {metric})",
            "expressions",
            "panel-add.n_clicks",
        )
    values = {
        "panel-click.data": {"row": {"act": "pin", "key": key}, "clicks": n}
        if act == "pin"
        else None,
        "panel-add.n_clicks": 1 if act == "add" else 0,
        "panel-expression.n_submit": None,
        "panel-expression.value": key if act == "add" else None,
        "panel-layout.data": {},
        "panel-names.data": {"names": ["grad/norm/total", metric], "version": None},
    }

    def saved(before: State, after: State) -> bool:
        changed = {p: r for p, r in after.workspaces.items() if before.workspaces.get(p) != r}
        return list(changed) == [o.project] and changed[o.project][0][field] == [key]

    shown = json.dumps({field: [key]}, separators=(",", ":"))[1:-1]
    kept = NOT_SAVED.split(":")[0]
    return Callback("run_panels.change", values, [trigger], shown, effect=saved, kept_text=kept)


def _panels_draw(o: Objects) -> Callback:
    """Two panels in view, drawn for the view of the target's run: the second's line is
    `seed`'s ``params/norm/final_norm.weight``."""
    ids = [
        {"key": k, "type": "panel-body"}
        for k in ("grad/norm/total", "params/norm/final_norm.weight")
    ]
    pattern = '{"key":["ALL"],"type":"panel-body"}'
    values = {
        f"{pattern}.children": [(i, "…") for i in ids],
        f"{pattern}.id": [(i, i) for i in ids],
        "panels-seen.data": [i["key"] for i in ids],
        "view-drawn.data": _view(o.run_id),
        "panels-tick.data": None,
        "panels-drawn.data": {},
        "ticks-seen.data": None,
    }
    drawn = '"y":[341.0,341.5,342.0,342.5,343.0]'
    return Callback("run_panels.draw", values, ["panels-seen.data"], drawn, NO_SUCH_RUN)


CallbackRequest = Callable[[World, str, Objects], Callback]
CALLBACK_REQUESTS: dict[str, CallbackRequest] = {
    "open / (the runs list)": lambda w, t, o: _route("/", "", o.run_name),
    "open /runs/<id>": lambda w, t, o: _route(
        f"/runs/{o.run_id}", "", o.run_name, "Nothing at /runs/"
    ),
    "open /alerts?run=<id>": lambda w, t, o: _route(
        "/alerts", f"?run={o.run_id}", o.rule_name, "Not found"
    ),
    "open /rules": lambda w, t, o: _route("/rules", "", o.rule_name),
    "refresh the runs list": lambda w, t, o: Callback(
        "runs.refresh", {"runs-refresh.n_intervals": 1}, ["runs-refresh.n_intervals"], o.run_name
    ),
    "search, filter or sort the runs list": lambda w, t, o: Callback(
        "runs.update_view",
        {"runs-search.value": "run", "runs-view.data": {}},
        ["runs-search.value"],
        '"q":"run"',
    ),
    "open the target's run's tag editor": lambda w, t, o: _tag_click(
        {"run": o.run_id, "type": "run-tag-edit"}, f"Tags of {o.run_name}"
    ),
    "replace the target's run's tags from the editor": lambda w, t, o: _tag_save(w, o),
    "remove a tag from the target's run": lambda w, t, o: _tag_removal(w, t, o),
    "add a metric column to the runs list": lambda w, t, o: _add_column(),
    "open the target's run's note editor": lambda w, t, o: _note_edit(o),
    "set the target's run's note from the editor": lambda w, t, o: _note_save(w, o),
    "open the note editor on the view's run": lambda w, t, o: _run_note_edit(o),
    "set the view's run's note from the run page": lambda w, t, o: _run_note_save(w, o),
    "zoom on an event of the view's run": lambda w, t, o: _zoom(o),
    "draw the view's run": lambda w, t, o: Callback(
        "run.draw", {"view.data": _view(o.run_id)}, [], o.event_text
    ),
    "point the download link at the view's series": lambda w, t, o: Callback(
        "run_download.link", {"view.data": _view(o.run_id)}, [], "export.csv?metric="
    ),
    "refresh the view's run on a tick (metric names, chart, sections)": lambda w, t, o: Callback(
        "run.tick",
        {
            "tick.n_intervals": 30,
            "view.data": _view(o.run_id),
            "layers-pin.data": None,
            "ticks-seen.data": None,
        },
        ["tick.n_intervals"],
        o.metric,
    ),
    "draw the view's run's layers": lambda w, t, o: Callback(
        "run_layers.draw_depth",
        {"depth-family.value": "grad/norm", "depth-log.value": [], "view.data": _view(o.run_id)},
        [],
        "layers.0",
    ),
    "tick runs to compare": lambda w, t, o: _pick(o),
    "pin the depth profile by a click": lambda w, t, o: Callback(
        "run_layers.pin",
        {"layer-heatmap.clickData": {"points": [{"x": 3, "y": "layers.0"}]}},
        ["layer-heatmap.clickData"],
        '{"step":3}',
    ),
    "draw the view's run's layer heatmap": lambda w, t, o: Callback(
        "run_layers.draw_grid",
        {"view-drawn.data": _view(o.run_id), "depth-family.value": "grad/norm"},
        [],
        "layers.0",
    ),
    "say where the profile is pinned": lambda w, t, o: Callback(
        "run_layers.pin_text", {"layers-pin.data": {"step": 3}}, ["layers-pin.data"], "3"
    ),
    "list the view's run's spikes": lambda w, t, o: Callback(
        "run_spikes.draw", {"view-drawn.data": _view(o.run_id)}, [], "grad/norm/total"
    ),
    "zoom to a spike": lambda w, t, o: _spike_zoom(o),
    "list the view's run's transitions": lambda w, t, o: Callback(
        "run_transitions.draw",
        {"view-drawn.data": _view(o.run_id), "transitions-tick.data": None},
        [],
        o.event_text,
    ),
    "zoom to a transition": lambda w, t, o: _transition_zoom(o),
    "draw the view's run's attribution": lambda w, t, o: Callback(
        "run_attribution.draw",
        {
            "view-drawn.data": _view(o.run_id),
            "attribution-family.value": "grad/norm",
            "attribution-by.value": [],
            "attribution-tick.data": None,
        },
        [],
        '"stackgroup":"shares"',
    ),
    "read the view's run's thresholds": lambda w, t, o: Callback(
        "run_aids.read",
        {
            "aids-key.data": {"run": o.run_id},
            "aids-tick.data": None,
            "view.data": _view(o.run_id),
            "overlay-aids.data": None,
        },
        [],
        o.rule_name,
    ),
    "add a derived series": lambda w, t, o: Callback(
        "run_series.add_expression",
        {
            "add-expression.n_clicks": 1,
            "expression.n_submit": None,
            "expression.value": "ratio(grad/norm/total, params/norm/final_norm.weight)",
            "add-series.value": [],
            "add-series.options": [],
            "view.data": _view(o.run_id),
        },
        ["add-expression.n_clicks"],
        "ratio(grad/norm/total, params/norm/final_norm.weight)",
    ),
    "ask the view's run's trainer to stop, with a reason": lambda w, t, o: _control(
        o, "control-stop", "Asked the trainer to stop", lambda b, a: a.events == b.events + 1
    ),
    "list the view's run's control requests": lambda w, t, o: _control(
        o, "control-refresh", '"control-list"'
    ),
    "pin a panel (the project's layout: an admin saves it)": lambda w, t, o: _panel_change(
        w, o, "pin"
    ),
    "add an expression panel (likewise)": lambda w, t, o: _panel_change(w, o, "add"),
    "arrange the panels in their groups": lambda w, t, o: Callback(
        "run_panels.arrange",
        {
            "panel-layout.data": {"pinned": ["grad/norm/layers.0"]},
            "panel-names.data": {"names": ["grad/norm/total", "grad/norm/layers.0"], "version": 1},
            "panel-pages.data": {},
            "panel-arranged.data": None,
        },
        ["panel-layout.data"],
        '"children":"pinned (1)"',
    ),
    "show more panels of a group": lambda w, t, o: Callback(
        "run_panels.more",
        {
            "panel-click.data": {"row": {"act": "more", "key": "grad/norm"}, "clicks": 1},
            "panel-pages.data": {"grad/norm": 2},
        },
        ["panel-click.data"],
        '"data":{"grad/norm":3}',
    ),
    "read the view's run's metric names for its panels": lambda w, t, o: Callback(
        "run_panels.new_metrics",
        {
            "draw-tick.data": 1,
            "ticks-seen.data": {"draw": 7},
            "panel-names.data": {"names": ["grad/norm/total"], "version": None},
            "view.data": _view(o.run_id),
        },
        ["draw-tick.data"],
        o.metric,
    ),
    "draw the view's run's panels in view": lambda w, t, o: _panels_draw(o),
    "pick the compared metric": lambda w, t, o: Callback(
        "compare.update_view",
        {
            "compare-metric.value": "grad/norm/total",
            "compare-view.data": {"runs": [o.run_id], "metric": None, "start": None, "end": None},
        },
        ["compare-metric.value"],
        '"metric":"grad/norm/total"',
    ),
    "draw a comparison": lambda w, t, o: Callback(
        "compare.draw",
        {"compare-view.data": {"runs": [o.run_id], "metric": "grad/norm/total"}},
        [],
        o.run_name,
    ),
    "name the compared runs beside their lines' colours": lambda w, t, o: Callback(
        "compare.title",
        {
            "compare-view.data": {
                "runs": [o.run_id],
                "metric": "grad/norm/total",
                "group_by": "lr",
            },
            "compare-configs.data": {"labels": [o.run_name], "diff": {"lr": [0.001]}},
        },
        ["compare-view.data"],
        f'"className":"swatch","style":{{"background":"{run_color(0)}"}}',
    ),
    "refresh the alerts of a run": lambda w, t, o: Callback(
        "alerts.refresh",
        {"alerts-refresh.n_intervals": 1, "alerts-filter.data": {"run": o.run_id}},
        ["alerts-refresh.n_intervals"],
        o.rule_name,
        "No alerts yet.",
    ),
    "silence the target's rule on its run from the form": lambda w, t, o: _silence_form(w, o),
    "acknowledge the target's firing alert from the table": lambda w, t, o: _on_call_click(
        "alert-ack", "alert", w.firing_alert(t, o)
    ),
    "expire a silence from the table (a fresh one each time)": lambda w, t, o: _on_call_click(
        "silence-expire", "silence", w.fresh_silence(t)
    ),
    "refresh the silences table": lambda w, t, o: _silences_refresh(w, t),
    "show a kind's fields": lambda w, t, o: Callback(
        "rule_form.show_fields", {"rule-kind.value": "spike"}, [], '"display":"none"'
    ),
    "show the form's mode": lambda w, t, o: Callback(
        "rule_form.show_mode", {"rule-editing.data": None}, [], "Create rule"
    ),
    "create a rule": lambda w, t, o: _submit(w, t, o, editing=False),
    "save an edited rule": lambda w, t, o: _submit(w, t, o, editing=True),
    "load a rule into the form": lambda w, t, o: _edit(o),
    "disable a rule": lambda w, t, o: _toggle(w, t),
    "delete a rule": lambda w, t, o: _delete(w, t),
    "test-send a rule (no channels)": lambda w, t, o: Callback(
        "rules.act", *_act("rule-test", o.rule_id), "This rule has no channels to test."
    ),
    "refresh the rules table": lambda w, t, o: Callback(
        "rules.refresh", {"rules-changed.data": 1}, ["rules-changed.data"], o.rule_name
    ),
    "preview the target's rule on its run": lambda w, t, o: Callback(
        "rules.run_preview",
        {"preview-go.n_clicks": 1, "preview-rule.value": o.rule_id, "preview-run.value": o.run_id},
        ["preview-go.n_clicks"],
        "transition(s) over",
    ),
}


def refusal(answer: Any) -> str | None:
    """The text of an error message in a callback's answer (a component whose class names
    ``error``), or None."""
    if isinstance(answer, dict):
        props = answer.get("props")
        if isinstance(props, dict) and "error" in str(props.get("className", "")).split():
            return str(props.get("children"))
        for value in answer.values():
            found = refusal(value)
            if found is not None:
                return found
    elif isinstance(answer, list):
        for value in answer:
            found = refusal(value)
            if found is not None:
                return found
    return None


# --- the test -----------------------------------------------------------------------------


def app_routes(database_url: str) -> set[str]:
    """Every route of the app as ``METHOD /path`` (``WS`` for a websocket), HEAD aside."""
    app = create_app(Settings(database_url=database_url))
    try:
        routes = set()
        for route in iter_route_contexts(app.routes):
            original = route.original_route
            if isinstance(original, WebSocketRoute):
                routes.add(f"WS {route.path_format}")
            elif isinstance(original, Mount):
                routes.add(f"GET {route.path_format}")  # static files
            else:
                routes |= {f"{m} {route.path_format}" for m in route.methods or () if m != "HEAD"}
        return routes
    finally:
        context_of(app).telemetry.close()
        context_of(app).health_probe.close()
        context_of(app).engine.dispose()


def server_callbacks(w: World) -> dict[str, dict[str, Any]]:
    """The dashboard's server-side callbacks, by `callback_key`."""
    listed = w.http.get(
        f"{w.server.url}/_dash-dependencies", headers=_cookie(w.cookies["read"]), timeout=30
    )
    assert listed.status_code == 200
    found = {callback_key(d): d for d in listed.json() if not d.get("clientside_function")}
    assert len(found) == len([d for d in listed.json() if not d.get("clientside_function")])
    return found


def callback_key(dependency: dict[str, Any]) -> str:
    """``first output <- first input``: several callbacks share a first input (the tick,
    the view) or a first output (the view, through ``allow_duplicate``), never both."""
    output = dependency["output"].strip(".").split("...")[0].split("@")[0]
    first = dependency["inputs"][0]
    return f"{output} <- {first['id']}.{first['property']}"


@dataclass
class Findings:
    cells: int = 0
    mismatches: list[str] = field(default_factory=list)

    def check(
        self, row: Row, caller: str, target: str, expected: Expect, got: Expect, why: str
    ) -> None:
        """One cell of the matrix: what the caller got against what the table says."""
        self.cells += 1
        if got != expected:
            self.fail(row, caller, target, f"expected {expected}, got {got}", why)

    def fail(self, row: Row, caller: str, target: str, what: str, why: str) -> None:
        detail = f" ({why})" if why else ""
        self.mismatches.append(f"{row.route} | {row.what} | {caller} on {target}: {what}{detail}")


def targets(row: Row) -> Iterator[tuple[str, Cells]]:
    for target in ("own", "other", "unknown"):
        cells = getattr(row, target)
        if cells is not None:
            yield target, cells


def leaked(w: World, text: str) -> str | None:
    """What of the other project an answer shows, if anything."""
    other = w.objects["other"]
    tag = other.run_name.removeprefix("run ")  # in its run's, rule's and event's names
    for secret in (tag, other.metric, "other fresh", "other form"):
        if secret in text:
            return secret
    return None


def decoded(response: httpx.Response) -> str:
    """The answer's JSON written plainly, or its text: Dash writes "/" as "\\u002f", so a
    metric's name (``other/only``) is only seen in a callback's answer decoded."""
    try:
        return json.dumps(response.json(), ensure_ascii=False)
    except ValueError:
        return response.text


def api_cell(
    w: World, findings: Findings, row: Row, caller: str, target: str, want: Expect
) -> None:
    objects = UNKNOWN if target == "unknown" else w.objects[target]
    request = API_REQUESTS[row.what](w, target, objects)
    before = read_state(w.sessions)
    response = send(w, request, caller, bearer=True, cookie=False)
    why = "" if response.is_success else response.text[:120]
    leak = leaked(w, response.text)
    if leak is not None:
        findings.fail(row, caller, target, "a leak", f"answer shows {leak!r}")
    if (request.method == "GET" or not response.is_success) and read_state(w.sessions) != before:
        findings.fail(row, caller, target, "the database changed", f"{response.status_code}")
    findings.check(row, caller, target, want, response.status_code, why)


def site_cell(
    w: World, findings: Findings, row: Row, caller: str, target: str, want: Expect
) -> None:
    if row.route.startswith("WS "):
        objects = UNKNOWN if target == "unknown" else w.objects[target]
        path = WEBSOCKET_PATHS[row.what](objects)
        findings.check(row, caller, target, want, websocket_status(w, caller, path), "")
        return
    request = SITE_REQUESTS[row.what](w, caller, w.objects[target])
    bearer = request.path.startswith(BEARER_PATHS)
    response = send(w, request, caller, bearer=bearer, cookie=True)
    why = response.headers.get("location", "") if response.status_code == 303 else ""
    if row.route.endswith(" /login") and "token" in (request.params or request.form or {}):
        # A login answers with a session cookie exactly when it lets the caller in.
        opened = "normwatch_session" in response.cookies
        if opened != (response.status_code == 303):
            findings.fail(row, caller, target, "a session cookie without a login", str(opened))
    leak = leaked(w, response.text)
    if leak is not None:
        findings.fail(row, caller, target, "a leak", f"answer shows {leak!r}")
    findings.check(row, caller, target, want, response.status_code, why)


def callback_cell(
    w: World, findings: Findings, row: Row, caller: str, target: str, want: Expect
) -> None:
    callback = CALLBACK_REQUESTS[row.what](w, target, w.objects[target])
    assert callback.name == row.route, (callback.name, row.route)
    body = callback_body(
        w.callbacks[CALLBACK_KEYS[callback.name]], callback.values, callback.changed
    )
    before = read_state(w.sessions)
    w.requests += 1
    response = w.http.post(
        f"{w.server.url}/_dash-update-component",
        json=body,
        headers=_cookie(w.cookies[caller]),
        timeout=30,
    )
    after = read_state(w.sessions)
    text = response.text
    got: Expect = response.status_code
    why = text[:160] if response.status_code >= 400 else ""
    if response.status_code in (200, 204):
        answer = response.json() if text else {}
        compact = json.dumps(answer, separators=(",", ":"))
        refused = refusal(answer)
        changed = after != before
        if refused is not None:
            got, why = REFUSED, refused
            if changed:
                got = "refused, with a change"
        elif want == KEPT:
            # The change on the page (what an admin's shows) and the note why it is not saved.
            note = callback.kept_text is not None and callback.kept_text in compact
            shows = note and callback.ok_text in compact
            got = KEPT if shows and not changed else "an answer"
            why = (
                ""
                if got == KEPT
                else f"shows {callback.ok_text!r} and {callback.kept_text!r}: {shows}; "
                f"db changed: {changed}"
            )
        elif want == OK:
            effect = callback.effect
            shows = callback.ok_text in compact
            done = effect(before, after) if effect is not None else not changed
            got = OK if shows and done else "an answer"
            why = (
                "" if got == OK else f"shows {callback.ok_text!r}: {shows}; db as expected: {done}"
            )
        else:
            hidden = callback.hidden_text is None or callback.hidden_text in compact
            got = HIDDEN if hidden and not changed else "an answer"
            why = "" if got == HIDDEN else compact[:160]
    leak = leaked(w, text) or leaked(w, decoded(response))
    if leak is not None:
        findings.fail(row, caller, target, "a leak", f"answer shows {leak!r}")
    findings.check(row, caller, target, want, got, why)


def test_authorization_matrix(world: World, fresh_pg_url: str) -> None:
    w = world
    w.callbacks = server_callbacks(w)

    # The tables cover every route and every callback: a new one needs its row.
    tabled = {row.route for row in API + SITE} | {"POST /_dash-update-component"}
    assert tabled == app_routes(fresh_pg_url)
    assert set(API_REQUESTS) == {row.what for row in API}
    assert set(SITE_REQUESTS) == {row.what for row in SITE if not row.route.startswith("WS ")}
    assert set(WEBSOCKET_PATHS) == {row.what for row in SITE if row.route.startswith("WS ")}
    assert set(CALLBACK_REQUESTS) == {row.what for row in CALLBACKS}
    assert {row.route for row in CALLBACKS} == set(CALLBACK_KEYS)
    assert set(CALLBACK_KEYS.values()) == set(w.callbacks)

    findings = Findings()
    for table, cell in ((API, api_cell), (SITE, site_cell), (CALLBACKS, callback_cell)):
        for row in table:
            for target, cells in targets(row):
                for caller, want in zip(CALLERS, cells, strict=True):
                    cell(w, findings, row, caller, target, want)

    # The scrape token itself opens /metrics (API tokens do not, above).
    scrape = w.http.get(
        f"{w.server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert scrape.status_code == 200

    rows = len(API) + len(SITE) + len(CALLBACKS)
    size = (
        f"authorization matrix: {rows} rows (API {len(API)}, other routes {len(SITE)}, "
        f"callbacks {len(CALLBACKS)}) x {len(CALLERS)} callers x own/other/unknown targets "
        f"= {findings.cells} cells, {w.requests} requests"
    )
    print(size)
    assert not findings.mismatches, size + "\n" + "\n".join(findings.mismatches)
