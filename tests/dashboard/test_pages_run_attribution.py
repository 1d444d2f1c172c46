"""The run page's attribution section: which families have a total, the stacked shares, the
sum check; with a fake data object, then with the dashboard's real data on Postgres."""

from __future__ import annotations

import doctest
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard import attribution as attribution_module
from normwatch.dashboard.attribution import (
    MISMATCH_RED,
    attribution_families,
    attribution_figure,
    sum_check_text,
)
from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.run_attribution import (
    COLUMNS,
    NO_TOTAL,
    draw_attribution,
    section,
)
from normwatch.dashboard.pages.run_view import RunView
from normwatch.server.auth import Principal
from normwatch.server.errors import Invalid, RunNotFound
from normwatch.server.services.attribution import Attribution
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find
from .seed import Viewers, create_run, post_points, viewers

WHO = Principal(token_id=1, project_id=1, project="p", scope="read")
RUN = "r1"
NAMES = ["grad/norm/total", "grad/norm/embed", "grad/norm/lm_head", "params/norm/total"]
SHARES = Attribution(
    "grad/norm",
    ["embedding", "head"],
    [0, 10, 20],
    [[0.2, 0.2, 0.1], [0.8, 0.8, 0.5]],
    [1.0, 1.0, 0.6],
    [20],
    0.01,
)


def test_doctests() -> None:
    failed, tried = doctest.testmod(attribution_module)
    assert (failed, tried > 0) == (0, True)


@pytest.mark.parametrize(
    ("names", "families"),
    [
        (NAMES, ["grad/norm"]),
        (
            [
                f"{f}/{p}"
                for f in ("params/norm", "updates/norm", "grad/norm")
                for p in ("total", "a")
            ],
            ["grad/norm", "updates/norm", "params/norm"],
        ),
        (["grad/norm/total"], []),
        (["grad/norm/embed", "grad/norm/lm_head"], []),
        (["opt/x/total", "opt/x/a"], []),
        ([], []),
    ],
)
def test_attribution_families(names: list[str], families: list[str]) -> None:
    assert attribution_families(names) == families


def test_sum_check_text() -> None:
    assert sum_check_text([], [], 0.01) == ""
    assert sum_check_text([5], [], 0.01) == "parts add up to the total (±1 %) at all 1 steps drawn"
    assert sum_check_text(list(range(0, 5000, 10)), [1200, 30], 0.005) == (
        "parts do not add up to the total (±0.5 %) at 2 of 500 steps drawn, first at 30"
    )


def test_the_figure_stacks_the_groups_and_marks_the_mismatched_steps() -> None:
    fig = attribution_figure(
        "grad/norm",
        ["embedding", "<b>head</b>"],
        SHARES.steps,
        SHARES.shares,
        SHARES.sum,
        SHARES.mismatched,
        x_range=(0, 20),
    )
    embedding, head, total, flags = fig["data"]
    assert [t["name"] for t in (embedding, head)] == ["embedding", "&lt;b&gt;head&lt;/b&gt;"]
    assert {t["stackgroup"] for t in (embedding, head)} == {"shares"}
    assert (embedding["x"], embedding["y"]) == ([0, 10, 20], [0.2, 0.2, 0.1])
    assert (total["name"], total["y"], "stackgroup" in total) == (
        "sum of the shares",
        [1.0, 1.0, 0.6],
        False,
    )
    assert (flags["name"], flags["x"], flags["y"], flags["yaxis"]) == (
        "parts ≠ total",
        [20],
        [1.0],
        "y2",
    )
    assert (flags["marker"]["color"], flags["text"]) == (MISMATCH_RED, ["sum 60.0%"])
    layout = fig["layout"]
    assert layout["xaxis"]["range"] == [0, 20] and layout["yaxis"]["tickformat"] == ".0%"
    assert layout["title"]["text"] == "share of grad/norm/total²"


def test_the_figure_without_mismatches_has_only_the_groups() -> None:
    fig = attribution_figure("grad/norm", ["a"], [0, 1], [[1.0, None]], [1.0, None], [])
    assert [t["name"] for t in fig["data"]] == ["a"]
    assert fig["layout"]["xaxis"]["autorange"] is True


# --- drawing, with a fake -----------------------------------------------------------------


@dataclass
class FakeAttribution:
    shares: Attribution = SHARES
    refusal: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def metric_names(self, who: Principal, run_id: str) -> list[str]:
        if run_id != RUN:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)
        return NAMES

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
        self.calls.append(
            {"prefix": prefix, "start": start, "end": end, "points": points, "by": by}
        )
        if self.refusal:
            raise Invalid(self.refusal)
        return self.shares


def test_section_picks_the_first_family_with_a_total() -> None:
    (picker,) = find(section(NAMES), "Dropdown", id="attribution-family")
    assert (picker["value"], picker["options"]) == (
        "grad/norm",
        [{"label": "grad/norm", "value": "grad/norm"}],
    )
    (empty,) = find(section([]), "Dropdown", id="attribution-family")
    assert (empty["value"], empty["options"]) == (None, [])


