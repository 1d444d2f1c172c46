"""The compare page's mean and band, its groups by a config key and its panels: the view and
its URL, and the chart drawn from the dashboard's real reads on Postgres, where a run long
enough to be downsampled keeps its spikes inside the band at every zoom."""

from __future__ import annotations

import doctest
from dataclasses import dataclass, replace
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard import compare_legend, compare_traces, transforms
from normwatch.dashboard.compare_legend import legend_title
from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.figures import RUN_COLORS
from normwatch.dashboard.pages import compare_links, compare_title
from normwatch.dashboard.pages.compare import draw, layout
from normwatch.dashboard.pages.compare_js import URL_SYNC_JS, ZOOM_JS
from normwatch.dashboard.pages.compare_title import titles_of
from normwatch.dashboard.pages.compare_view import MAX_PANELS, CompareView, compare_href
from normwatch.dashboard.pages.compare_view import update_view as updated
from normwatch.dashboard.routing import query_of
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find
from .seed import Viewers, create_run, post_points, viewers

TOTAL, LOSS, HEAD = "grad/norm/total", "train/loss", "grad/norm/lm_head"
LAST = 49_999
SPIKES = {29_988: 37.5, 41_134: 52.25}
SHORT_END = 19_500


def spiky(step: int) -> float:
    """The spiky run's grad norm: a slow climb from 1 by 1/65,536 a step (exact in float32),
    and two spikes."""
    return SPIKES.get(step, 1 + step / 65_536)


def short(step: int) -> float:
    """The short run's grad norm: a slow fall from 2 by 1/65,536 a step."""
    return 2 - step / 65_536


def test_doctests() -> None:
    for module in (compare_legend, compare_links, compare_title, compare_traces, transforms):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 0) == (0, True), module.__name__


# --- the view and its URL -------------------------------------------------------------------


def test_metric_repeated_in_the_url_draws_a_panel_each() -> None:
    query = query_of(f"?run=a&metric={TOTAL}&metric={LOSS}&metric={TOTAL}&metric={HEAD}")
    metrics = query.every("metric")
    view = CompareView.from_query(["a"], [[TOTAL]], metric=metrics[0], more=metrics[1:])
    assert view.metrics == (TOTAL, LOSS, HEAD)  # a repeat is drawn once
    many = [f"m{i}" for i in range(9)]
    capped = CompareView.from_query(["a"], [[TOTAL]], metric=TOTAL, more=many)
    assert len(capped.metrics) == MAX_PANELS
    assert CompareView.from_store(view.to_store()) == view
    # The single-metric link reads as it always did.
    assert CompareView.from_query(["a"], [[TOTAL]], metric=LOSS) == CompareView(("a",), LOSS)


def test_group_by_in_the_url_and_the_link_the_runs_table_makes() -> None:
    href = compare_href(["r1", "r2", "r3"], LOSS, more=[TOTAL], group_by="optimizer.lr")
    assert href == (
        "/compare?run=r1&run=r2&run=r3&metric=train%2Floss&metric=grad%2Fnorm%2Ftotal"
        "&group_by=optimizer.lr"
    )
    query = query_of(href.partition("?")[2])
    metrics = query.every("metric")
    view = CompareView.from_query(
        query.every("run"),
        [[LOSS, TOTAL]] * 3,
        metric=metrics[0],
        more=metrics[1:],
        group_by=query.get("group_by"),
    )
    assert view == CompareView(
        ("r1", "r2", "r3"), LOSS, more_metrics=(TOTAL,), group_by="optimizer.lr"
    )
    assert CompareView.from_query(["a"], [[LOSS]], group_by="k" * 201).group_by is None


@pytest.mark.parametrize(
    "crafted",
    [
        {"runs": ["r1"], "metric": "m", "more_metrics": "n"},
        {"runs": ["r1"], "metric": "m", "more_metrics": ["m"]},
        {"runs": ["r1"], "metric": "m", "more_metrics": ["n", "n"]},
        {"runs": ["r1"], "metric": "m", "more_metrics": ["a", "b", "c", "d"]},
        {"runs": ["r1"], "metric": "m", "more_metrics": [""]},
        {"runs": ["r1"], "more_metrics": ["n"]},
        {"runs": ["r1"], "group_by": ""},
        {"runs": ["r1"], "group_by": 3},
        {"runs": ["r1"], "group_by": "k" * 201},
    ],
)
def test_a_crafted_store_of_panels_or_groups_holds_no_view(crafted: Any) -> None:
    assert CompareView.from_store(crafted) is None


