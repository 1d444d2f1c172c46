"""Names a run never logged, over HTTP on each backend: every read that takes metric names
(series, export, transitions, spikes, layers, attribution, compare, and `Api.history` above
the export) answers 404 naming them with the closest names the run has, in the shape of
every refusal (``detail``) plus ``unknown`` and ``suggestions``; an alias that resolves to
a stored metric is no unknown name; and another project's run is a 403 before any name is
looked at."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from normwatch.client import Api, ApiError
from normwatch.testing import ServerProcess
from tests.helpers.api import create_run
from tests.helpers.tenants import Tenant, make_tenant

GRAD, LOSS = "grad/norm/total", "train/loss"
LAYERS = {f"grad/norm/layers.{i}": [0.1 * (i + 1)] * 40 for i in range(3)}


def post(api: httpx.Client, tenant: Tenant, run_id: str, **metrics: list[float]) -> None:
    steps = list(range(len(next(iter(metrics.values())))))
    r = api.post(
        f"/api/v1/runs/{run_id}/metrics",
        json={"steps": steps, "metrics": metrics},
        headers=tenant.headers("ingest"),
    )
    assert r.status_code == 202, r.text


@pytest.fixture
def run_id(api: httpx.Client, tenant: Tenant) -> str:
    """A run logging a total grad norm, three layers and a loss, 40 steps."""
    run = create_run(api, tenant, "logged")
    post(
        api,
        tenant,
        run,
        **{GRAD: [1.0] * 40, LOSS: [3.0 - 0.01 * s for s in range(40)], **LAYERS},
    )
    return run


def get(api: httpx.Client, tenant: Tenant, path: str, **params: Any) -> httpx.Response:
    return api.get(path, params=params, headers=tenant.headers("read"))


READS = {
    "series": ("/api/v1/runs/{run}/series", {}),
    "export": ("/api/v1/runs/{run}/export", {}),
    "jsonl export": ("/api/v1/runs/{run}/export", {"format": "jsonl"}),
    "parquet export": ("/api/v1/runs/{run}/export", {"format": "parquet"}),
    "transitions": ("/api/v1/runs/{run}/transitions", {}),
    "spikes": ("/api/v1/runs/{run}/spikes", {}),
}


@pytest.mark.parametrize("read", READS)
def test_every_read_of_names_refuses_those_never_logged_with_the_closest(
    api: httpx.Client, tenant: Tenant, run_id: str, read: str
) -> None:
    path, extra = READS[read]
    asked = [LOSS, "grad/norm/totl", "ratio(train/los, grad/nrom/*)"]
    r = get(api, tenant, path.format(run=run_id), metric=asked, **extra)
    assert r.status_code == 404, r.text
    assert r.json() == {
        "detail": "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total'); "
        "no metric 'train/los' in this run (closest: 'train/loss'); "
        "'grad/nrom/*' matches no metric of this run (closest: 'grad/norm/*', "
        "'grad/norm/total', 'grad/norm/layers.0')",
        "unknown": ["grad/norm/totl", "train/los", "grad/nrom/*"],
        "suggestions": {
            "grad/norm/totl": [GRAD],
            "train/los": [LOSS],
            "grad/nrom/*": ["grad/norm/*", GRAD, "grad/norm/layers.0"],
        },
    }
    # The same read of names the run has answers.
    fixed = [LOSS, GRAD, "ratio(train/loss, grad/norm/*)"]
    assert get(api, tenant, path.format(run=run_id), metric=fixed, **extra).status_code == 200


@pytest.mark.parametrize("read", ["layers", "attribution"])
def test_a_prefix_with_nothing_under_it_is_a_404_with_the_closest_prefixes(
    api: httpx.Client, tenant: Tenant, run_id: str, read: str
) -> None:
    r = get(api, tenant, f"/api/v1/runs/{run_id}/{read}", prefix="grad/nrom")
    assert r.status_code == 404, r.text
    assert r.json() == {
        "detail": "no metric under 'grad/nrom' in this run (closest: 'grad/norm')",
        "unknown": ["grad/nrom"],
        "suggestions": {"grad/nrom": ["grad/norm"]},
    }
    assert get(api, tenant, f"/api/v1/runs/{run_id}/{read}", prefix="grad/norm").is_success


def test_attribution_without_the_total_names_it(api: httpx.Client, tenant: Tenant) -> None:
    run = create_run(api, tenant, "parts only")
    post(api, tenant, run, **LAYERS)
    r = get(api, tenant, f"/api/v1/runs/{run}/attribution", prefix="grad/norm")
    assert r.status_code == 404, r.text
    assert r.json()["unknown"] == [GRAD]
    # The layer grid needs no total.
    assert get(api, tenant, f"/api/v1/runs/{run}/layers", prefix="grad/norm").is_success


def test_compare_answers_while_one_run_has_the_metric_and_says_which_lack_it(
    api: httpx.Client, tenant: Tenant, run_id: str
) -> None:
    other = create_run(api, tenant, "loss only")
    post(api, tenant, other, **{LOSS: [2.0, 1.5, 1.25]})
    r = get(api, tenant, "/api/v1/compare", run=[run_id, other], metric=GRAD)
    assert r.status_code == 200, r.text
    has, lacks = r.json()["runs"]
    assert (has["missing"], has["summary"]["points"]) == ([], 40)
    assert (lacks["missing"], lacks["summary"]["points"], lacks["series"]["steps"]) == (
        [GRAD],
        0,
        [],
    )
    assert lacks["summary"]["spike_count"] == 0 and lacks["summary"]["max"] is None
    # A name no compared run has: a 404 naming the runs that lack it.
    r = get(api, tenant, "/api/v1/compare", run=[run_id, other], metric="train/los")
    assert r.status_code == 404, r.text
    assert r.json() == {
        "detail": f"no metric 'train/los' in runs {run_id}, {other} (closest: 'train/loss')",
        "unknown": ["train/los"],
        "suggestions": {"train/los": [LOSS]},
        "missing_in": {"train/los": [run_id, other]},
    }
    # An expression that every run lacks a part of, a different part each.
    r = get(api, tenant, "/api/v1/compare", run=[run_id, other], metric=f"ratio({LOSS}, {GRAD})")
    assert r.status_code == 200, r.text
    assert [run["missing"] for run in r.json()["runs"]] == [[], [GRAD]]


def test_a_canonical_name_an_alias_stands_for_is_known_everywhere(
    server: ServerProcess, tenant: Tenant
) -> None:
    """OLMo-core's names under its preset: the canonical names read, and are suggested."""
    admin = tenant.headers("admin")
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as api:
        run = create_run(api, name="olmo")
        olmo = {"optim/total grad norm": [1.5, 2.5, 9.0] * 10, "train/CE loss": [4.0] * 30}
        r = api.post(
            f"/api/v1/runs/{run}/metrics", json={"steps": list(range(30)), "metrics": olmo}
        )
        assert r.status_code == 202, r.text
        before = api.get(f"/api/v1/runs/{run}/series", params={"metric": GRAD})
        assert before.status_code == 404 and before.json()["unknown"] == [GRAD]
        r = api.put(f"/api/v1/projects/{tenant.project}/aliases", json={"presets": ["olmo-core"]})
        assert r.status_code == 200, r.text
        for path in ("series", "export", "spikes", "transitions"):
            r = api.get(
                f"/api/v1/runs/{run}/{path}", params={"metric": [GRAD, f"ratio({LOSS}, {GRAD})"]}
            )
            assert r.status_code == 200, (path, r.text)
        r = api.get("/api/v1/compare", params={"run": run, "metric": GRAD})
        assert r.status_code == 200 and r.json()["runs"][0]["missing"] == []
        r = api.get(f"/api/v1/runs/{run}/series", params={"metric": "train/los"})
        assert r.status_code == 404
        # The canonical name first (closest), then the stored alias it reads.
        assert r.json()["suggestions"] == {"train/los": [LOSS, "train/CE loss"]}


