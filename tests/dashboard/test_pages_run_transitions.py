"""The run page's transitions section: the table, the window it is fitted on, and the zoom
a row makes; with a fake data object, then with the dashboard's real data on Postgres."""

from __future__ import annotations

import doctest
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages import run_transitions
from normwatch.dashboard.pages.run_transitions import (
    HEADER,
    NO_METRICS,
    NO_TRANSITIONS,
    TOO_FEW_TO_DETECT,
    TRANSITION_ROW,
    draw_transitions,
    level_text,
    section,
    transition_table,
    zoom_to_transition,
)
from normwatch.dashboard.pages.run_view import RunView
from normwatch.server.analytics.transitions import Fit
from normwatch.server.auth import Principal
from normwatch.server.errors import Invalid, RunNotFound
from normwatch.server.schemas import RunOut
from normwatch.server.services.transitions import Transition, Transitions
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, header, nodes, rows, text
from .seed import Viewers, create_run, post_event, post_points, viewers

WHO = Principal(token_id=1, project_id=1, project="p", scope="read")
RUN = "r1"
GRAD, PARAM = "grad/norm/total", "params/norm/final_norm.weight"


def fit(before: float, after: float, ratio: float | None, levels: tuple[float, float]) -> Fit:
    return Fit(
        at=1,
        window=1,
        slope_before=before,
        slope_after=after,
        slope_before_stderr=0.0,
        slope_after_stderr=0.0,
        ratio=ratio,
        level_before=levels[0],
        level_after=levels[1],
        n_before=2,
        n_after=2,
        before_segment=((0, 1.0), (1, 2.0)),
        after_segment=((1, 2.0), (2, 3.0)),
    )


FOUND = Transitions(
    window=4750,
    transitions=[
        Transition(
            81_000,
            "event",
            "near-dropless EP routing",
            {
                GRAD: fit(0.0045, 1.3, None, (0.9253, 0.9165)),
                PARAM: fit(1.967, 7.503, 3.8146, (342.0841, 342.0844)),
            },
        ),
        Transition(
            40_210,
            "detected",
            f"change in {PARAM}",
            {PARAM: fit(2.0, 3.0, 1.5, (200.0, 201.5))},
            detected_in=PARAM,
            score=120.0,
        ),
        Transition(0, "event", "z-loss 1e-4"),
    ],
)


def test_doctests() -> None:
    failed, tried = doctest.testmod(run_transitions)
    assert (failed, tried > 0) == (0, True)


@dataclass
class FakeTransitions:
    found: Transitions = field(default_factory=lambda: FOUND)
    refusal: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def run(self, who: Principal, run_id: str) -> RunOut:
        if run_id != RUN:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)
        now = "2025-01-01T00:00:00Z"
        return RunOut.model_validate(
            {
                "id": RUN,
                "project": "p",
                "name": "n",
                "status": "running",
                "segment": 1,
                "config": {},
                "tags": [],
                "last_step": 94_999,
                "last_seen": now,
                "created_at": now,
            }
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
        if run_id != RUN:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)
        self.calls.append({"metrics": list(metrics), "start": start, "end": end, "window": window})
        if self.refusal:
            raise Invalid(self.refusal)
        return self.found


# --- pure parts -----------------------------------------------------------------------------


def test_section_holds_the_table_and_its_tick() -> None:
    drawn = section()
    ids = {node["props"].get("id") for node in nodes(drawn)}
    assert {"transition-table", "transitions-tick"} <= ids
    assert find(drawn, "Dropdown") == []


def test_level_text() -> None:
    assert [level_text(a, b) for a, b in ((1.0, 1.0), (1.0, 0.5), (240.4, 240.42))] == [
        "0",
        "-0.5",
        "+0.02",
    ]
    assert level_text(None, 1.0) == level_text(1.0, "2") == level_text(True, 1.0) == "—"


