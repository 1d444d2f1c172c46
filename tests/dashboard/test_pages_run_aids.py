"""The run page's chart aids: which rules draw a threshold, the fits of a focused view, the
store they travel in and what the chart takes from it, and the section ticks; with a fake
data object, then with the dashboard's real data on Postgres."""

from __future__ import annotations

import doctest
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.figures import Line, OverlayView
from normwatch.dashboard.overlay_aids import Aids, FitLines, Threshold
from normwatch.dashboard.pages import run_aids
from normwatch.dashboard.pages.run import draw
from normwatch.dashboard.pages.run_aids import (
    RuleLine,
    SectionTicks,
    aids_of,
    fit_window,
    read_aids,
    rule_lines,
    sections_due,
    watches,
)
from normwatch.dashboard.pages.run_view import RunView
from normwatch.server.analytics.transitions import Fit, fit_transition
from normwatch.server.auth import Principal
from normwatch.server.errors import Invalid, RunNotFound
from normwatch.server.schemas import RunOut
from normwatch.server.schemas.alerts import AlertRuleOut
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .seed import (
    Viewers,
    create_rule,
    create_run,
    post_event,
    post_points,
    threshold_rule,
    viewers,
)

WHO = Principal(token_id=1, project_id=1, project="p", scope="read")
RUN = "r1"
GRAD, PARAM = "grad/norm/total", "params/norm/final_norm.weight"
NOW = "2025-01-01T00:00:00Z"


def test_doctests() -> None:
    failed, tried = doctest.testmod(run_aids)
    assert (failed, tried > 0) == (0, True)


def a_run(name: str = "32b-exp1295", tags: Sequence[str] = ("moe",)) -> RunOut:
    return RunOut.model_validate(
        {
            "id": RUN,
            "project": "p",
            "name": name,
            "status": "running",
            "segment": 1,
            "config": {},
            "tags": list(tags),
            "last_step": 4000,
            "last_seen": NOW,
            "created_at": NOW,
        }
    )


def a_rule(name: str, metric: str, condition: dict[str, Any], **more: Any) -> AlertRuleOut:
    return AlertRuleOut.model_validate(
        {
            "id": 1,
            "project": "p",
            "name": name,
            "metric": metric,
            "condition": condition,
            "channels": [],
            "runs": more.pop("runs", {"name": "*", "tags": []}),
            "enabled": more.pop("enabled", True),
            "created_at": NOW,
            "updated_at": NOW,
        }
    )


RULES = [
    a_rule("grad 5", GRAD, {"kind": "threshold", "op": ">", "value": 5.0}),
    a_rule("grad heading 5", GRAD, {"kind": "forecast", "op": ">=", "value": 5}),
    a_rule("layers", "grad/norm/layers.*", {"kind": "threshold", "op": ">", "value": 2.0}),
    a_rule("off", GRAD, {"kind": "threshold", "op": ">", "value": 1.0}, enabled=False),
    a_rule("spiky", GRAD, {"kind": "spike", "factor": 2.0}),
    a_rule("nan", GRAD, {"kind": "non_finite"}),
    a_rule(
        "other runs",
        GRAD,
        {"kind": "threshold", "op": ">", "value": 3.0},
        runs={"name": "7b-*", "tags": []},
    ),
    a_rule(
        "dense only",
        GRAD,
        {"kind": "threshold", "op": ">", "value": 4.0},
        runs={"name": "*", "tags": ["dense"]},
    ),
    a_rule(
        "share",
        "share(grad/norm/lm_head, grad/norm/total)",
        {"kind": "threshold", "op": ">", "value": 0.8},
    ),
]


# --- pure parts -----------------------------------------------------------------------------


def test_rule_lines_are_the_enabled_rules_with_a_value_that_watch_the_run() -> None:
    assert rule_lines(RULES, a_run()) == [
        RuleLine("grad 5", GRAD, 5.0, "threshold"),
        RuleLine("grad heading 5", GRAD, 5.0, "forecast"),
        RuleLine("layers", "grad/norm/layers.*", 2.0, "threshold"),
        RuleLine("share", "share(grad/norm/lm_head, grad/norm/total)", 0.8, "threshold"),
    ]
    names = [line.rule for line in rule_lines(RULES, a_run("7b-dense", ["dense"]))]
    assert names == ["grad 5", "grad heading 5", "layers", "other runs", "dense only", "share"]
    broken = a_rule(
        "broken", GRAD, {"kind": "threshold", "op": ">", "value": 1.0}, runs={"name": "[z-a]"}
    )
    assert rule_lines([broken], a_run()) == []  # and draws no line rather than failing