def test_the_pickers_of_more_metrics_and_of_the_group_key_change_the_view() -> None:
    view = CompareView(("r1", "r2"), TOTAL)
    base: dict[str, Any] = {"picked": None, "expression": None, "relayout": None}
    more = updated(view, **base, trigger="compare-more", more=[LOSS, TOTAL, LOSS])
    assert more == replace(view, more_metrics=(LOSS,))
    assert updated(more, **base, trigger="compare-more", more=[]) == view
    # Picking a further metric as the first takes it out of the others.
    assert updated(more, **{**base, "picked": LOSS}, trigger="compare-metric") == CompareView(
        ("r1", "r2"), LOSS
    )
    grouped = updated(view, **base, trigger="compare-group-by", group_by="lr")
    assert grouped == replace(view, group_by="lr")
    assert updated(grouped, **base, trigger="compare-group-by", group_by=None) == view
    assert updated(view, **base, trigger="compare-group-by", group_by=["lr"]) is None


def test_the_address_and_the_zoom_scripts_know_panels_and_groups() -> None:
    assert 'params.append("metric", metric)' in URL_SYNC_JS
    assert 'params.set("group_by", view.group_by)' in URL_SYNC_JS
    assert '"xaxis." + found[1]' in ZOOM_JS


# --- on Postgres ------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    mine: Viewers
    spiky: str
    short: str


@pytest.fixture(scope="module")
def world(pg_server: ServerProcess, dashboard_sessions: sessionmaker[Session]) -> World:
    """A run of 50,000 steps (twelve times what a chart draws: downsampled) with two
    spikes, beside one that ends at step 19,500; their lr differs."""
    tenant = make_tenant(pg_server.database_url)
    first = create_run(pg_server, tenant, "spiky", {"lr": 1e-3})
    steps = list(range(LAST + 1))
    post_points(
        pg_server,
        tenant,
        first,
        steps,
        {TOTAL: [spiky(s) for s in steps], LOSS: [4.0] * len(steps)},
    )
    second = create_run(pg_server, tenant, "short", {"lr": 3e-4})
    post_points(
        pg_server,
        tenant,
        second,
        steps[: SHORT_END + 1],
        {TOTAL: [short(s) for s in steps[: SHORT_END + 1]]},
    )
    return World(viewers(dashboard_sessions, tenant), first, second)


def traces(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in fig["data"]}


def at_step(trace: dict[str, Any], step: int) -> Any:
    """A band trace's value at ``step``: its bucket's, held from the bucket's first step."""
    index = max(i for i, x in enumerate(trace["x"]) if x <= step)
    return trace["y"][index]


def test_the_band_keeps_both_spikes_of_a_downsampled_run_at_every_zoom(
    world: World, dashboard_data: DashboardData
) -> None:
    who = world.mine.read
    view = CompareView((world.spiky, world.short), TOTAL, group="mean")
    fig, info, *_ = draw(dashboard_data, who, view)
    assert "spiky (downsampled, spikes kept)" in info
    drawn = traces(fig)
    name = "mean of 2 runs (1 after step 19,500)"
    assert list(drawn) == ["spiky (raw)", "short (raw)", "min", "max", name]
    raw = drawn["spiky (raw)"]
    assert [raw["y"][raw["x"].index(s)] for s in SPIKES] == list(SPIKES.values())
    high, low, mean = drawn["max"], drawn["min"], drawn[name]
    # Buckets of 50 steps, as the run was downsampled: the spikes' buckets reach them.
    assert mean["x"][:3] == [0, 50, 100] and len(mean["x"]) == 1001
    assert [at_step(high, s) for s in SPIKES] == [37.5, 52.25]
    # The least of the buckets 29,950-29,999 and 41,100-41,149: their first steps' values.
    assert [at_step(low, s) for s in SPIKES] == [spiky(29_950), spiky(41_100)]
    # The mean there is the spiky run's alone: its first and last point in the bucket, not
    # dragged up by the spike.
    assert at_step(mean, 29_988) == (spiky(29_950) + spiky(29_999)) / 2
    counts = [c[0] for c in mean["customdata"]]
    ending = mean["x"].index(SHORT_END)
    assert (counts[0], counts[ending], counts[ending + 1], counts[-1]) == (2, 2, 1, 1)
    assert (at_step(low, 0), at_step(high, 0)) == (1.0, 2.0)
    assert fig["layout"]["legend"]["title"]["text"] == legend_title(mean=True)

    # Zoomed around the first spike: read again over 2,001 steps, the band still reaches it.
    zoomed = replace(view, start=29_000, end=31_000)
    fig, *_ = draw(dashboard_data, who, zoomed)
    drawn = traces(fig)
    assert at_step(drawn["max"], 29_988) == 37.5
    assert at_step(drawn["max"], 29_990) == spiky(29_990)  # the bucket 29,989-29,990
    assert list(drawn)[-1] == "mean of 1 run"  # the short run has no point here