def test_the_table_one_clickable_row_a_transition_a_line_a_metric() -> None:
    table = transition_table(FOUND, [GRAD, PARAM], None)
    assert header(table) == HEADER
    assert rows(table) == [
        [
            "81,000",
            "event",
            "near-dropless EP routing",
            GRAD + PARAM,
            "0.0045 → 1.3" + "1.967 → 7.503",
            "—" + "×3.815",
            "-0.0088" + "+0.0003",
        ],
        ["40,210", "detected", f"change in {PARAM}", PARAM, "2 → 3", "×1.5", "+1.5"],
        ["0", "event", "z-loss 1e-4", "—", "", "", ""],
    ]
    ids = [row["id"] for row in find(table, "Tr") if "id" in row]
    assert ids == [{"type": TRANSITION_ROW, "step": s} for s in (81_000, 40_210, 0)]
    assert all(row["n_clicks"] == 0 for row in find(table, "Tr") if "id" in row)
    assert (
        "Slopes fitted on 4,750 steps either side of each step; the level change compares "
        "the levels measured on the points nearest it." in text(table)
    )


def test_the_table_lines_only_the_charted_metrics_and_marks_the_focus() -> None:
    table = transition_table(FOUND, [PARAM], 81_000)
    assert [row[3] for row in rows(table)] == [PARAM, PARAM, "—"]
    classes = [row.get("className") for row in find(table, "Tr") if "id" in row]
    assert classes == ["transition focused", "transition", "transition"]


def test_the_table_past_its_limit_and_without_transitions() -> None:
    limited = transition_table(FOUND, [GRAD], None, limit=1)
    assert len(rows(limited)) == 1
    assert "… and 2 more: zoom the chart in to list them." in text(limited)
    assert text(transition_table(Transitions(5, []), [GRAD], None)) == NO_TRANSITIONS
    # A zoom too short to look for changes of trend says so, with or without events.
    unlooked = text(transition_table(Transitions(5, [], detecting=False), [GRAD], None))
    assert unlooked == f"{NO_TRANSITIONS} {TOO_FEW_TO_DETECT}"
    events_only = Transitions(5, FOUND.transitions[2:], detecting=False)
    assert text(transition_table(events_only, [GRAD], None)).endswith(TOO_FEW_TO_DETECT)


# --- drawing, with a fake -----------------------------------------------------------------


def test_draw_transitions_reads_the_charted_metrics_over_the_views_range() -> None:
    data = FakeTransitions()
    view = RunView(RUN, GRAD, PARAM, 1000, 90_000, extra=("train/loss",))
    table = draw_transitions(data, WHO, view)
    assert data.calls == [
        {"metrics": [GRAD, PARAM, "train/loss"], "start": 1000, "end": 90_000, "window": None}
    ]
    assert len(rows(table)) == 3


def test_draw_transitions_of_a_focused_view_fits_the_charts_window() -> None:
    data = FakeTransitions()
    view = RunView(RUN, GRAD, PARAM, 78_626, 83_374, focus=81_000)
    draw_transitions(data, WHO, view)
    assert data.calls[0]["window"] == 2_374


def test_draw_transitions_of_no_metric_no_run_or_a_refused_one() -> None:
    assert text(draw_transitions(FakeTransitions(), WHO, RunView(RUN))) == NO_METRICS
    assert text(draw_transitions(FakeTransitions(), WHO, RunView("theirs", GRAD))) == ""
    assert text(draw_transitions(FakeTransitions(), WHO, None)) == ""
    refused = FakeTransitions(refusal="share takes 2 arguments, got 1 in 'share(a)'")
    assert text(draw_transitions(refused, WHO, RunView(RUN, "share(a)"))) == refused.refusal


# --- a click on a row ---------------------------------------------------------------------


def test_a_click_on_a_row_zooms_around_its_step_and_focuses_it() -> None:
    view = RunView(RUN, GRAD, PARAM, log=True)
    row = {"type": TRANSITION_ROW, "step": 81_000}
    zoomed = zoom_to_transition(FakeTransitions(), WHO, view, row, True)
    # As the event's zoom button: a 40th of the run either side of the step.
    assert zoomed == RunView(RUN, GRAD, PARAM, 78_626, 83_374, True, focus=81_000)