@pytest.mark.parametrize(
    ("selector", "metric", "watched"),
    [
        (GRAD, GRAD, True),
        ("grad/norm/*", GRAD, True),
        ("grad/**", "grad/norm/layers.3", True),
        ("grad/norm/layers.*", GRAD, False),
        ("share(a, b)", "share(a, b)", True),
        ("share(a, b)", "share(a,b)", False),
        ("grad/norm/*", "rss(grad/norm/*)", False),
        ("rss(grad/norm/*)", GRAD, False),
        ("grad/[z-a]", GRAD, False),  # saved before globs were checked: watches nothing
    ],
)
def test_watches(selector: str, metric: str, watched: bool) -> None:
    assert watches(selector, metric) is watched


@pytest.mark.parametrize(
    ("view", "window"),
    [
        (RunView(RUN, start=1800, end=2200, focus=2000), 200),
        (RunView(RUN, start=1900, end=2200, focus=2000), 200),
        (RunView(RUN, start=1999, end=2000, focus=2000), 1),
        (RunView(RUN, start=2000, end=2000, focus=2000), 1),
        (RunView(RUN, start=1800, end=2200, focus=2300), None),
        (RunView(RUN, focus=2000), None),
        (RunView(RUN, start=1800, end=2200), None),
    ],
)
def test_fit_window_reaches_both_ends_of_the_steps_shown(view: RunView, window: int | None) -> None:
    assert fit_window(view) == window


def test_sections_due() -> None:
    live, zoomed = RunView(RUN), RunView(RUN, start=0, end=9)
    assert sections_due(live, 20) == SectionTicks(True, True, True)
    assert sections_due(live, 10) == SectionTicks(True, False, True)
    assert sections_due(live, 7) == SectionTicks(False, False, False)
    assert sections_due(zoomed, 20) == SectionTicks(True, False, False)
    for n in (None, "20", True):
        assert sections_due(live, n) == SectionTicks(False, False, False)
    assert sections_due(None, 20) == SectionTicks(False, False, False)


# --- reading the aids, with a fake ----------------------------------------------------------


def steps_values() -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(4000)
    return steps, 78.0 + 0.02 * steps + 0.03 * np.clip(steps - 2000, 0, None)


@dataclass
class FakeAids:
    rules_of: list[AlertRuleOut] = field(default_factory=lambda: list(RULES))
    refusal: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def run(self, who: Principal, run_id: str) -> RunOut:
        if run_id != RUN:
            raise RunNotFound(f"no run with id {run_id!r}", run_id)
        return a_run()

    def rules(self, who: Principal) -> list[AlertRuleOut]:
        return self.rules_of

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
        self.calls.append(
            {"metrics": list(metrics), "at": at, "start": start, "end": end, "window": window}
        )
        if self.refusal:
            raise Invalid(self.refusal)
        steps, values = steps_values()
        inside = (steps >= (start or 0)) & (steps <= (end or 4000))
        fit = fit_transition(steps[inside], values[inside], at, window)
        return {} if fit is None else {PARAM: fit}


FOCUSED = RunView(RUN, GRAD, PARAM, 1800, 2200, focus=2000)


def test_read_aids_of_a_focused_view() -> None:
    data = FakeAids()
    store = read_aids(data, WHO, FOCUSED)
    assert data.calls == [
        {"metrics": [GRAD, PARAM], "at": 2000, "start": 1800, "end": 2200, "window": 200}
    ]
    assert store is not None
    assert store["run"] == RUN
    assert [t["rule"] for t in store["thresholds"]] == [
        "grad 5",
        "grad heading 5",
        "layers",
        "share",
    ]
    assert store["thresholds"][0] == {
        "rule": "grad 5",
        "metric": GRAD,
        "value": 5.0,
        "kind": "threshold",
    }
    fit = store["fit"]
    assert (fit["at"], fit["start"], fit["end"], list(fit["metrics"])) == (
        2000,
        1800,
        2200,
        [PARAM],
    )
    param = fit["metrics"][PARAM]
    assert param["slope_before"] == pytest.approx(20.0) and param["slope_after"] == pytest.approx(
        50.0
    )
    assert param["ratio"] == pytest.approx(2.5)
    # Each line over its own points: the one before ends at the last step before 2,000.
    assert param["before"] == [[1800, pytest.approx(114.0)], [1999, pytest.approx(117.98)]]
    assert param["after"] == [[2000, pytest.approx(118.0)], [2200, pytest.approx(128.0)]]
    # The kink has no jump: the levels either side meet at the step.
    assert param["level_change"] == pytest.approx(0.0, abs=1e-9)