def test_runs_grouped_by_lr_and_a_second_metric_in_its_own_panel(
    world: World, dashboard_data: DashboardData
) -> None:
    who = world.mine.read
    view = CompareView((world.spiky, world.short), TOTAL, more_metrics=(LOSS,), group_by="lr")
    fig, info, *_ = draw(dashboard_data, who, view)
    names = [t["name"] for t in fig["data"] if t.get("legendgroup", "").startswith("group")]
    assert [n for n in names if n not in ("min", "max")] == [
        f"{TOTAL} · lr = 0.001: mean of 1 run",
        f"{TOTAL} · lr = 0.0003: mean of 1 run",
        f"{LOSS} · lr = 0.001: mean of 1 run",
    ]
    colours = {t["name"]: t["line"]["color"] for t in fig["data"]}
    assert colours[f"{TOTAL} · lr = 0.0003: mean of 1 run"] == RUN_COLORS[1]
    layout_ = fig["layout"]
    assert (layout_["yaxis"]["title"]["text"], layout_["yaxis3"]["title"]["text"]) == (TOTAL, LOSS)
    assert layout_["xaxis2"]["matches"] == "x"
    assert layout_["legend"]["title"]["text"] == legend_title(group_by="lr")
    assert [line.children.split(":")[0] for line in info] == [TOTAL, LOSS]
    assert "short: never logged 'train/loss'" in info[1].children


def test_the_page_offers_the_keys_that_differ_and_draws_the_linked_panels(
    world: World, dashboard_data: DashboardData
) -> None:
    who = world.mine.read
    href = compare_href([world.spiky, world.short], LOSS, more=[TOTAL], group_by="lr")
    page = layout(dashboard_data, who, query_of(href.partition("?")[2]))
    (picker,) = find(page, "Dropdown", id="compare-group-by")
    assert ([o["value"] for o in picker["options"]], picker["value"]) == (["lr"], "lr")
    (more,) = find(page, "Dropdown", id="compare-more")
    assert more["value"] == [TOTAL]
    (store,) = find(page, "Store", id="compare-view")
    assert CompareView.from_store(store["data"]) == CompareView(
        (world.spiky, world.short), LOSS, more_metrics=(TOTAL,), group_by="lr"
    )
    # The squares beside the names are the colours the chart draws the runs in: by lr,
    # two values, two colours; ungrouped, each run's own.
    (configs,) = find(page, "Store", id="compare-configs")
    assert configs["data"] == {"labels": ["spiky", "short"], "diff": {"lr": [1e-3, 3e-4]}}
    squares = [s["style"]["background"] for s in find(page, "Span", className="swatch")]
    assert squares == [RUN_COLORS[0], RUN_COLORS[1]]
    same = {"labels": ["spiky", "short"], "diff": {}}
    spans = titles_of(store["data"], same)
    assert spans is not None
    assert [s.children[0].style["background"] for s in spans] == [RUN_COLORS[0]] * 2
    assert titles_of(store["data"], {"labels": ["one"], "diff": {}}) is None
    assert titles_of(store["data"], {"labels": [1, 2], "diff": {}}) is None
    assert titles_of(None, configs["data"]) is None
