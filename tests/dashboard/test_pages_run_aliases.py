"""The run page of a trainer that logs other names: with the project's aliases, the overlay
defaults to the canonical total grad norm (drawn from its alias, labelled with both) and a
parameter norm; without them, to what the run logged."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from normwatch.dashboard.data import DashboardData
from normwatch.dashboard.pages.run import draw, layout
from normwatch.dashboard.pages.run_series import place_expression, run_names
from normwatch.dashboard.pages.run_view import RunView, default_metrics
from normwatch.testing import ServerProcess
from tests.helpers.tenants import make_tenant

from .components import find, tree
from .seed import create_run, post_points, viewers

STEPS = range(50)
MEGATRON = {
    "grad-norm": [1.0 + s / 10 for s in STEPS],
    "params-norm": [300.0 + s for s in STEPS],
    "lm loss": [5.0 - s / 100 for s in STEPS],
}


def store_of(page: Any) -> Any:
    (store,) = find(page, "Store", id="view")
    return store["data"]


@pytest.mark.parametrize(
    ("names", "canonical", "expected"),
    [
        (
            ["optim/total grad norm"],
            {"optim/total grad norm": "grad/norm/total"},
            ("grad/norm/total", None),
        ),
        (
            ["grad-norm", "params-norm"],
            {"grad-norm": "grad/norm/total", "params-norm": "params/norm/total"},
            ("grad/norm/total", "params/norm/total"),
        ),
        (
            ["grad_norm", "params/norm/final_norm.weight", "params-norm"],
            {"grad_norm": "grad/norm/total", "params-norm": "params/norm/total"},
            ("grad/norm/total", "params/norm/final_norm.weight"),
        ),
        (["optim/total grad norm", "train/CE loss"], {}, ("optim/total grad norm", None)),
    ],
)
def test_default_metrics_count_the_canonical_names_of_aliases(
    names: list[str], canonical: dict[str, str], expected: tuple[str | None, str | None]
) -> None:
    assert default_metrics(names, canonical) == expected


def test_run_page_defaults_to_the_aliased_grad_norm_and_labels_it(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run = create_run(pg_server, tenant, "megatron-run")
    post_points(pg_server, tenant, run, STEPS, MEGATRON)
    who = viewers(dashboard_sessions, tenant)
    # Without aliases the left axis takes the first name the run logged.
    assert (
        store_of(layout(dashboard_data, who.read, {}, run))
        == RunView(run, "grad-norm", None).to_store()
    )
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("admin")) as api:
        r = api.put(f"/api/v1/projects/{tenant.project}/aliases", json={"presets": ["megatron"]})
        assert r.status_code == 200, r.text
    page = layout(dashboard_data, who.read, {}, run)
    view = RunView(run, "grad/norm/total", "params/norm/total")
    assert store_of(page) == view.to_store()
    fig, _, info, _ = draw(dashboard_data, who.read, view, None, trigger="view")
    assert [t["name"] for t in fig["data"]] == [
        "grad/norm/total (grad-norm)",
        "params/norm/total (params-norm)",
    ]
    assert fig["data"][0]["y"] == MEGATRON["grad-norm"]
    assert fig["data"][1]["y"] == MEGATRON["params-norm"]
    assert info.startswith("grad/norm/total: 50 points")


def test_spikes_and_fits_of_canonical_names_read_their_aliases(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run = create_run(pg_server, tenant, "megatron-run")
    post_points(pg_server, tenant, run, STEPS, MEGATRON)
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("admin")) as api:
        r = api.put(f"/api/v1/projects/{tenant.project}/aliases", json={"presets": ["megatron"]})
        assert r.status_code == 200, r.text
    who = viewers(dashboard_sessions, tenant)
    report = dashboard_data.spike_report(
        who.read,
        run,
        ["grad/norm/total"],
        optional=["params/norm/total", "updates/norm/total"],
        start=None,
        end=None,
    )
    assert list(report.fraction_in_spikes) == ["grad/norm/total", "params/norm/total"]
    fits = dashboard_data.transition_fits(
        who.read, run, ["params/norm/total"], at=25, start=None, end=None, window=10
    )
    # params-norm grows by 1 a step: 1,000 per 1,000 steps on both sides.
    fit = fits["params/norm/total"]
    assert (fit.slope_before, fit.slope_after) == (pytest.approx(1000.0), pytest.approx(1000.0))


def test_a_typed_canonical_name_is_known_and_a_typo_of_it_is_named_with_it(
    pg_server: ServerProcess,
    dashboard_sessions: sessionmaker[Session],
    dashboard_data: DashboardData,
) -> None:
    """The expression field checks the names the run can be read by: with the project's
    Megatron aliases, ``grad/norm/total`` (stored as ``grad-norm``) is drawn, and a typo
    of it is refused with it as the closest name."""
    tenant = make_tenant(pg_server.database_url)
    run = create_run(pg_server, tenant, "megatron-run")
    post_points(pg_server, tenant, run, STEPS, MEGATRON)
    who = viewers(dashboard_sessions, tenant)
    view = RunView(run, "grad-norm", None)
    typed = "ratio(lm loss, grad/norm/total)"
    refused = place_expression(typed, "left", [], [], [], run_names(dashboard_data, who.read, view))
    assert "no metric 'grad/norm/total' in this run" in tree(refused[2])["props"]["children"]
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("admin")) as api:
        r = api.put(f"/api/v1/projects/{tenant.project}/aliases", json={"presets": ["megatron"]})
        assert r.status_code == 200, r.text
    names = run_names(dashboard_data, who.read, view)
    assert "grad/norm/total" in names and "grad-norm" in names
    placed = place_expression(typed, "left", [], [], [], names)
    assert placed[0] == [typed]
    typo = place_expression("grad/norm/totl", "left", [], [], [], names)
    assert tree(typo[2])["props"]["children"] == (
        "Cannot draw grad/norm/totl: no metric 'grad/norm/totl' in this run "
        "(closest: 'grad/norm/total')"
    )
    fig, _, info, _ = draw(
        dashboard_data,
        who.read,
        RunView(run, "grad-norm", None, extra=(typed,)),
        None,
        trigger=None,
    )
    assert info.startswith("grad-norm: 50 points")
    assert [t["name"] for t in fig["data"]] == ["grad-norm", typed]