def test_read_aids_without_a_focus_reads_no_fits() -> None:
    data = FakeAids()
    store = read_aids(data, WHO, replace(FOCUSED, focus=None))
    assert store is not None and store["fit"] is None and data.calls == []


def test_read_aids_of_a_refused_metric_keeps_the_thresholds() -> None:
    store = read_aids(FakeAids(refusal="no"), WHO, FOCUSED)
    assert store is not None and store["fit"]["metrics"] == {} and len(store["thresholds"]) == 4


def test_read_aids_of_no_run_of_the_viewers_project() -> None:
    assert read_aids(FakeAids(), WHO, RunView("theirs", GRAD, focus=1)) is None
    assert read_aids(FakeAids(), WHO, None) is None


# --- from the store to the chart ----------------------------------------------------------


def overlay(view: RunView) -> OverlayView:
    grad = Line(GRAD, list(range(0, 4000, 10)), [1.0 + 0.0005 * s for s in range(0, 4000, 10)])
    param = Line(PARAM, [0, 3999], [78.0, 200.0])
    return OverlayView(left=grad if view.left == GRAD else None, right=param, x_range=view.x_range)


def test_aids_of_the_store_for_the_view() -> None:
    store = read_aids(FakeAids(), WHO, FOCUSED)
    aids = aids_of(store, FOCUSED, overlay(FOCUSED))
    # The two rules at 5 on the grad norm share a line; the layer rule watches no charted metric.
    assert aids.thresholds == (Threshold(GRAD, 5.0, "grad 5 · grad heading 5", "threshold"),)
    (fit,) = aids.fits
    assert (fit.metric, fit.at, fit.before[1][0], fit.after[0][0]) == (PARAM, 2000, 1999, 2000)
    assert fit.level_change == pytest.approx(0.0, abs=1e-9)
    assert fit.ratio == pytest.approx(2.5)
    assert aids.forecast is None


def test_aids_of_a_view_asking_for_the_forecast() -> None:
    view = RunView(RUN, GRAD, PARAM, forecast=True)
    aids = aids_of(read_aids(FakeAids(), WHO, view), view, overlay(view))
    assert aids.forecast is not None and aids.forecast.metric == GRAD
    assert aids.forecast.target == 5.0
    # 2.995 at step 3990, rising 0.5 per 1k steps: 5 about 4,010 steps later.
    assert aids.forecast.eta == pytest.approx(4010, rel=1e-6)
    no_left = replace(view, left=None)
    assert aids_of(read_aids(FakeAids(), WHO, no_left), no_left, overlay(no_left)).forecast is None


@pytest.mark.parametrize(
    "change",
    [
        {"focus": 2100},  # a fit of another step
        {"start": 1700},  # or of another range
        {"focus": None},
    ],
)
def test_aids_of_fits_for_another_view_draw_no_fit(change: dict[str, Any]) -> None:
    store = read_aids(FakeAids(), WHO, FOCUSED)
    view = replace(FOCUSED, **change)
    aids = aids_of(store, view, overlay(view))
    assert aids.fits == () and len(aids.thresholds) == 1


@pytest.mark.parametrize(
    "store",
    [
        None,
        [],
        "aids",
        {"run": "theirs", "thresholds": [{"rule": "r", "metric": GRAD, "value": 1.0}]},
        {"run": RUN, "thresholds": "all"},
        {"run": RUN, "thresholds": [{"rule": 1, "metric": GRAD, "value": 1.0}]},
        {"run": RUN, "thresholds": [{"rule": "r", "metric": GRAD, "value": "1"}]},
        {"run": RUN, "thresholds": [{"rule": "r", "metric": GRAD, "value": float("inf")}]},
        {"run": RUN, "thresholds": [{"rule": "r", "metric": GRAD, "value": True}]},
        {"run": RUN, "thresholds": [["r", GRAD, 1.0]]},
        {"run": RUN, "fit": {"at": 2000, "start": 1800, "end": 2200, "metrics": []}},
        {"run": RUN, "fit": {"at": 2000, "start": 1800, "end": 2200, "metrics": {PARAM: 5}}},
        {
            "run": RUN,
            "fit": {
                "at": 2000,
                "start": 1800,
                "end": 2200,
                "metrics": {
                    PARAM: {
                        "slope_before": 1,
                        "slope_after": 2,
                        "before": [[1800, 1], [2000, "x"]],
                        "after": [[2000, 2], [2200, 3]],
                    }
                },
            },
        },
        {
            "run": RUN,
            "fit": {
                "at": 2000,
                "start": 1800,
                "end": 2200,
                "metrics": {
                    PARAM: {
                        "slope_before": None,
                        "slope_after": 2,
                        "before": [[1800, 1], [2000, 2]],
                        "after": [[2000, 2], [2200, 3]],
                    }
                },
            },
        },
    ],
)
def test_aids_of_a_crafted_store_draws_nothing(store: Any) -> None:
    assert aids_of(store, FOCUSED, overlay(FOCUSED)) == Aids()