def test_draw_attribution_reads_the_family_over_the_views_range() -> None:
    data = FakeAttribution()
    view = RunView(RUN, start=100, end=900)
    fig, info = draw_attribution(data, WHO, view, "grad/norm", ["part"])
    assert data.calls == [
        {"prefix": "grad/norm", "start": 100, "end": 900, "points": COLUMNS, "by": "part"}
    ]
    assert [t["name"] for t in fig["data"]][:2] == ["embedding", "head"]
    assert fig["layout"]["xaxis"]["range"] == [100, 900]
    assert info == "parts do not add up to the total (±1 %) at 1 of 3 steps drawn, first at 20"
    # A family the run has no total of (or a crafted one): the first with a total, by group.
    draw_attribution(data, WHO, view, "params/norm", None)
    assert data.calls[-1]["prefix"] == "grad/norm" and data.calls[-1]["by"] == "group"


def test_draw_attribution_of_no_family_no_run_a_refusal_or_no_step() -> None:
    def message(drawn: tuple[dict[str, Any], str]) -> tuple[str, str]:
        return drawn[0]["layout"]["annotations"][0]["text"], drawn[1]

    class NoTotal(FakeAttribution):
        def metric_names(self, who: Principal, run_id: str) -> list[str]:
            return ["grad/norm/embed"]

    assert message(draw_attribution(NoTotal(), WHO, RunView(RUN), None, [])) == (NO_TOTAL, "")
    assert message(draw_attribution(FakeAttribution(), WHO, RunView("x"), None, [])) == (
        NO_TOTAL,
        "",
    )
    assert message(draw_attribution(FakeAttribution(), WHO, None, None, [])) == (NO_TOTAL, "")
    refused = FakeAttribution(refusal="2,100 metrics sit under 'grad/norm/'")
    assert message(draw_attribution(refused, WHO, RunView(RUN), None, [])) == (
        refused.refusal,
        "",
    )
    empty = FakeAttribution(shares=Attribution("grad/norm", ["a"], [], [[]], [], [], 0.01))
    assert message(draw_attribution(empty, WHO, RunView(RUN), None, [])) == (
        "No step logs grad/norm/total and its parts here.",
        "",
    )


# --- the real data ----------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    mine: Viewers
    run: str
    their_run: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    steps = np.arange(1000)
    parts = {"embed": 0.6, "layers.0": 0.48, "lm_head": 0.64}  # squares 0.36 + 0.2304 + 0.4096
    metrics = {f"grad/norm/{p}": [v] * 1000 for p, v in parts.items()}
    total = np.ones(1000)
    total[500:600] = 1.25  # a total over other parameters: the parts make 64 % of its square
    metrics["grad/norm/total"] = total.tolist()
    run = create_run(pg_server, mine, "shares")
    post_points(pg_server, mine, run, steps.tolist(), metrics)
    their_run = create_run(pg_server, theirs, "theirs")
    post_points(pg_server, theirs, their_run, steps.tolist(), metrics)
    return World(viewers(dashboard_sessions, mine), run, their_run)


def test_the_real_shares_and_sum_check(world: World, dashboard_data: DashboardData) -> None:
    fig, info = draw_attribution(dashboard_data, world.mine.read, RunView(world.run), None, [])
    embedding, blocks, head, total, flags = fig["data"]
    assert [t["name"] for t in (embedding, blocks, head)] == ["embedding", "blocks", "head"]
    assert embedding["y"][0] == pytest.approx(0.36) and head["y"][0] == pytest.approx(0.4096)
    # One step a column (600 of them over 1,000 steps): those in the hundred steps flagged.
    assert len(embedding["x"]) == COLUMNS
    assert flags["x"][0] == 500 and all(500 <= s < 600 for s in flags["x"])
    assert len(flags["x"]) == len([s for s in embedding["x"] if 500 <= s < 600])
    assert total["y"][embedding["x"].index(500)] == pytest.approx(0.64)
    assert info == (
        f"parts do not add up to the total (±1 %) at {len(flags['x'])} of 600 steps drawn, "
        "first at 500"
    )
    fig, info = draw_attribution(
        dashboard_data, world.mine.read, RunView(world.run, start=0, end=400), None, ["part"]
    )
    assert [t["name"] for t in fig["data"]] == ["embed", "layers.0", "lm_head"]
    assert info == "parts add up to the total (±1 %) at all 401 steps drawn"


def test_another_projects_run_has_no_attribution(
    world: World, dashboard_data: DashboardData
) -> None:
    with pytest.raises(RunNotFound):
        dashboard_data.attribution(
            world.mine.read, world.their_run, "grad/norm", start=None, end=None, points=10
        )
    fig, info = draw_attribution(
        dashboard_data, world.mine.read, RunView(world.their_run), None, []
    )
    assert (fig["layout"]["annotations"][0]["text"], info) == (NO_TOTAL, "")
