"""The run page's spikes section: the spike table, the shares of steps in spikes, the
lead-lag pairs and the zoom a spike's row makes, called with a fake data object; then with
the dashboard's real data on Postgres, and crafted row clicks through the real server."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.run_spikes import (
    ALSO,
    MIN_PAD,
    NO_PAIRS,
    NO_SPIKES,
    SPIKE_ROW,
    THRESHOLDS,
    SpikeZoom,
    draw_spikes,
    fractions_table,
    lead_lag_table,
    percent,
    section,
    spike_metrics,
    spike_table,
    spike_window,
    spikes_due,
    steps_text,
    zoom_to_spike,
)
from normwatch.dashboard.pages.run_view import MAX_STEP, RunView
from normwatch.server.analytics.spikes import THRESHOLD, LeadLag
from normwatch.server.auth import Principal
from normwatch.server.errors import Invalid, RunNotFound
from normwatch.server.services.analytics import MoreAt, SpikeReport
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, header, nodes, rows, text
from .seed import Viewers, create_run, post_points, viewers

WHO = Principal(token_id=1, project_id=1, project="p", scope="read")
RUN = "r1"
UPDATES, LOSS, GRAD = "updates/norm/total", "train/loss", "grad/norm/total"
FAMILIES = [{"label": f, "value": f} for f in ("grad/norm", "updates/norm")]


def spike(metric: str, start: int, peak: int, end: int, **more: Any) -> dict[str, Any]:
    found = {
        "metric": metric,
        "start": start,
        "peak": peak,
        "peak_value": 2.5,
        "end": end,
        "magnitude": 2.0,
        "baseline": 1.25,
        "recovered": True,
    }
    return {**found, **more}


SPIKES = [
    spike(UPDATES, 1000, 1000, 1001, peak_value=2.001, magnitude=2.0008),
    spike(LOSS, 1008, 1011, 1012, peak_value=3.0024, magnitude=1.19),
    spike(GRAD, 1900, 1950, 1999, peak_value=1e6, magnitude="Infinity", recovered=False),
]
PAIRS = [
    LeadLag(UPDATES, LOSS, 8.0, 3, 1),
    LeadLag(LOSS, UPDATES, None, 0, 3),
    LeadLag(UPDATES, GRAD, 4.5, 2, 2),
    LeadLag(GRAD, LOSS, 8.0, 3, 0),
]
REPORT = SpikeReport(
    SPIKES, {GRAD: 0.05, LOSS: 0.004, UPDATES: 0.0004}, {GRAD: 0.5, LOSS: 0.0, UPDATES: 1.0}, PAIRS
)


@dataclass
class FakeSpikes:
    report: SpikeReport = REPORT
    refusal: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def spike_report(
        self,
        who: Principal,
        run_id: str,
        metrics: Sequence[str],
        *,
        optional: Sequence[str] = (),
        start: int | None,
        end: int | None,
        threshold: float = THRESHOLD,
    ) -> SpikeReport:
        if run_id != RUN:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)
        self.calls.append(
            {
                "metrics": list(metrics),
                "optional": list(optional),
                "start": start,
                "end": end,
                "threshold": threshold,
            }
        )
        if self.refusal:
            raise Invalid(self.refusal)
        return self.report


# --- pure parts -----------------------------------------------------------------------------


def test_section_holds_the_three_parts_and_no_picker() -> None:
    drawn = section()
    ids = {node["props"].get("id") for node in nodes(drawn)}
    assert {"spike-table", "spike-fractions", "lead-lag", "spikes-tick"} <= ids
    assert find(drawn, "Dropdown") == []  # the run page's pickers stay its own three
    [threshold] = find(drawn, "RadioItems")
    assert threshold["id"] == "spike-threshold" and threshold["value"] == THRESHOLD
    assert [option["value"] for option in threshold["options"]] == list(THRESHOLDS)


@pytest.mark.parametrize(
    ("query", "value"),
    [("4", 4.0), ("10", 10.0), ("3.0", 3.0), (None, THRESHOLD), ("7", THRESHOLD), ("x", THRESHOLD)],
)
def test_section_opens_at_the_urls_threshold_if_offered(query: str | None, value: float) -> None:
    [threshold] = find(section(query), "RadioItems")
    assert threshold["value"] == value


def test_the_section_says_how_many_more_a_lower_threshold_finds() -> None:
    more = replace(REPORT, threshold=10.0, more_at=MoreAt(4.0, 2, {LOSS: 2, GRAD: 0}))
    table, _, _ = draw_spikes(FakeSpikes(report=more), WHO, RunView(RUN, GRAD), 10)
    assert text(table).endswith("2 more at 4 SD: lower the threshold to list them.")
    assert len(rows(table)) == len(SPIKES)
    plain, _, _ = draw_spikes(FakeSpikes(), WHO, RunView(RUN, GRAD))
    assert "more at" not in text(plain)


@pytest.mark.parametrize(
    ("view", "charted", "also"),
    [
        (
            RunView(RUN, GRAD, "params/norm/final_norm.weight"),
            [GRAD, "params/norm/final_norm.weight"],
            list(ALSO),
        ),
        (RunView(RUN, LOSS, ""), [LOSS], [UPDATES]),
        (RunView(RUN, UPDATES, LOSS), [UPDATES, LOSS], []),
        (RunView(RUN), [], list(ALSO)),
    ],
)
def test_spike_metrics(view: RunView, charted: list[str], also: list[str]) -> None:
    assert spike_metrics(view) == (charted, also)


def test_spikes_due_only_for_the_latest_steps_every_few_ticks() -> None:
    assert spikes_due(RunView(RUN), 10) and spikes_due(RunView(RUN, start=5), 20)
    assert not spikes_due(RunView(RUN), 9)
    assert not spikes_due(RunView(RUN, start=5, end=9), 10)
    assert not spikes_due(None, 10) and not spikes_due(RunView(RUN), None)


@pytest.mark.parametrize(
    ("start", "end", "window"),
    [
        (1008, 1012, (1008 - MIN_PAD, 1012 + MIN_PAD)),
        (1000, 1100, (800, 1300)),
        (10, 12, (0, 62)),
        (MAX_STEP - 10, MAX_STEP, (MAX_STEP - 10 - MIN_PAD, MAX_STEP)),
    ],
)
def test_spike_window(start: int, end: int, window: tuple[int, int]) -> None:
    assert spike_window(start, end) == window


def test_percent_and_steps_text() -> None:
    assert [percent(f) for f in (0.0, 0.0009, 0.001, 0.0523, 1.0)] == [
        "0%",
        "<0.1%",
        "0.1%",
        "5.2%",
        "100.0%",
    ]
    assert [steps_text(n) for n in (0, 1, 4, 1200)] == [
        "0 steps",
        "1 step",
        "4 steps",
        "1,200 steps",
    ]


def test_spike_table_one_clickable_row_a_spike() -> None:
    table = spike_table(SPIKES)
    assert header(table) == [
        "metric",
        "start",
        "peak",
        "peak value",
        "magnitude",
        "recovery end",
        "duration",
    ]
    assert rows(table) == [
        [UPDATES, "1,000", "1,000", "2.001", "2.001×", "1,001", "1 step"],
        [LOSS, "1,008", "1,011", "3.002", "1.19×", "1,012", "4 steps"],
        [GRAD, "1,900", "1,950", "1e6", "inf", "not recovered", "≥ 99 steps"],
    ]
    ids = [row["id"] for row in find(table, "Tr") if "id" in row]
    assert ids[1] == {"type": SPIKE_ROW, "metric": LOSS, "start": 1008, "peak": 1011, "end": 1012}
    assert all(row["n_clicks"] == 0 for row in find(table, "Tr") if "id" in row)


def test_spike_table_without_spikes_and_past_its_limit() -> None:
    assert text(spike_table([])) == NO_SPIKES
    many = [spike(LOSS, 100 * i, 100 * i, 100 * i + 1) for i in range(5)]
    limited = spike_table(many, limit=3)
    assert len(rows(limited)) == 3
    assert "… and 2 more: zoom the chart in to list them." in text(limited)


def test_fractions_table_over_the_run_and_the_visible_range() -> None:
    table = fractions_table(REPORT)
    assert rows(table) == [
        [GRAD, "1", "5.0%", "50.0%"],
        [LOSS, "1", "0.4%", "0%"],
        [UPDATES, "1", "<0.1%", "100.0%"],
    ]
    whole = SpikeReport([], {LOSS: 0.0}, None, [])
    assert rows(fractions_table(whole)) == [[LOSS, "0", "0%", "—"]]
    assert text(fractions_table(SpikeReport([], {}, None, []))) == "No metric to look at."


def test_lead_lag_table_lists_the_pairs_that_were_followed_most_first() -> None:
    table = lead_lag_table(REPORT)
    assert header(table) == ["leader → follower", "median lag (steps)", "followed", "not followed"]
    assert rows(table) == [
        [f"{GRAD} → {LOSS}", "8", "3", "0"],
        [f"{UPDATES} → {LOSS}", "8", "3", "1"],
        [f"{UPDATES} → {GRAD}", "4.5", "2", "2"],
    ]
    assert text(lead_lag_table(SpikeReport([], {}, None, [PAIRS[1]]))) == NO_PAIRS


# --- drawing, with a fake -----------------------------------------------------------------


def test_draw_spikes_reads_the_charted_metrics_and_the_views_range() -> None:
    data = FakeSpikes()
    view = RunView(RUN, GRAD, "params/norm/final_norm.weight", 900, 2000)
    table, fractions, pairs = draw_spikes(data, WHO, view)
    assert data.calls == [
        {
            "metrics": [GRAD, "params/norm/final_norm.weight"],
            "optional": list(ALSO),
            "start": 900,
            "end": 2000,
            "threshold": THRESHOLD,
        }
    ]
    assert [row[0] for row in rows(table)] == [UPDATES, LOSS, GRAD]
    assert len(rows(fractions)) == 3 and len(rows(pairs)) == 3


def test_draw_spikes_asks_for_the_chosen_threshold_and_only_an_offered_one() -> None:
    data = FakeSpikes()
    for chosen in (4, "4", None, 0.5, 10, "7"):
        draw_spikes(data, WHO, RunView(RUN, GRAD), chosen)
    assert [call["threshold"] for call in data.calls] == [4, 4, *[THRESHOLD] * 2, 10, THRESHOLD]


def test_draw_spikes_of_no_run_or_a_refused_metric() -> None:
    for view in (RunView("theirs", GRAD), None):
        drawn = draw_spikes(FakeSpikes(), WHO, view)
        assert [text(part) for part in drawn] == ["", "", ""]
    refused = FakeSpikes(refusal="this analysis would read more than 20,000,000 stored points")
    table, fractions, pairs = draw_spikes(refused, WHO, RunView(RUN, GRAD))
    assert text(table) == refused.refusal and text(fractions) == text(pairs) == ""


# --- a click on a spike ---------------------------------------------------------------------


def row_id(metric: str, start: Any, peak: Any, end: Any) -> dict[str, Any]:
    return {"type": SPIKE_ROW, "metric": metric, "start": start, "peak": peak, "end": end}


def test_a_click_on_a_spike_zooms_to_it_and_pins_its_peak() -> None:
    view = RunView(RUN, GRAD, LOSS, log=True)
    zoom = zoom_to_spike(view, row_id(LOSS, 1008, 1011, 1012), True, FAMILIES)
    # Pinned to its peak, its baseline ending where it starts ("× baseline").
    pin = {"step": 1011, "since": 1008}
    assert zoom == SpikeZoom(RunView(RUN, GRAD, LOSS, 958, 1062, True), pin, None)
    # An update-norm spike shows the per-layer update norms, when the run logs them.
    zoom = zoom_to_spike(view, row_id(UPDATES, 1000, 1000, 1001), True, FAMILIES)
    assert zoom is not None and zoom.family == "updates/norm"
    zoom = zoom_to_spike(view, row_id(UPDATES, 1000, 1000, 1001), True, FAMILIES[:1])
    assert zoom is not None and zoom.family is None


@pytest.mark.parametrize(
    ("trigger", "was_clicked"),
    [
        (row_id(LOSS, 1008, 1011, 1012), False),  # a redrawn table, no click
        (row_id(LOSS, 1012, 1011, 1008), True),
        (row_id(LOSS, -1, 0, 5), True),
        (row_id(LOSS, True, 1, 5), True),
        (row_id(LOSS, 1, 1, 2**70), True),
        (row_id(LOSS, "1", 1, 5), True),
        ({**row_id(LOSS, 1, 1, 5), "metric": {"$ne": 1}}, True),
        ("spike-table", True),
        (None, True),
    ],
)
def test_anything_but_a_click_on_a_spike_changes_nothing(trigger: Any, was_clicked: bool) -> None:
    assert zoom_to_spike(RunView(RUN, GRAD), trigger, was_clicked, "not options") is None


def test_a_click_without_a_view_changes_nothing() -> None:
    assert zoom_to_spike(None, row_id(LOSS, 1, 1, 5), True, FAMILIES) is None


# --- the real data ----------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    mine: Viewers
    run: str
    bare_run: str
    their_run: str


def seeded() -> dict[str, list[float]]:
    """Update-norm spikes 8 steps before loss spikes (one without), as the API test seeds."""
    rng = np.random.default_rng(3)
    n = 3000
    update = 1.0 + 0.01 * rng.standard_normal(n)
    loss = 3.0 - np.arange(n) / n + 0.005 * rng.standard_normal(n)
    for at in (500, 1100, 1700, 2300):
        update[at] *= 2.0
        loss[at + 8 : at + 12] += 0.5
    update[2700] *= 2.0
    return {UPDATES: update.tolist(), LOSS: loss.tolist(), GRAD: [1.0] * n}


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    metrics = seeded()
    run = create_run(pg_server, mine, "spiky")
    post_points(pg_server, mine, run, range(3000), metrics)
    bare_run = create_run(pg_server, mine, "grad-only")
    post_points(pg_server, mine, bare_run, range(3000), {GRAD: metrics[GRAD]})
    their_run = create_run(pg_server, theirs, "theirs")
    post_points(pg_server, theirs, their_run, range(3000), metrics)
    return World(viewers(dashboard_sessions, mine), run, bare_run, their_run)


def test_the_real_spikes_and_which_led(world: World, dashboard_data: DashboardData) -> None:
    table, fractions, pairs = draw_spikes(dashboard_data, world.mine.read, RunView(world.run, GRAD))
    listed = [(row[0], row[1]) for row in rows(table)]
    expected = [(UPDATES, f"{at:,}") for at in (500, 1100, 1700, 2300, 2700)]
    expected += [(LOSS, f"{at + 8:,}") for at in (500, 1100, 1700, 2300)]
    assert sorted(listed) == sorted(expected)
    assert [row[0] for row in rows(fractions)] == [GRAD, LOSS, UPDATES]
    assert rows(fractions)[0][1:] == ["0", "0%", "—"]
    assert rows(pairs) == [[f"{UPDATES} → {LOSS}", "8", "4", "1"]]
    zoomed = RunView(world.run, GRAD, start=1000, end=1999)
    table, fractions, _ = draw_spikes(dashboard_data, world.mine.read, zoomed)
    assert sorted(row[1] for row in rows(table)) == ["1,100", "1,108", "1,700", "1,708"]
    assert rows(fractions)[1][3] != "—"


def test_the_loss_and_update_norm_only_when_the_run_logs_them(
    world: World, dashboard_data: DashboardData
) -> None:
    report = dashboard_data.spike_report(
        world.mine.read, world.bare_run, [GRAD], optional=ALSO, start=None, end=None
    )
    assert report.fraction_in_spikes == {GRAD: 0.0} and report.spikes == []
    with pytest.raises(RunNotFound):
        dashboard_data.spike_report(world.mine.read, world.their_run, [GRAD], start=None, end=None)
    drawn = draw_spikes(dashboard_data, world.mine.read, RunView(world.their_run, GRAD))
    assert [text(part) for part in drawn] == ["", "", ""]


def test_a_malformed_expression_is_refused_with_its_reason(
    world: World, dashboard_data: DashboardData
) -> None:
    table, _, _ = draw_spikes(dashboard_data, world.mine.read, RunView(world.run, "ratio(a"))
    assert rows(table) == []
    assert text(table) == "ratio( at position 0 of 'ratio(a' is not closed"