def test_aids_of_a_well_formed_store_with_no_ratio() -> None:
    fit = {
        "slope_before": 0.0,
        "slope_after": 2,
        "ratio": None,
        "before": [[1800, 1], [2000, 1]],
        "after": [[2000, 1], [2200, 1.4]],
    }
    store = {"run": RUN, "fit": {"at": 2000, "start": 1800, "end": 2200, "metrics": {PARAM: fit}}}
    (drawn,) = aids_of(store, FOCUSED, overlay(FOCUSED)).fits
    assert drawn == FitLines(
        PARAM, 2000, ((1800, 1), (2000, 1)), ((2000, 1), (2200, 1.4)), 0, 2, None
    )


def test_aids_of_a_view_with_no_metrics_draws_nothing() -> None:
    store = read_aids(FakeAids(), WHO, FOCUSED)
    assert aids_of(store, RunView(RUN), None) == Aids()


# --- the real data ----------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    mine: Viewers
    run: str
    their_run: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    mine, theirs = make_tenant(pg_server.database_url), make_tenant(pg_server.database_url)
    create_rule(pg_server, mine, threshold_rule("grad-high", 5.0))
    create_rule(pg_server, theirs, threshold_rule("their-rule", 4.0))
    steps, values = steps_values()
    metrics = {PARAM: values.tolist(), GRAD: (1.0 + 0.0005 * steps).tolist()}
    run = create_run(pg_server, mine, "aids")
    post_points(pg_server, mine, run, steps.tolist(), metrics)
    post_event(pg_server, mine, run, 2000, "routing change", "config")
    their_run = create_run(pg_server, theirs, "theirs")
    post_points(pg_server, theirs, their_run, steps.tolist(), metrics)
    return World(viewers(dashboard_sessions, mine), run, their_run)


def test_the_real_fits_and_thresholds(world: World, dashboard_data: DashboardData) -> None:
    view = RunView(world.run, GRAD, PARAM, 1800, 2200, focus=2000)
    store = read_aids(dashboard_data, world.mine.read, view)
    assert store is not None
    assert store["thresholds"] == [
        {"rule": "grad-high", "metric": GRAD, "value": 5.0, "kind": "threshold"}
    ]
    fits = store["fit"]["metrics"]
    assert list(fits) == [GRAD, PARAM]
    assert fits[PARAM]["slope_before"] == pytest.approx(20.0)
    assert fits[PARAM]["ratio"] == pytest.approx(2.5)
    assert fits[GRAD]["ratio"] == pytest.approx(1.0)
    # The chart draws them: the threshold on the left axis, the fitted lines, their notes.
    fig, shape, _, _ = draw(dashboard_data, world.mine.read, view, None, trigger=None, aids=store)
    assert "threshold grad-high (5.0)|y" in shape
    assert f"fit after: {PARAM}|y2" in shape and f"fit before: {GRAD}|y" in shape
    notes = [a["text"] for a in fig["layout"]["annotations"]]
    # Both only bend (or not) at the step: no level change, to round-off.
    for slopes in (
        f"{PARAM}: 20 → 50 per 1k steps, ×2.5",
        f"{GRAD}: 0.5 → 0.5 per 1k steps, ×1",
    ):
        (note,) = [n for n in notes if n.startswith(f"{slopes}, level change ")]
        assert abs(float(note.rsplit(" ", 1)[1])) < 1e-9, note


def test_the_real_fits_of_an_expression(world: World, dashboard_data: DashboardData) -> None:
    ratio = f"ratio({PARAM}, {GRAD})"
    fits = dashboard_data.transition_fits(
        world.mine.read,
        world.run,
        [ratio, "never/logged"],
        at=2000,
        start=1000,
        end=3000,
        window=1000,
    )
    assert list(fits) == [ratio]
    with pytest.raises(Invalid, match="share takes 2 arguments"):
        dashboard_data.transition_fits(
            world.mine.read, world.run, ["share(a)"], at=2000, start=None, end=None, window=10
        )


def test_another_projects_run_has_no_aids(world: World, dashboard_data: DashboardData) -> None:
    view = RunView(world.their_run, GRAD, PARAM, 1800, 2200, focus=2000)
    assert read_aids(dashboard_data, world.mine.read, view) is None
    with pytest.raises(RunNotFound):
        dashboard_data.transition_fits(
            world.mine.read, world.their_run, [GRAD], at=2000, start=None, end=None, window=10
        )