def test_another_projects_run_is_a_403_before_any_name_is_looked_at(
    api: httpx.Client, tenant: Tenant, run_id: str, server: ServerProcess
) -> None:
    other = make_tenant(server.database_url)
    for path in ("series", "export", "spikes", "transitions"):
        r = get(api, other, f"/api/v1/runs/{run_id}/{path}", metric="grad/norm/totl")
        assert r.status_code == 403, r.text
        assert "grad/norm" not in r.text
    r = get(api, other, "/api/v1/compare", run=run_id, metric="grad/norm/totl")
    assert r.status_code == 403 and "grad/norm" not in r.text
    assert get(api, tenant, f"/api/v1/runs/{'f' * 32}/series", metric="x").status_code == 404
    assert "unknown" not in get(api, tenant, f"/api/v1/runs/{'f' * 32}/series", metric="x").json()


def test_history_raises_an_api_error_carrying_the_names_and_suggestions(
    server: ServerProcess, tenant: Tenant, run_id: str
) -> None:
    with Api(server.url, tenant.read) as client:
        with pytest.raises(ApiError) as refused:
            client.history(run_id, [GRAD, "grad/norm/totl"])
        assert refused.value.status == 404
        assert refused.value.unknown == ["grad/norm/totl"]
        assert refused.value.suggestions == {"grad/norm/totl": [GRAD]}
        assert "no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total')" in str(
            refused.value
        )
        with pytest.raises(ApiError) as glob:
            client.history_frame(run_id, "grad/norm/layer.*")
        assert glob.value.unknown == ["grad/norm/layer.*"]
        assert glob.value.suggestions["grad/norm/layer.*"][0].startswith("grad/norm/layers.")
        with pytest.raises(ApiError) as spikes:
            client.spikes(run_id, "train/los")
        assert spikes.value.suggestions == {"train/los": [LOSS]}
        # Any other refusal carries none.
        with pytest.raises(ApiError) as bad:
            client.history(run_id, "ratio(a)")
        assert (bad.value.status, bad.value.unknown, bad.value.suggestions) == (422, [], {})