@pytest.mark.parametrize(
    ("trigger", "was_clicked"),
    [
        ({"type": TRANSITION_ROW, "step": 81_000}, False),  # a redrawn table, no click
        ({"type": TRANSITION_ROW, "step": -5}, True),
        ({"type": TRANSITION_ROW, "step": "81000"}, True),
        ({"type": TRANSITION_ROW, "step": True}, True),
        ({"type": "spike-row", "step": 81_000}, True),
        ("transition-table", True),
        (None, True),
    ],
)
def test_anything_but_a_click_on_a_row_changes_nothing(trigger: Any, was_clicked: bool) -> None:
    view = RunView(RUN, GRAD)
    assert zoom_to_transition(FakeTransitions(), WHO, view, trigger, was_clicked) is None


def test_a_click_for_no_run_of_the_viewers_project_changes_nothing() -> None:
    row = {"type": TRANSITION_ROW, "step": 81_000}
    assert zoom_to_transition(FakeTransitions(), WHO, RunView("theirs", GRAD), row, True) is None
    assert zoom_to_transition(FakeTransitions(), WHO, None, row, True) is None


# --- the real data ----------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    mine: Viewers
    run: str
    their_run: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    rng = np.random.default_rng(5)
    steps = np.arange(6000)
    param = 78.0 + 0.02 * steps + 0.03 * np.clip(steps - 3000, 0, None)
    metrics = {
        PARAM: (param + 0.05 * rng.standard_normal(6000)).tolist(),
        GRAD: (1.0 + 0.01 * rng.standard_normal(6000)).tolist(),
    }
    run = create_run(pg_server, mine, "transitions")
    post_points(pg_server, mine, run, steps.tolist(), metrics)
    post_event(pg_server, mine, run, 3000, "routing change", "config")
    their_run = create_run(pg_server, theirs, "theirs")
    post_points(pg_server, theirs, their_run, steps.tolist(), metrics)
    return World(viewers(dashboard_sessions, mine), run, their_run)


def test_the_real_transitions(world: World, dashboard_data: DashboardData) -> None:
    table = draw_transitions(dashboard_data, world.mine.read, RunView(world.run, GRAD, PARAM))
    first = rows(table)[0]
    assert first[:4] == ["3,000", "event", "routing change", GRAD + PARAM]
    ratio = first[5].split("×")
    assert ratio[0] == "—" and len(ratio[1]) == 5 and abs(float(ratio[1]) - 2.5) < 0.05
    zoomed = RunView(world.run, GRAD, PARAM, 2000, 4000, focus=3000)
    found = dashboard_data.transitions(
        world.mine.read, world.run, [PARAM], start=2000, end=4000, window=1000
    )
    assert found.window == 1000
    (event,) = [t for t in found.transitions if t.source == "event"]
    assert event.fits[PARAM].ratio == pytest.approx(2.5, rel=0.02)
    assert rows(draw_transitions(dashboard_data, world.mine.read, zoomed))[0][0] == "3,000"


def test_the_transitions_of_another_projects_run(
    world: World, dashboard_data: DashboardData
) -> None:
    with pytest.raises(RunNotFound):
        dashboard_data.transitions(world.mine.read, world.their_run, [GRAD], start=None, end=None)
    view = RunView(world.their_run, GRAD)
    assert text(draw_transitions(dashboard_data, world.mine.read, view)) == ""
    row = {"type": TRANSITION_ROW, "step": 3000}
    assert zoom_to_transition(dashboard_data, world.mine.read, view, row, True) is None


def test_a_malformed_expression_is_refused_with_its_reason(
    world: World, dashboard_data: DashboardData
) -> None:
    table = draw_transitions(dashboard_data, world.mine.read, RunView(world.run, "ratio(a"))
    assert text(table) == "ratio( at position 0 of 'ratio(a' is not closed"
